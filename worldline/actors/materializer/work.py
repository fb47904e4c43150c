"""Work requests filed by agents: the ``PutWork`` op (:func:`put_work`). Work is an
entity ``work:<id>`` (kind, assignee, goal, priority, due, status, requester); anyone
may file work requested by themselves, and its requester, its assignee, an admin or a
holder of a ``work.status`` grant may update it, at the version they expect; how many
open items one agent may put on another is capped
(:mod:`worldline.actors.materializer.workload`). Filing
itself (the assignee's ``WorkAssigned``, propagation) is
:func:`worldline.actors.materializer.propagation.file_work`, shared with the rules that
file work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldline.actors.materializer import workload
from worldline.actors.materializer.authority import may_write, work_owners
from worldline.actors.materializer.propagation import file_work
from worldline.actors.materializer.reject import Reject
from worldline.actors.materializer.tx import require
from worldline.protocols.world import WORK, Entity, agent_ref

if TYPE_CHECKING:
    from worldline.actors.materializer.tx import Tx
    from worldline.protocols.messages import PutWork
    from worldline.protocols.world import Value, WorldDecl

__all__ = ["put_work"]


def put_work(tx: Tx, decl: WorldDecl, op: PutWork) -> None:
    ref = f"{WORK}:{op.work_id}"
    require(tx, agent_ref(op.assigned_to))
    existing = tx.entity(ref)
    admin = op.author in decl.authority.admins
    if existing is None:
        if op.requested_by != op.author and not admin:
            raise Reject(
                "unauthorized",
                f"{op.author} may not file work as requested by {op.requested_by}",
            )
        entity = Entity(id=ref, type=WORK)
        version = 0
    else:
        entity = existing
        if not (
            admin
            or op.author in work_owners(existing)
            or may_write(decl, op.author, WORK, "status")
        ):
            raise Reject(
                "unauthorized",
                f"{op.author} neither requested nor is assigned {ref}",
            )
        version = existing.version
    if op.expect_version is not None and op.expect_version != version:
        raise Reject(
            "version_conflict",
            f"{ref} is at version {version}, not {op.expect_version}",
            version=version,
        )
    fields: dict[str, Value] = {
        "kind": op.work_kind,
        "assigned_to": op.assigned_to,
        "goal": op.goal,
        "priority": op.priority,
        "due_at": None if op.due_at is None else op.due_at.isoformat(),
        "status": op.status,
        "requested_by": op.requested_by,
    }
    # The requester's own name, at most MAX_OPEN_WORK open items per pair, and
    # at most as many of its WorkAssigned left unacked.
    workload.check(
        tx, decl, op.author, ref, workload.current(existing), fields, announces=True
    )
    file_work(
        tx,
        decl,
        entity,
        fields,
        author=op.author,
        cause=op.op_id,
        at=op.at,
        rule="",
        depth=0,
    )

"""Settling contradictions: a ``ResolveContradiction`` op, checked here (its author
is the sender and may settle: the operator, the world's admins, or an agent of the
declaration's ``[trust] settle``; a named winner is a belief the log has created) and
passed on
to the projector, which keeps each contradiction's lifecycle and applies the
resolution to the contradiction it names if that was opened before it in the log
(docs/belief-math.md, "Contradictions").

State keys: ``resolution/<w>/<contradiction id>/<seq>`` -> ``ContradictionResolved``.
Output: ``ContradictionResolved`` on ``wl.<world>.state.contradiction``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldline.actors.belief_model import charter
from worldline.actors.materializer.declaration import load_decl
from worldline.actors.materializer.keys import known_key
from worldline.actors.materializer.reject import Reject
from worldline.actors.runtime.spec import Outgoing
from worldline.protocols.messages import ContradictionResolved, encode
from worldline.protocols.subjects import state
from worldline.protocols.world import OPERATOR

if TYPE_CHECKING:
    from worldline.actors.materializer.tx import Tx
    from worldline.protocols.messages import ResolveContradiction

__all__ = ["resolution_key", "resolve"]


def resolution_key(world: str, contradiction_id: str, seq: int) -> bytes:
    return f"resolution/{world}/{contradiction_id}/{seq:012d}".encode()


def resolve(tx: Tx, op: ResolveContradiction) -> None:
    """Record the resolution and put it on the change feed.

    Raises:
        Reject: ``unauthorized`` when the author may not settle the world's
            contradictions (the operator, the declaration's admins and the agents of
            its ``[trust] settle`` may: :func:`charter.may_settle`, the rule fusion
            applies to trust); ``unknown_entity`` when the winner is no belief of
            the world.
    """
    if not charter.may_settle(load_decl(tx, tx.world), op.author):
        raise Reject(
            "unauthorized",
            f"{op.author} may not settle contradictions in world {tx.world!r}: only "
            f"the {OPERATOR}, the world's admins and the agents its declaration "
            "lists in [trust] settle may",
        )
    if op.winner is not None and tx.get(known_key(tx.world, op.winner)) is None:
        raise Reject(
            "unknown_entity",
            f"winner {op.winner} is no belief of world {tx.world!r}; name one end "
            f"of contradiction {op.contradiction_id} (`worldline contradictions`), "
            "or leave --winner out",
        )
    seq = tx.ctx.seq
    change = ContradictionResolved(
        contradiction_id=op.contradiction_id,
        reason=op.reason,
        winner=op.winner or "",
        author=op.author,
        at=op.at,
        seq=seq,
    )
    tx.put(resolution_key(tx.world, op.contradiction_id, seq), encode(change))
    tx.out.append(
        Outgoing(
            state(tx.world, "contradiction"),
            change,
            f"state:{tx.world}:contradiction:{op.contradiction_id}:{seq}",
        )
    )

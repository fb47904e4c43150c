"""Materializer core for the crew world: :func:`handle` applies one crew op, or
rejects it with a reason code, never silently. Pure, synchronous, deterministic.

Every time it uses is the op's own ``at`` (never the wall clock), and every version is
the op's OPS stream sequence, so replaying the log rebuilds the same bytes.

This module checks the author and dispatches; each concern has a module of its own:

- :mod:`~worldline.actors.materializer.tx`: the op's working set and the change feed it
  emits;
- :mod:`~worldline.actors.materializer.declaration`: declaring a world, and who may;
- :mod:`~worldline.actors.materializer.authority`: grants, admins, work and edge
  ownership;
- :mod:`~worldline.actors.materializer.fields`,
  :mod:`~worldline.actors.materializer.versions`: entities, fields and their per-field
  versions;
- :mod:`~worldline.actors.materializer.edges`: entity edges and belief links;
- :mod:`~worldline.actors.materializer.work`: work requests agents file;
- :mod:`~worldline.actors.materializer.propagation`: subscriptions, rules and dampening;
- :mod:`~worldline.actors.materializer.inboxes`: inbox records, summaries and acks;
- :mod:`~worldline.actors.materializer.keys`,
  :mod:`~worldline.actors.materializer.reject`: the state keys, and the error every rule
  refuses with.

How the seven v0.1 defects of world.json are fixed:

- implicit relationships -> typed :class:`~worldline.protocols.world.Edge` records;
- no field versioning -> each field carries its own version (``expect_version``);
- no authority model -> :func:`~worldline.actors.materializer.authority.may_write`
  checks grants, admins and work ownership;
- global processed flag -> per-agent inbox records and per-agent durable consumers;
- boolean work demands -> typed work requests (``work:<id>`` entities);
- prose propagation rules -> typed :class:`~worldline.protocols.world.Rule` evaluated in
  :mod:`~worldline.actors.materializer.propagation`;
- durable and ephemeral state mixed -> presence lives in a KV bucket, never here.

State keys (all under the world): ``decl/<w>``, ``entity/<w>/<ref>``,
``edge/<w>/<id>``, ``conflict/<w>/<seq>``, ``sent/<w>/<rule>/<ref>/<agent>``,
``inbox/<w>/<agent>/<message id>``, ``inboxsum/<w>/<agent>``
(:mod:`~worldline.actors.materializer.keys`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worldline.actors.belief_model.posterior import NO_PROBABILITY
from worldline.actors.materializer.contradictions import resolve
from worldline.actors.materializer.core import conflict_key, last_op_key
from worldline.actors.materializer.declaration import declare, load_decl
from worldline.actors.materializer.edges import add_edge, link_beliefs, remove_edge
from worldline.actors.materializer.fields import set_field, upsert
from worldline.actors.materializer.inboxes import ack
from worldline.actors.materializer.keys import known_key
from worldline.actors.materializer.reject import Reject
from worldline.actors.materializer.tx import Tx, digest
from worldline.actors.materializer.work import put_work
from worldline.actors.runtime.spec import Context, Reader, Step
from worldline.protocols.messages import (
    AckInbox,
    AddBelief,
    AddEdge,
    AddEdgeEvidence,
    AddEvidence,
    AssessSources,
    CloseBelief,
    DeclareWorld,
    LinkBeliefs,
    OpsInbox,
    PutWork,
    Rejection,
    RemoveEdge,
    ResolveContradiction,
    SetField,
    SetTrust,
    Statement,
    UpsertEntity,
    encode,
)

if TYPE_CHECKING:
    from worldline.protocols.world import WorldDecl

__all__ = ["handle"]


def handle(
    reader: Reader, op: OpsInbox, ctx: Context, *, secured: bool = False
) -> Step:
    """Apply one crew op, or reject it with a reason code (never silently).

    ``secured`` says whether the bus authenticates authors (the materializer runs
    with credentials, so every client is a NATS user confined to its own subjects):
    then a world's first declaration must come from the operator. On an open bus
    anyone can publish as anyone, so the first declaration must come from an agent
    it names as an admin. Re-declarations need a current admin either way.
    """
    last_op: dict[bytes, bytes | None] = {last_op_key(ctx.world): str(ctx.seq).encode()}
    if isinstance(op, AddBelief | Statement):
        # Beliefs reach the materializer through fusion's posteriors; what beliefs
        # exist is noted from the record itself, so links are checked against the
        # log's order, not against when posteriors happen to arrive.
        if (
            isinstance(op, Statement)
            or op.type not in NO_PROBABILITY
            or (op.confidence is None)
        ):
            last_op[known_key(ctx.world, op.belief_id)] = b""
        return Step(writes=last_op)
    if isinstance(
        op, AddEvidence | SetTrust | CloseBelief | AddEdgeEvidence | AssessSources
    ):
        return Step(writes=last_op)
    tx = Tx(reader, ctx)
    tx.writes.update(last_op)
    try:
        if op.author != ctx.author:
            raise Reject(
                "unauthorized",
                f"op names author {op.author!r} but was sent by {ctx.author!r}",
            )
        match op:
            case DeclareWorld():
                declare(tx, op, secured=secured)
            case LinkBeliefs():
                # Beliefs need no declared world; one in force says who else
                # but an edge's author may change it.
                link_beliefs(tx, op, load_decl(tx, ctx.world))
            case ResolveContradiction():
                resolve(tx, op)  # nor do their contradictions
            case _:
                decl = load_decl(tx, ctx.world)
                if decl is None:
                    raise Reject(
                        "invalid",
                        f"world {ctx.world!r} is not declared yet; run "
                        "`worldline world load FILE` first",
                    )
                _apply(tx, decl, op)
    except Reject as exc:
        return _rejected(reader, op, ctx, exc)
    return tx.step()


def _apply(tx: Tx, decl: WorldDecl, op: Any) -> None:
    match op:
        case SetField():
            set_field(tx, decl, op)
        case UpsertEntity():
            upsert(tx, decl, op)
        case AddEdge():
            add_edge(tx, decl, op)
        case RemoveEdge():
            remove_edge(tx, decl, op)
        case PutWork():
            put_work(tx, decl, op)
        case AckInbox():
            ack(tx, op)


def _rejected(reader: Reader, op: Any, ctx: Context, exc: Reject) -> Step:
    rejection = Rejection(
        id=f"rej-{digest(ctx.world, op.op_id, str(ctx.seq))}",
        op_id=op.op_id,
        code=exc.code,
        reason=exc.reason,
        current_version=exc.version,
        current_value=exc.value,
        at=op.at,
    )
    tx = Tx(reader, ctx)
    tx.writes.update(exc.keep)
    tx.put(last_op_key(ctx.world), str(ctx.seq).encode())
    tx.put(conflict_key(ctx.world, ctx.seq), encode(rejection))
    tx.post(ctx.author, rejection, f"rejected {op.op_id}: {exc.code}")
    return tx.step()

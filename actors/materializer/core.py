"""Materializer core for beliefs: applies fusion's posteriors to the canonical state.

A belief's ``version`` is the OPS sequence of the op that caused its posterior, so the
live state and a replay of the log agree byte for byte whatever order the posterior and
crew-op inputs interleave in. The crew world (entities, edges, work, inboxes) is in
:mod:`actors.materializer.crew`.

State keys: ``belief/<world>/<id>`` -> ``Belief``.
Output: ``BeliefChanged`` on ``wl.<world>.state.belief``.
"""

from __future__ import annotations

import msgspec

from actors.runtime.memory import state_hash
from actors.runtime.spec import Context, Outgoing, Reader, Step
from protocols.messages import (
    BeliefChanged,
    Message,
    OpStatus,
    OpStatusReply,
    PosteriorUpdate,
    Rejection,
    StateHash,
    StateHashReply,
    belief_version,
    encode,
)
from protocols.subjects import state

__all__ = [
    "belief_key",
    "conflict_key",
    "handle",
    "last_change_key",
    "last_op_key",
    "serve",
    "unchanged_key",
]

_REJECTION = msgspec.msgpack.Decoder(Rejection)


def belief_key(world: str, belief_id: str) -> bytes:
    return f"belief/{world}/{belief_id}".encode()


def last_op_key(world: str) -> bytes:
    """The OPS sequence of the last op applied (or rejected) in ``world``."""
    return f"lastop/{world}".encode()


def last_change_key(world: str) -> bytes:
    """The OPS sequence of the last op that changed the world (fed the change feed)."""
    return f"lastchange/{world}".encode()


def unchanged_key(world: str, seq: int) -> bytes:
    """A write at OPS sequence ``seq`` that changed nothing: the version it kept."""
    return f"unchanged/{world}/{seq:012d}".encode()


def conflict_key(world: str, seq: int) -> bytes:
    """The conflict log: the rejection of the op at OPS sequence ``seq``."""
    return f"conflict/{world}/{seq:012d}".encode()


def handle(reader: Reader, update: PosteriorUpdate, ctx: Context) -> Step:
    """Apply one posterior (with its evidence); a repeat that changes nothing, or one
    older than what is held, is suppressed."""
    key = belief_key(ctx.world, update.belief.id)
    belief = msgspec.structs.replace(update.belief, version=update.cause_seq)
    record = BeliefChanged(belief=belief, evidence=update.evidence, trust=update.trust)
    payload = encode(record)
    stored = reader.get(key)
    # Encoding is deterministic: the same bytes are the same record.
    if stored is not None and (
        stored == payload or belief_version(stored) > belief.version
    ):
        return Step()
    return Step(
        writes={key: payload},
        out=[
            Outgoing(
                subject=state(ctx.world, "belief"),
                message=record,
                msg_id=f"state:{ctx.world}:belief:{belief.id}:{belief.version}",
                payload=payload,
            )
        ],
    )


def serve(reader: Reader, request: StateHash | OpStatus, world: str) -> Message:
    """The hash of everything held for ``world``, or what became of one op."""
    raw = reader.get(last_op_key(world))
    applied = 0 if raw is None else int(raw)
    match request:
        case StateHash():
            return StateHashReply(hash=state_hash(reader, world=world), applied=applied)
        case OpStatus(seq=seq):
            if seq > applied:
                return OpStatusReply(state="pending")
            raw_fence = reader.get(last_change_key(world))
            fence = 0 if raw_fence is None else int(raw_fence)
            rejected = reader.get(conflict_key(world, seq))
            if rejected is None:
                kept = reader.get(unchanged_key(world, seq))
                return OpStatusReply(
                    state="applied",
                    fence=fence,
                    version=seq if kept is None else int(kept),
                )
            rejection = _REJECTION.decode(rejected)
            return OpStatusReply(state="rejected", rejection=rejection, fence=fence)

"""Materializer core for beliefs: applies fusion's posteriors to the canonical state.

A belief's ``version`` is the OPS sequence of the op that caused its posterior, so the
live state and a replay of the log agree byte for byte whatever order the posterior and
crew-op inputs interleave in. The crew world (entities, edges, work, inboxes) is
applied by :mod:`worldline.actors.materializer.crew` and the modules it dispatches to.

A posterior names its cause by OPS sequence, and nothing else vouches for it on a bus
without credentials, so one whose ``cause_seq`` is below 1 or beyond the end of the
op log (``Context.batch_prepared``: ``WL_OPS``'s last sequence, which the service
fetches outside the transaction) is refused with :class:`InvalidInput` and
dead-lettered: otherwise a forged huge ``cause_seq`` would pin the belief, since
every real later posterior would look older.

State keys: ``belief/<world>/<id>`` -> ``Belief``.
Output: ``BeliefChanged`` on ``wl.<world>.state.belief``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from worldline.actors.materializer import edge_posterior
from worldline.actors.runtime.errors import InvalidInput
from worldline.actors.runtime.memory import state_hash
from worldline.actors.runtime.spec import Context, Outgoing, Reader, Step
from worldline.protocols.messages import (
    BeliefChanged,
    EdgePosterior,
    Message,
    OpStatus,
    OpStatusReply,
    OpVerdict,
    PosteriorUpdate,
    Rejection,
    StateHash,
    StateHashReply,
    belief_version,
    encode,
)
from worldline.protocols.subjects import state

if TYPE_CHECKING:
    from worldline.protocols.beliefs import Evidence

__all__ = [
    "belief_key",
    "check_cause",
    "conflict_key",
    "handle",
    "handle_derived",
    "last_change_key",
    "last_op_key",
    "merged_evidence",
    "record_verdict",
    "serve",
    "unchanged_key",
    "verdict_key",
]

_REJECTION = msgspec.msgpack.Decoder(Rejection)
_CHANGED = msgspec.msgpack.Decoder(BeliefChanged)
_VERDICT = msgspec.msgpack.Decoder(OpVerdict)


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
    """Apply one posterior (with its evidence, merged into what is held: see
    :func:`merged_evidence`); a repeat that changes nothing, or one older than what
    is held, is suppressed.

    ``ctx.batch_prepared`` is the op log's last sequence when the runtime fetched it
    (None in a replay, whose posteriors are rebuilt from the log itself).

    Raises:
        InvalidInput: ``cause_seq`` is below 1 or beyond the op log's end: no op
            caused this posterior, so fusion did not publish it; or its evidence
            does not add up (:func:`merged_evidence`).
    """
    check_cause(update, ctx.world, ctx.batch_prepared)
    key = belief_key(ctx.world, update.belief.id)
    belief = msgspec.structs.replace(update.belief, version=update.cause_seq)
    stored = reader.get(key)
    if stored is not None and belief_version(stored) > belief.version:
        return Step()
    evidence = merged_evidence(update, stored, ctx.world)
    record = BeliefChanged(belief=belief, evidence=evidence, trust=update.trust)
    payload = encode(record)
    # Encoding is deterministic: the same bytes are the same record.
    if stored == payload:
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


def merged_evidence(
    update: PosteriorUpdate, stored: bytes | None, world: str
) -> list[Evidence]:
    """The belief's whole evidence list after ``update``: the list it carries (a
    posterior without ``delta``), or what is held (``stored``) with the items it
    ``added``, by id.

    Raises:
        InvalidInput: the merged list does not count ``belief.evidence_count``
            items: an earlier posterior of this belief is missing from what is held.
    """
    if not update.delta:
        return update.evidence
    held = [] if stored is None else _CHANGED.decode(stored).evidence
    if update.added:
        by_id = {e.id: e for e in held}
        by_id.update((e.id, e) for e in update.added)
        held = sorted(by_id.values(), key=lambda e: e.id)
    if len(held) != update.belief.evidence_count:
        raise InvalidInput(
            f"posterior for belief {update.belief.id!r} in world {world!r} "
            f"(cause_seq {update.cause_seq}) counts {update.belief.evidence_count} "
            f"evidence items, but what is held plus the {len(update.added)} it adds "
            f"makes {len(held)}: an earlier posterior of this belief is missing here. "
            "Rebuild the materializer's store from the log (`worldline replay`)"
        )
    return held


def check_cause(update: PosteriorUpdate, world: str, ops_end: int | None) -> None:
    """Refuse a posterior no op of the log can have caused.

    Raises:
        InvalidInput: ``update.cause_seq`` < 1, or > ``ops_end`` (when known).
    """
    seq = update.cause_seq
    if seq < 1:
        raise InvalidInput(
            f"posterior for belief {update.belief.id!r} in world {world!r} has "
            f"cause_seq {seq}: the op that caused it has an OPS stream sequence, "
            "which starts at 1. Only fusion publishes posteriors; record an op "
            "(add, evidence) instead"
        )
    if ops_end is not None and seq > ops_end:
        raise InvalidInput(
            f"posterior for belief {update.belief.id!r} in world {world!r} has "
            f"cause_seq {seq}, beyond the op log (WL_OPS ends at sequence "
            f"{ops_end}): no op caused it, so fusion did not publish it (forged?). "
            "Only fusion publishes posteriors; record an op (add, evidence) "
            "instead, and secure the bus with per-agent credentials "
            "(deploy/credentials.md)"
        )


def verdict_key(world: str, seq: int) -> bytes:
    """Fusion's verdict on the belief op at OPS sequence ``seq`` (refused, unchanged,
    or a trust setting applied)."""
    return f"verdict/{world}/{seq:012d}".encode()


def record_verdict(reader: Reader, verdict: OpVerdict, ctx: Context) -> Step:
    """Keep fusion's verdict on one op beside the materializer's own op outcomes, for
    ``op_status``: how the author of a refused or repeated belief op learns of it.

    The first verdict for a sequence stays (a later one, a forgery on a bus without
    credentials say, cannot overwrite it); the SDK only believes a verdict that names
    its op's id.

    Raises:
        InvalidInput: the verdict names no OPS sequence (below 1), or one beyond the
            op log's end (``ctx.batch_prepared``, when known): no op is there to
            answer, so fusion did not publish it (a forgery would pre-empt the real
            verdict of a future op).
    """
    if verdict.seq < 1:
        raise InvalidInput(
            f"verdict on op {verdict.op_id!r} in world {ctx.world!r} names OPS "
            f"sequence {verdict.seq}, which starts at 1; only fusion publishes verdicts"
        )
    ops_end = ctx.batch_prepared
    if isinstance(ops_end, int) and verdict.seq > ops_end:
        raise InvalidInput(
            f"verdict on op {verdict.op_id!r} in world {ctx.world!r} names OPS "
            f"sequence {verdict.seq}, beyond the op log (WL_OPS ends at {ops_end}): "
            "no op is there, so fusion did not publish it (forged?). Secure the bus "
            "with per-agent credentials (deploy/credentials.md)"
        )
    key = verdict_key(ctx.world, verdict.seq)
    if reader.get(key) is not None:
        return Step()
    return Step(writes={key: encode(verdict)})


def handle_derived(
    reader: Reader, message: PosteriorUpdate | OpVerdict | EdgePosterior, ctx: Context
) -> Step:
    """The materializer's input from fusion: a posterior (:func:`handle`), a
    verdict on an op that made none (:func:`record_verdict`), or an edge's
    posterior (:func:`edge_posterior.apply_posterior`)."""
    if isinstance(message, OpVerdict):
        return record_verdict(reader, message, ctx)
    if isinstance(message, EdgePosterior):
        return edge_posterior.apply_posterior(reader, message, ctx)
    return handle(reader, message, ctx)


def serve(reader: Reader, request: StateHash | OpStatus, world: str) -> Message:
    """The hash of everything held for ``world``, or what became of one op (with
    fusion's verdict on it, once there is one)."""
    raw = reader.get(last_op_key(world))
    applied = 0 if raw is None else int(raw)
    match request:
        case StateHash():
            return StateHashReply(hash=state_hash(reader, world=world), applied=applied)
        case OpStatus(seq=seq):
            found = reader.get(verdict_key(world, seq)) if seq > 0 else None
            verdict = None if found is None else _VERDICT.decode(found)
            if seq > applied:
                return OpStatusReply(state="pending", verdict=verdict)
            raw_fence = reader.get(last_change_key(world))
            fence = 0 if raw_fence is None else int(raw_fence)
            rejected = reader.get(conflict_key(world, seq))
            if rejected is None:
                kept = reader.get(unchanged_key(world, seq))
                return OpStatusReply(
                    state="applied",
                    fence=fence,
                    version=seq if kept is None else int(kept),
                    verdict=verdict,
                )
            rejection = _REJECTION.decode(rejected)
            return OpStatusReply(state="rejected", rejection=rejection, fence=fence)

"""``trace``: a belief's provenance chain (or a belief edge's, :mod:`.edge_trace`),
as the world knows it now or knew it at a recorded time ``as_of``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldline.actors.belief_model import posterior
from worldline.actors.belief_model.posterior import NO_PROBABILITY
from worldline.actors.projector import edge_trace, slots
from worldline.actors.projector.beliefs import (
    _RECORD,
    _edge_key,
    _key,
    _Reads,
    _touching,
)
from worldline.actors.projector.clocks import stored_then
from worldline.protocols.beliefs import TraceStep
from worldline.protocols.messages import TraceReply

if TYPE_CHECKING:
    from datetime import datetime

    from worldline.actors.runtime.spec import Reader

__all__ = ["trace"]


def trace(
    reader: Reader, world: str, belief_id: str, as_of: datetime | None = None
) -> TraceReply:
    """The provenance chain: each evidence item and how confidence moved with it
    (as the world knew it at ``as_of``: the belief as it was stored then, the
    evidence recorded by then and the trust that weighed it then)."""
    raw = reader.get(_key(world, belief_id))
    if raw is None:  # an edge's trace, or nothing
        return edge_trace.trace(
            reader, world, belief_id, reader.get(_edge_key(world, belief_id)), as_of
        )
    reads = _Reads(reader, world, None, one_clock=False, as_of=as_of)
    newest = _RECORD.decode(raw)
    record = newest if as_of is None else stored_then(reader, world, newest, as_of)
    if record is None:
        return TraceReply()  # not created by ``as_of``
    shown = record.belief
    rivals = slots.rival_records(
        reader, world, newest.belief, lambda rival: _key(world, rival)
    )
    steps = posterior.trajectory(
        record.belief.prior,
        record.evidence,
        record.trust,
        probabilistic=record.belief.type not in NO_PROBABILITY,
    )
    edges = reads.edges(
        _touching(reader, world, "from", belief_id)
        + _touching(reader, world, "to", belief_id)
    )
    return TraceReply(
        belief=shown,
        steps=[TraceStep(evidence=e, before=b, after=a) for e, b, a in steps],
        edges=edges,
        weights=dict(record.trust),
        rivals=[r.belief.id for r in rivals],
    )

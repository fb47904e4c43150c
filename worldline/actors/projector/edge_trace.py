"""Belief edges with evidence of their own, in the projector: their evidence and
trust kept for ``trace``, and the trace of an edge (how its posterior moved from the
stated strength with each item, by :func:`worldline.actors.belief_model.posterior.
trajectory`, the same steps a belief's trace shows).

State key: ``bedgeev/<w>/<id>`` -> the last ``BeliefEdgeChanged`` that carried
evidence (an edge never loses its evidence, so the key is never deleted). The edge
itself, with its posterior, is ``bedge/<w>/<id>``
(:mod:`worldline.actors.projector.beliefs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.belief_model import posterior
from worldline.actors.projector.history import recorded
from worldline.protocols.beliefs import BeliefEdge, TraceStep
from worldline.protocols.messages import BeliefEdgeChanged, TraceReply, encode

if TYPE_CHECKING:
    from datetime import datetime

    from worldline.actors.runtime.spec import Reader

__all__ = ["evidence_key", "evidence_writes", "trace"]

_CHANGE: Final = msgspec.msgpack.Decoder(BeliefEdgeChanged)
_EDGE: Final = msgspec.msgpack.Decoder(BeliefEdge)


def evidence_key(world: str, edge_id: str) -> bytes:
    return f"bedgeev/{world}/{edge_id}".encode()


def evidence_writes(world: str, change: BeliefEdgeChanged) -> dict[bytes, bytes | None]:
    """What to keep of an applied edge change for its trace: its evidence and
    trust, when it has any."""
    if not change.evidence:
        return {}
    return {evidence_key(world, change.edge.id): encode(change)}


def trace(
    reader: Reader,
    world: str,
    edge_id: str,
    raw: bytes | None,
    as_of: datetime | None = None,
) -> TraceReply:
    """The trace of edge ``edge_id`` (``raw``: its stored ``BeliefEdge``, None when
    the projector holds no such edge): the edge, and each evidence step from the
    stated strength. With ``as_of`` (recorded time), nothing for an edge last
    written after it (an edge keeps only its last write), and the evidence recorded
    by then."""
    if raw is None:
        return TraceReply()
    edge = _EDGE.decode(raw)
    if as_of is not None and edge.at is not None and edge.at > as_of:
        return TraceReply()
    held = reader.get(evidence_key(world, edge_id))
    if held is None:
        return TraceReply(edges=[edge])
    record = _CHANGE.decode(held)
    prior = edge.stated if edge.stated is not None else edge.confidence
    items = [e for e in record.evidence if as_of is None or recorded(e) <= as_of]
    steps = posterior.trajectory(prior, items, record.trust)
    return TraceReply(
        steps=[TraceStep(evidence=e, before=b, after=a) for e, b, a in steps],
        edges=[edge],
    )

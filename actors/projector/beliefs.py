"""Projector core for the belief state: a replica of beliefs (with their evidence) and
belief edges, read at a clock the caller passes in. It selects, orders and bounds;
every number comes from :mod:`actors.fusion.model`.

State keys: ``belief/<w>/<id>`` -> ``BeliefChanged`` (belief, evidence, trust);
``bedge/<w>/<id>`` -> ``BeliefEdge``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from actors.fusion import model
from actors.fusion.core import NO_PROBABILITY
from protocols.beliefs import BeliefEdge, Contradiction, TraceStep
from protocols.messages import (
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    BeliefListReply,
    BeliefReply,
    ListBeliefs,
    TraceReply,
    encode,
)

if TYPE_CHECKING:
    from datetime import datetime

    from actors.runtime.spec import Context, Reader

__all__ = [
    "apply_belief",
    "apply_edge",
    "belief_edges",
    "contradictions",
    "get",
    "list_beliefs",
    "trace",
    "world_beliefs",
]

_RECORD = msgspec.msgpack.Decoder(BeliefChanged)
_EDGE = msgspec.msgpack.Decoder(BeliefEdge)
LOAD_BEARING: float = 2.0  # influence at least twice the uniform share


def _key(world: str, belief_id: str) -> bytes:
    return f"belief/{world}/{belief_id}".encode()


def _edge_key(world: str, edge_id: str) -> bytes:
    return f"bedge/{world}/{edge_id}".encode()


def apply_belief(
    reader: Reader, change: BeliefChanged, ctx: Context
) -> dict[bytes, bytes | None]:
    """Keep the newest version of the belief (and its evidence)."""
    key = _key(ctx.world, change.belief.id)
    raw = reader.get(key)
    if raw is not None and _RECORD.decode(raw).belief.version >= change.belief.version:
        return {}
    return {key: encode(change)}


def apply_edge(
    reader: Reader, change: BeliefEdgeChanged, ctx: Context
) -> dict[bytes, bytes | None]:
    key = _edge_key(ctx.world, change.edge.id)
    raw = reader.get(key)
    if raw is not None and _EDGE.decode(raw).version >= change.edge.version:
        return {}
    return {key: encode(change.edge)}


def _records(reader: Reader, world: str) -> list[BeliefChanged]:
    return [_RECORD.decode(raw) for _, raw in reader.scan(f"belief/{world}/".encode())]


def belief_edges(reader: Reader, world: str) -> list[BeliefEdge]:
    """The world's belief edges that are not removed."""
    return _edges(reader, world)


def _edges(reader: Reader, world: str) -> list[BeliefEdge]:
    found = [_EDGE.decode(raw) for _, raw in reader.scan(f"bedge/{world}/".encode())]
    return [e for e in found if not e.removed]


def _at_clock(record: BeliefChanged, at: datetime | None) -> Belief:
    """The belief as of ``at``: the stored reading, or the evidence re-read there."""
    belief = record.belief
    if at is None:
        return belief
    evidence = [e for e in record.evidence if e.observed_at <= at]
    reading = model.read(
        belief.prior,
        evidence,
        record.trust,
        at,
        probabilistic=belief.type not in NO_PROBABILITY,
    )
    return msgspec.structs.replace(
        belief,
        confidence=reading.confidence,
        evidence_weight=reading.evidence_weight,
        uncertainty=reading.uncertainty,
        fragility=reading.fragility,
        flags=reading.flags,
        evidence_count=len(evidence),
    )


def world_beliefs(reader: Reader, world: str, at: datetime | None) -> list[Belief]:
    """Every belief of ``world`` read at ``at``, with what only the whole graph can
    say: effective confidence after dependencies, load-bearing and risky labels,
    contradiction by explicit edge, and supersession."""
    records = _records(reader, world)
    edges = _edges(reader, world)
    beliefs = {r.belief.id: _at_clock(r, at) for r in records}
    scored = {
        b.id: b.confidence
        for b in beliefs.values()
        if b.confidence is not None and b.status == "active"
    }
    effective = model.effective_confidence(scored, edges)
    weight = model.influence(list(scored), edges)
    uniform = 1.0 / max(len(scored), 1)
    dependents = {e.target for e in edges if e.type in ("depends_on", "derived_from")}
    contradicted = {
        end
        for e in edges
        if e.type == "contradicts" and e.confidence >= 0.5
        for end in (e.source, e.target)
    }
    superseded = {e.target: e.at for e in edges if e.type == "supersedes"}
    out = []
    for belief_id in sorted(beliefs):
        b = beliefs[belief_id]
        flags = list(b.flags)
        if belief_id in contradicted and "contradicted" not in flags:
            flags.append("contradicted")
        label = b.label
        if not label and belief_id in dependents:
            if weight.get(belief_id, 0.0) >= LOAD_BEARING * uniform:
                label = "load-bearing"
            if b.type == "assumption" and "uncertain" in flags:
                label = "risky-assumption"
        until = b.valid_until
        if belief_id in superseded and until is None:
            until = superseded[belief_id]
        out.append(
            msgspec.structs.replace(
                b,
                flags=tuple(flags),
                label=label,
                effective_confidence=effective.get(belief_id),
                valid_until=until,
            )
        )
    return out


def get(reader: Reader, world: str, belief_id: str, at: datetime | None) -> BeliefReply:
    found = [b for b in world_beliefs(reader, world, at) if b.id == belief_id]
    return BeliefReply(belief=found[0] if found else None)


def list_beliefs(reader: Reader, world: str, request: ListBeliefs) -> BeliefListReply:
    beliefs = [
        b
        for b in world_beliefs(reader, world, request.at)
        if (request.type is None or b.type == request.type)
        and (request.label is None or b.label == request.label)
        and (request.flag is None or request.flag in b.flags)
        and (request.status == "any" or b.status == request.status)
        and (request.at is None or b.created_at <= request.at)
    ]
    beliefs.sort(key=lambda b: (b.created_at, b.id))
    return BeliefListReply(beliefs=tuple(beliefs[: request.limit]), total=len(beliefs))


def contradictions(
    reader: Reader, world: str, beliefs: list[Belief], at: datetime | None = None
) -> list[Contradiction]:
    """Explicit ``contradicts`` edges and split evidence, as first-class objects."""
    active = {b.id for b in beliefs if b.status == "active"}
    found = [
        Contradiction(
            kind="edge",
            beliefs=(e.source, e.target),
            strength=e.confidence,
            trace=(e.source, e.target, e.id),
        )
        for e in _edges(reader, world)
        if e.type == "contradicts" and e.source in active and e.target in active
    ]
    for b in beliefs:
        if b.id in active and b.confidence is not None and "contradicted" in b.flags:
            record = _RECORD.decode(reader.get(_key(world, b.id)) or b"")
            clock = at or b.updated_at
            seen = [e for e in record.evidence if e.observed_at <= clock]
            reading = model.read(b.prior, seen, record.trust, clock)
            total = reading.support + reading.refute
            if total > 0 and min(reading.support, reading.refute) > 0:
                found.append(
                    Contradiction(
                        kind="split",
                        beliefs=(b.id,),
                        strength=min(reading.support, reading.refute) / total,
                        trace=(b.id,),
                    )
                )
    return found


def trace(reader: Reader, world: str, belief_id: str) -> TraceReply:
    """The provenance chain: each evidence item and how confidence moved with it."""
    raw = reader.get(_key(world, belief_id))
    if raw is None:
        return TraceReply()
    record = _RECORD.decode(raw)
    steps = model.trajectory(
        record.belief.prior,
        record.evidence,
        record.trust,
        probabilistic=record.belief.type not in NO_PROBABILITY,
    )
    edges = [e for e in _edges(reader, world) if belief_id in (e.source, e.target)]
    return TraceReply(
        belief=record.belief,
        steps=[TraceStep(evidence=e, before=b, after=a) for e, b, a in steps],
        edges=edges,
    )

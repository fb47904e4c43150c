"""Fusion for belief edges: evidence -> an edge posterior, with the belief math.

"A depends on B" is itself a claim: ``AddEdgeEvidence`` attaches evidence to a belief
edge, and the edge's posterior is :func:`worldline.actors.belief_model.posterior.read`
of that evidence with the strength the last ``LinkBeliefs`` stated as the prior, the
same decay, trust and grouping by source as a belief's, evaluated at the op's own
time (so replays agree). Nothing here computes a number itself.

Sharding: every shard reads every op; the shard that owns the edge id
(:func:`worldline.actors.fusion.core.shard_of`) records the edge as each
``LinkBeliefs`` states it, and its evidence; a re-statement (new strength, type or
ends, a removal) only when its author may make it, by the rule the materializer
decides links by (:func:`worldline.actors.belief_model.charter.edge_refusal`, asked
of the edge's first linker, :attr:`FusedEdge.by`). Fusion cannot see whether both ends
exist (they may live in other shards): the materializer refuses a link to an unknown
belief, and shows an edge posterior only beside an edge it holds.

State keys: ``edge/<world>/<id>`` -> :class:`FusedEdge`;
``ebysrc/<world>/<source>/<edge id>`` -> the edge id (the index by source for edges,
shaped like :mod:`worldline.actors.fusion.sources`'s, so a trust change re-reads only
the edges its source bears on). Output: :class:`EdgePosterior` on
``wl.<world>.derived.posterior.<shard>`` for each change of an edge that has
evidence, and an :class:`OpVerdict` for an ``AddEdgeEvidence`` that changed nothing
(refused, or a repeat). A ``LinkBeliefs`` gets no verdict here: the materializer
answers it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal

import msgspec

from worldline.actors.belief_model import charter, posterior
from worldline.actors.belief_model.charter import Refused as _Refused
from worldline.actors.fusion import declared, sources
from worldline.actors.runtime.errors import InvalidInput
from worldline.actors.runtime.memory import Overlay
from worldline.actors.runtime.spec import Context, Outgoing, Reader, Step
from worldline.protocols.beliefs import BeliefEdge, Evidence
from worldline.protocols.messages import (
    AddEdgeEvidence,
    EdgePosterior,
    LinkBeliefs,
    OpVerdict,
    SetTrust,
    encode,
)
from worldline.protocols.subjects import derived, slot_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "MAX_EVIDENCE",
    "FusedEdge",
    "decode_edge",
    "edge_key",
    "handle",
    "retrust",
]

MAX_EVIDENCE: Final = 10_000  # per edge, as per belief; more is refused


class FusedEdge(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="fusion.edge.v1"
):
    """Fusion's record of a belief edge: as the last ``LinkBeliefs`` stated it, and
    every piece of evidence about it."""

    edge: BeliefEdge  # confidence: the stated strength (the prior)
    op_id: str  # the LinkBeliefs that stated it (a replay of that op is a no-op)
    evidence: list[Evidence] = msgspec.field(default_factory=list)  # sorted by id
    # Who linked the id first: who may re-state it (charter.edge_refusal). Empty in
    # a record written before it was kept: then the edge's last author, as the
    # materializer falls back too.
    by: str = ""

    @property
    def owner(self) -> str:
        return self.by or self.edge.author


_FUSED: Final = msgspec.msgpack.Decoder(FusedEdge)


def decode_edge(raw: bytes) -> FusedEdge:
    """A stored :class:`FusedEdge`."""
    return _FUSED.decode(raw)


def edge_key(world: str, edge_id: str) -> bytes:
    return f"edge/{world}/{edge_id}".encode()


def _index_key(world: str, source: str, edge_id: str) -> bytes:
    return b"e" + sources.index_key(world, source, edge_id)


def _bearing(reader: Reader, world: str, source: str) -> list[str]:
    """The ids of the edges ``source`` bears on in this store, sorted."""
    prefix = b"e" + sources.source_prefix(world, source)
    return sorted({raw.decode() for _, raw in reader.scan(prefix)})


def handle(
    reader: Reader,
    op: LinkBeliefs | AddEdgeEvidence,
    ctx: Context,
    *,
    shard: tuple[int, int],
    trust_of: Callable[[Reader, str, list[Evidence]], dict[str, float]],
) -> Step:
    """Apply one edge op owned by this shard; ``trust_of`` is fusion's trust lookup
    (the multipliers set for the sources and agents of an evidence list).

    Raises:
        InvalidInput: an ``AddEdgeEvidence`` naming another author than the subject
            it was published on (dead-lettered, as for beliefs).
    """
    edge_id = op.edge.id if isinstance(op, LinkBeliefs) else op.edge_id
    if slot_of(edge_id, shard[1]) != shard[0]:
        return Step()
    if isinstance(op, LinkBeliefs):
        return _link(reader, op, ctx, shard, trust_of)
    if op.author != ctx.author:
        raise InvalidInput(
            f"op {op.op_id} names author {op.author!r} but was published on "
            f"{ctx.subject!r}; agents publish only their own ops"
        )
    try:
        step = _evidence(reader, op, ctx, shard, trust_of)
    except _Refused as refused:
        return _verdict(ctx, op, shard, "rejected", refused)
    if not step.out:
        return _verdict(ctx, op, shard, "unchanged")
    return step


def retrust(
    reader: Reader,
    op: SetTrust,
    ctx: Context,
    shard: tuple[int, int],
    step: Step,
    trust_of: Callable[[Reader, str, list[Evidence]], dict[str, float]],
) -> Step:
    """``step`` (fusion's answer to a trust setting, its writes holding the new
    setting) with a new posterior for every edge of this shard the source bears on.
    A step without writes (a refused setting) is returned as it is."""
    if not step.writes:
        return step
    overlay = Overlay(reader, step.writes)
    for edge_id in _bearing(reader, ctx.world, op.source):
        raw = reader.get(edge_key(ctx.world, edge_id))
        if raw is None:
            continue  # pragma: no cover - the index is written with the edge
        fused = _FUSED.decode(raw)
        if fused.edge.removed:
            continue
        if any(op.source in sources.names(e) for e in fused.evidence):
            more = _emit(overlay, ctx, fused, op, shard, trust_of)
            step.writes.update(more.writes)
            step.out.extend(more.out)
    return step


def _link(
    reader: Reader,
    op: LinkBeliefs,
    ctx: Context,
    shard: tuple[int, int],
    trust_of: Callable[[Reader, str, list[Evidence]], dict[str, float]],
) -> Step:
    """Record the edge as stated. What the materializer refuses (a forged author, a
    self-link, removing an unknown edge, re-stating an edge without authority over
    it: :func:`charter.edge_refusal`, asked of the same first linker and the same
    declaration in force) is not recorded; its verdict is the materializer's."""
    edge = op.edge
    if op.author != ctx.author or edge.source == edge.target:
        return Step()
    raw = reader.get(edge_key(ctx.world, edge.id))
    old = None if raw is None else _FUSED.decode(raw)
    if old is None and edge.removed:
        return Step()
    if old is not None and old.op_id == op.op_id:
        return Step()  # the same op again
    if old is not None and charter.edge_refusal(
        declared.charter_of(reader, ctx.world).decl,
        op.author,
        old.owner,
        edge_id=edge.id,
    ):
        return Step()  # the materializer answers it `unauthorized`
    stated = msgspec.structs.replace(edge, version=ctx.seq, author=op.author, at=op.at)
    fused = FusedEdge(
        edge=stated,
        op_id=op.op_id,
        evidence=[] if old is None else old.evidence,
        by=op.author if old is None else old.owner,
    )
    if not fused.evidence or edge.removed:
        return Step(writes={edge_key(ctx.world, edge.id): encode(fused)})
    # A re-weighed edge with evidence: its prior moved, so its posterior did.
    return _emit(reader, ctx, fused, op, shard, trust_of)


def _evidence(
    reader: Reader,
    op: AddEdgeEvidence,
    ctx: Context,
    shard: tuple[int, int],
    trust_of: Callable[[Reader, str, list[Evidence]], dict[str, float]],
) -> Step:
    item = op.evidence
    if item.author != op.author:
        raise _Refused(
            "invalid",
            f"evidence {item.id} names author {item.author!r}; report it as yourself",
        )
    if item.belief_id != op.edge_id:
        raise _Refused(
            "invalid",
            f"evidence {item.id} names {item.belief_id!r}, not edge {op.edge_id}; "
            "evidence about an edge names the edge id in `belief_id`",
        )
    raw = reader.get(edge_key(ctx.world, op.edge_id))
    if raw is None:
        raise _Refused(
            "unknown_edge",
            f"no belief edge {op.edge_id} in world {ctx.world}; link the beliefs "
            "first (`worldline relate`), then attach evidence to the edge id",
        )
    fused = _FUSED.decode(raw)
    if fused.edge.removed:
        raise _Refused(
            "closed", f"belief edge {op.edge_id} is removed; evidence is refused"
        )
    if any(e.id == item.id for e in fused.evidence):
        return Step()
    if len(fused.evidence) >= MAX_EVIDENCE:
        raise _Refused(
            "full", f"belief edge {op.edge_id} already holds {MAX_EVIDENCE} items"
        )
    item = declared.voiced(
        reader, ctx.world, item, recorded_seq=ctx.seq, recorded_at=op.at
    )
    evidence = sorted([*fused.evidence, item], key=lambda e: e.id)
    fused = msgspec.structs.replace(fused, evidence=evidence)
    step = _emit(reader, ctx, fused, op, shard, trust_of)
    for name in sources.names(item):
        step.writes[_index_key(ctx.world, name, op.edge_id)] = op.edge_id.encode()
    return step


def _emit(
    reader: Reader,
    ctx: Context,
    fused: FusedEdge,
    op: LinkBeliefs | AddEdgeEvidence | SetTrust,
    shard: tuple[int, int],
    trust_of: Callable[[Reader, str, list[Evidence]], dict[str, float]],
) -> Step:
    """Store ``fused`` and publish the edge's posterior, read at the later of the
    op's own time and the newest ``at`` that recorded its evidence (so replays
    agree, and so does any order its evidence arrived in)."""
    trust: Mapping[str, float] = trust_of(reader, ctx.world, fused.evidence)
    stated = fused.edge
    told = (e.recorded_at for e in fused.evidence if e.recorded_at is not None)
    clock = max(op.at, max(told, default=op.at))
    reading = posterior.read(stated.confidence, fused.evidence, trust, clock)
    if reading.confidence is None:  # pragma: no cover - an edge is probabilistic
        raise AssertionError(stated.id)
    edge = msgspec.structs.replace(
        stated,
        confidence=reading.confidence,
        stated=stated.confidence,
        evidence_count=len(fused.evidence),
        evidence_weight=reading.evidence_weight,
        uncertainty=reading.uncertainty,
        flags=reading.flags,
        posterior_seq=ctx.seq,
    )
    return Step(
        writes={edge_key(ctx.world, stated.id): encode(fused)},
        out=[
            Outgoing(
                subject=derived(ctx.world, "posterior", str(shard[0])),
                message=EdgePosterior(
                    edge=edge,
                    cause=op.op_id,
                    cause_seq=ctx.seq,
                    evidence=fused.evidence,
                    trust=dict(trust),
                ),
                msg_id=f"edgeposterior:{ctx.world}:{stated.id}:{op.op_id}",
            )
        ],
    )


def _verdict(
    ctx: Context,
    op: AddEdgeEvidence,
    shard: tuple[int, int],
    outcome: Literal["rejected", "unchanged"],
    refused: _Refused | None = None,
) -> Step:
    """Fusion's answer to an edge evidence op that made no posterior, on the
    posterior subject (the materializer keeps it for ``op_status``)."""
    verdict = OpVerdict(
        op_id=op.op_id,
        seq=ctx.seq,
        outcome=outcome,
        code=None if refused is None else refused.code,
        reason="" if refused is None else refused.reason,
        belief_id=op.edge_id,
    )
    return Step(
        out=[
            Outgoing(
                subject=derived(ctx.world, "posterior", str(shard[0])),
                message=verdict,
                msg_id=f"verdict:{ctx.world}:{ctx.seq}:{op.op_id}",
            )
        ]
    )

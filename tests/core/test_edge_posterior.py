"""Belief edges with evidence of their own (issue 18, part 5): "A depends on B" can be
cited, measured and refuted, and the edge's posterior is the belief math's reading of
that evidence with the stated strength as its prior (docs/belief-math.md, "Edges").

Driven through the pure cores: fusion, the materializer (its op and posterior inputs)
and the projector, each over a MemoryState, with no bus."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import msgspec
import pytest

from worldline.actors.belief_model import posterior
from worldline.actors.fusion import core as fusion
from worldline.actors.materializer import core as materializer
from worldline.actors.materializer import crew
from worldline.actors.materializer.edge_posterior import edge_posterior_key
from worldline.actors.projector import core as projector
from worldline.actors.runtime.errors import InvalidInput
from worldline.actors.runtime.memory import MemoryState, state_hash
from worldline.actors.runtime.spec import Context, Outgoing
from worldline.ops.replay import replay
from worldline.protocols.beliefs import BeliefEdge, Evidence
from worldline.protocols.messages import (
    AddBelief,
    AddEdgeEvidence,
    AddEvidence,
    Belief,
    BeliefReply,
    DeclareWorld,
    EdgePosterior,
    GetBelief,
    LinkBeliefs,
    OpsInbox,
    OpVerdict,
    PosteriorUpdate,
    ProjectorInbox,
    ReadWorld,
    SetTrust,
    TraceBelief,
    TraceReply,
    WorldReply,
)
from worldline.protocols.subjects import author_of, ops, world_of
from worldline.protocols.world import Authority, WorldDecl, WorldInfo
from worldline.sdk.export import ExportRecord

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.protocols.beliefs import Direction, EdgeType, EvidenceKind

W: Final = "w1"
T0: Final = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


DECLARE: Final = DeclareWorld(
    op_id="op-declare",
    author="ada",
    at=T0,
    declaration=WorldDecl(
        world=WorldInfo(id=W),
        authority=Authority(admins=["ada"]),
        sources={"*": ["ada"]},
    ),
)


def ctx_for(subject: str, seq: int) -> Context:
    return Context(
        world=world_of(subject),
        author=author_of(subject),
        subject=subject,
        seq=seq,
        now=T0,
    )


class Stack:
    """Fusion (``shards`` of them) -> materializer -> projector, one op at a time;
    ``hold`` keeps fusion's outputs back until :meth:`release` (a slow derived
    stream), to vary the order the materializer sees its two inputs in."""

    def __init__(self, shards: int = 1) -> None:
        self.fusion = [MemoryState() for _ in range(shards)]
        self.mat = MemoryState()
        self.proj = MemoryState()
        self.seq = 0
        self.held: list[Outgoing] = []
        self.hold = False
        self.derived_first = False
        self.verdicts: list[OpVerdict] = []
        self.log: list[ExportRecord] = []  # the op log, as `worldline export` has it
        self.op(DECLARE)  # ada reports every source she names, and rules the world

    def op(self, op: OpsInbox) -> int:
        self.seq += 1
        ctx = ctx_for(ops(W, op.author), self.seq)
        self.log.append(ExportRecord(seq=self.seq, subject=ctx.subject, op=op))
        outs: list[Outgoing] = []
        for i, st in enumerate(self.fusion):
            outs += st.apply(fusion.handle(st, op, ctx, shard=(i, len(self.fusion))))
        self.held += outs
        if self.derived_first and not self.hold:
            self.release()  # fusion's outputs reach the materializer before the op
        self._project(self.mat.apply(crew.handle(self.mat, op, ctx)))
        if not self.hold:
            self.release()
        return self.seq

    def release(self) -> None:
        held, self.held = self.held, []
        for out in held:
            message = out.message
            if isinstance(message, OpVerdict):
                self.verdicts.append(message)
            assert isinstance(message, PosteriorUpdate | OpVerdict | EdgePosterior)
            ctx = msgspec.structs.replace(
                ctx_for(out.subject, 1000), batch_prepared=self.seq
            )
            step = materializer.handle_derived(self.mat, message, ctx)
            self._project(self.mat.apply(step))

    def _project(self, outs: list[Outgoing]) -> None:
        for out in outs:
            if isinstance(out.message, ProjectorInbox):  # the change feed
                ctx = ctx_for(out.subject, 1)
                self.proj.apply(projector.handle(self.proj, out.message, ctx))

    # --- reads ------------------------------------------------------------------

    def edge(self, edge_id: str) -> BeliefEdge:
        reply = projector.serve(self.proj, ReadWorld(at=T0), W)
        assert isinstance(reply, WorldReply)
        (edge,) = [e for e in reply.belief_edges if e.id == edge_id]
        return edge

    def belief(self, belief_id: str) -> Belief:
        reply = projector.serve(self.proj, GetBelief(belief_id=belief_id, at=T0), W)
        assert isinstance(reply, BeliefReply)
        assert reply.belief is not None
        return reply.belief

    def trace(self, some_id: str) -> TraceReply:
        reply = projector.serve(self.proj, TraceBelief(belief_id=some_id), W)
        assert isinstance(reply, TraceReply)
        return reply


def add(belief_id: str, confidence: float | None = None, op_id: str = "") -> AddBelief:
    return AddBelief(
        op_id=op_id or f"op-add-{belief_id}",
        author="ada",
        at=T0,
        belief_id=belief_id,
        text=f"statement {belief_id}",
        confidence=confidence,
    )


def link(
    edge_id: str = "e1",
    source: str = "c",
    target: str = "a",
    *,
    strength: float = 0.8,
    type: EdgeType = "depends_on",
    removed: bool = False,
    op_id: str = "",
) -> LinkBeliefs:
    edge = BeliefEdge(
        id=edge_id,
        type=type,
        source=source,
        target=target,
        confidence=strength,
        removed=removed,
    )
    return LinkBeliefs(
        op_id=op_id or f"op-link-{edge_id}-{strength}-{removed}",
        author="ada",
        at=T0,
        edge=edge,
    )


def item(
    eid: str,
    target: str = "e1",
    *,
    direction: Direction = "refutes",
    kind: EvidenceKind = "measurement",
    source: str = "lab",
    observed_at: datetime = T0,
) -> Evidence:
    return Evidence(
        id=eid,
        belief_id=target,
        direction=direction,
        kind=kind,
        source=source,
        observed_at=observed_at,
        author="ada",
    )


def edge_evidence(evidence: Evidence, edge_id: str = "e1") -> AddEdgeEvidence:
    return AddEdgeEvidence(
        op_id=f"op-{evidence.id}",
        author="ada",
        at=T0,
        edge_id=edge_id,
        evidence=evidence,
    )


def world(
    stack: Stack, *, a: float = 0.2, c: float = 0.9, strength: float = 0.8
) -> None:
    """A claim ``c`` that depends on a weak assumption ``a`` through edge ``e1``."""
    stack.op(add("a", a))
    stack.op(add("c", c))
    stack.op(link(strength=strength))


# --- the edge's posterior is the belief math's ----------------------------------------


def test_edge_evidence_moves_its_posterior_like_a_beliefs() -> None:
    stack = Stack()
    world(stack)
    stack.op(add("twin", 0.8))  # a belief with the edge's prior, for comparison
    evidence = [item("m1"), item("m2", source="bench", kind="citation")]
    for e in evidence:
        stack.op(edge_evidence(e))
        stack.op(
            AddEvidence(
                op_id=f"op-twin-{e.id}",
                author="ada",
                at=T0,
                evidence=msgspec.structs.replace(e, belief_id="twin"),
            )
        )
    edge = stack.edge("e1")
    twin = stack.belief("twin")
    reading = posterior.read(0.8, evidence, {}, T0)
    assert edge.confidence == reading.confidence == twin.confidence
    assert edge.confidence is not None
    assert edge.confidence < 0.8
    assert edge.stated == 0.8  # the strength stated stays visible
    assert edge.evidence_count == 2 == twin.evidence_count
    assert edge.uncertainty == reading.uncertainty == twin.uncertainty
    assert edge.evidence_weight == reading.evidence_weight
    assert edge.flags == reading.flags == twin.flags


def test_an_edge_without_evidence_keeps_its_stated_strength_bit_for_bit() -> None:
    stack = Stack()
    world(stack, strength=0.7)
    edge = stack.edge("e1")
    assert edge.confidence == 0.7
    assert edge.stated is None
    assert edge.evidence_count == 0
    assert edge.posterior_seq == 0


def test_supporting_evidence_strengthens_an_edge_and_decay_and_grouping_apply() -> None:
    stack = Stack()
    world(stack, strength=0.5)
    old = T0 - timedelta(days=180)  # one measurement half-life
    stack.op(edge_evidence(item("s1", direction="supports", observed_at=old)))
    # The same source again counts once: per (source, direction) the strongest item.
    stack.op(edge_evidence(item("s2", direction="supports", observed_at=old)))
    edge = stack.edge("e1")
    weight = posterior.KIND_WEIGHT["measurement"] * 0.5
    assert edge.evidence_weight == pytest.approx(weight)
    assert edge.confidence == pytest.approx((1.0 + weight) / (2.0 + weight))
    assert edge.evidence_count == 2


# --- what the posterior does downstream ----------------------------------------------


def test_a_refuted_depends_on_edge_weakens_the_drop_it_causes() -> None:
    stack = Stack()
    world(stack, a=0.2, c=0.9, strength=0.8)
    a = stack.belief("a").confidence
    before = stack.belief("c").effective_confidence
    assert a is not None
    assert before is not None
    assert before == pytest.approx(0.9 * (1 - 0.8 * (1 - a)))
    stack.op(edge_evidence(item("m1")))  # a measurement: c does not rest on a
    refuted = stack.edge("e1").confidence
    after = stack.belief("c").effective_confidence
    assert after is not None
    assert refuted < 0.8
    assert after == pytest.approx(0.9 * (1 - refuted * (1 - a)))
    assert after > before  # the weak assumption costs c less than before
    assert stack.belief("c").confidence == 0.9  # c's own posterior is untouched


def test_a_refuted_contradicts_edge_stops_flagging_its_ends() -> None:
    stack = Stack()
    stack.op(add("x", 0.7))
    stack.op(add("y", 0.7))
    stack.op(link("k1", "x", "y", type="contradicts", strength=0.6))
    assert "contradicted" in stack.belief("x").flags
    stack.op(edge_evidence(item("m1", "k1"), "k1"))
    assert stack.edge("k1").confidence < 0.5
    assert "contradicted" not in stack.belief("x").flags
    assert "contradicted" not in stack.belief("y").flags


def test_a_trust_change_re_reads_the_edges_its_source_bears_on() -> None:
    stack = Stack()
    world(stack)
    stack.op(edge_evidence(item("m1", source="lab")))
    refuted = stack.edge("e1").confidence
    stack.op(SetTrust(op_id="op-t1", author="ada", at=T0, source="lab", trust=0.0))
    edge = stack.edge("e1")
    assert edge.confidence == pytest.approx(0.8)  # its only evidence weighs nothing
    assert edge.confidence > refuted
    stack.op(SetTrust(op_id="op-t2", author="ada", at=T0, source="other", trust=0.0))
    assert stack.edge("e1") == edge  # a source the edge never heard changes nothing


def test_re_weighing_an_edge_with_evidence_moves_the_prior_of_its_posterior() -> None:
    stack = Stack()
    world(stack, strength=0.8)
    evidence = item("m1")
    stack.op(edge_evidence(evidence))
    stack.op(link(strength=0.3))
    edge = stack.edge("e1")
    assert edge.stated == 0.3
    assert edge.confidence == posterior.read(0.3, [evidence], {}, T0).confidence
    assert edge.posterior_seq == edge.version == stack.seq


def test_the_trace_of_an_edge_steps_from_the_stated_strength() -> None:
    stack = Stack()
    world(stack, strength=0.8)
    stack.op(edge_evidence(item("m1", source="lab")))
    stack.op(edge_evidence(item("m2", source="bench", direction="supports")))
    trace = stack.trace("e1")
    assert trace.belief is None
    assert [e.id for e in trace.edges] == ["e1"]
    assert [s.evidence.id for s in trace.steps] == ["m1", "m2"]
    assert trace.steps[0].before == pytest.approx(0.8)
    assert trace.steps[0].after is not None
    assert trace.steps[0].after < 0.8
    assert trace.steps[-1].after == pytest.approx(stack.edge("e1").confidence)
    assert stack.trace("e-none") == TraceReply()


# --- refusals ------------------------------------------------------------------------


def test_evidence_for_an_unknown_or_removed_edge_is_refused_with_the_fix() -> None:
    stack = Stack()
    world(stack)
    stack.op(edge_evidence(item("m1", "e9"), "e9"))
    refused = stack.verdicts[-1]
    assert (refused.outcome, refused.code) == ("rejected", "unknown_edge")
    assert "worldline relate" in refused.reason
    stack.op(link(removed=True))
    stack.op(edge_evidence(item("m2")))
    assert (stack.verdicts[-1].outcome, stack.verdicts[-1].code) == (
        "rejected",
        "closed",
    )
    assert stack.mat.get(edge_posterior_key(W, "e1")) is None


def test_evidence_naming_another_target_is_refused_and_a_repeat_is_unchanged() -> None:
    stack = Stack()
    world(stack)
    stack.op(edge_evidence(item("m1", "c")))
    assert stack.verdicts[-1].code == "invalid"
    assert "belief_id" in stack.verdicts[-1].reason
    stack.op(edge_evidence(item("m2")))
    edge = stack.edge("e1")
    stack.op(edge_evidence(item("m2")))
    assert stack.verdicts[-1].outcome == "unchanged"
    assert stack.edge("e1") == edge


def test_edge_evidence_from_another_author_is_dead_lettered() -> None:
    op = edge_evidence(item("m1"))
    with pytest.raises(InvalidInput, match="names author"):
        fusion.handle(MemoryState(), op, ctx_for(ops(W, "mallory"), 1))


def test_a_forged_edge_posterior_is_refused() -> None:
    forged = EdgePosterior(
        edge=BeliefEdge(id="e1", type="depends_on", source="c", target="a"),
        cause="op-x",
        cause_seq=50,
    )
    ctx = msgspec.structs.replace(ctx_for(ops(W, "fusion"), 1), batch_prepared=10)
    with pytest.raises(InvalidInput, match="cause_seq 50"):
        materializer.handle_derived(MemoryState(), forged, ctx)


# --- order independence --------------------------------------------------------------


def _run(
    order: tuple[int, ...], *, shards: int = 1, hold: bool = False, first: bool = False
) -> Stack:
    stack = Stack(shards)
    stack.derived_first = first
    world(stack)
    stack.hold = hold  # posteriors reach the materializer after every op
    evidence = [
        item("m1"),
        item("m2", source="bench", direction="supports", kind="citation"),
        item("m3", source="field", kind="user-assertion"),
    ]
    for i in order:
        stack.op(edge_evidence(evidence[i]))
    stack.op(link(strength=0.6))
    stack.release()
    return stack


def test_the_edge_posterior_does_not_depend_on_evidence_order_shards_or_arrival() -> (
    None
):
    """Any order of the evidence gives the same posterior bits; for one order, any
    split of fusion into shards and any interleaving of the materializer's two inputs
    gives the same materializer state (the evidence's ``recorded_seq`` differs
    between orders, so states are compared within one order)."""
    expected = _run((0, 1, 2)).edge("e1")
    effective = _run((0, 1, 2)).belief("c").effective_confidence
    for order in itertools.permutations(range(3)):
        baseline = _run(order)
        for shards, hold, first in (
            (1, False, True),
            (3, False, False),
            (2, True, False),
        ):
            stack = _run(order, shards=shards, hold=hold, first=first)
            edge = stack.edge("e1")
            assert edge.confidence == expected.confidence  # the same bits
            assert edge.uncertainty == expected.uncertainty
            assert edge.evidence_count == 3
            assert state_hash(stack.mat, world=W) == state_hash(baseline.mat, world=W)
            assert stack.proj.data == baseline.proj.data
            assert stack.belief("c").effective_confidence == effective


def test_a_replay_of_the_log_rebuilds_the_same_materializer_state(
    tmp_path: Path,
) -> None:
    """``worldline replay`` (fusion and the materializer over LMDB, from the log
    alone) ends in the bytes the live stack holds, edge posteriors included."""
    stack = _run((2, 0, 1), shards=2, hold=True)
    stack.op(SetTrust(op_id="op-t1", author="ada", at=T0, source="bench", trust=0.5))
    stack.release()
    assert stack.mat.get(edge_posterior_key(W, "e1")) is not None
    rebuilt = replay(stack.log, tmp_path / "replayed", W)
    assert rebuilt.ops == stack.seq
    assert rebuilt.hash == state_hash(stack.mat, world=W)

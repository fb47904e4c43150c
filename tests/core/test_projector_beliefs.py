"""The projector's belief replica: reads at a clock, neighbourhood annotations, and the
edge index behind them (pure, over MemoryState)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

import pytest

from worldline.actors.belief_model import posterior
from worldline.actors.projector import beliefs, core
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import BeliefEdge, Evidence
from worldline.protocols.messages import (
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    BeliefReply,
    GetBelief,
    TraceBelief,
    TraceReply,
)
from worldline.protocols.subjects import state

W: Final = "w1"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)


def ctx(seq: int) -> Context:
    return Context(world=W, author="m", subject=state(W, "belief"), seq=seq, now=T0)


def put_belief(
    st: MemoryState, belief_id: str, confidence: float, version: int, **fields: object
) -> None:
    belief = Belief(id=belief_id, text=f"text of {belief_id}", type="claim",
                    confidence=confidence, author="ada", created_at=T0, updated_at=T0,
                    version=version, prior=confidence, **fields)  # type: ignore[arg-type]  # fmt: skip
    st.apply(core.handle(st, BeliefChanged(belief=belief), ctx(version)))


def put_edge(st: MemoryState, edge: BeliefEdge) -> None:
    st.apply(core.handle(st, BeliefEdgeChanged(edge=edge), ctx(edge.version)))


def get(st: MemoryState, belief_id: str, at: datetime | None = None) -> Belief:
    reply = core.serve(st, GetBelief(belief_id=belief_id, at=at), W)
    assert isinstance(reply, BeliefReply)
    assert reply.belief is not None
    return reply.belief


def edge(edge_id: str, kind: str, source: str, target: str, version: int,
         confidence: float = 1.0, **fields: object) -> BeliefEdge:  # fmt: skip
    return BeliefEdge(id=edge_id, type=kind, source=source, target=target,  # type: ignore[arg-type]
                      confidence=confidence, version=version, **fields)  # type: ignore[arg-type]  # fmt: skip


def test_get_walks_the_dependency_closure_like_the_whole_graph() -> None:
    st = MemoryState()
    for i, conf in enumerate((0.9, 0.6, 0.3, 0.8)):
        put_belief(st, f"b{i}", conf, version=i + 1)
    edges = [edge("e1", "depends_on", "b0", "b1", 10, 0.5),
             edge("e2", "depends_on", "b1", "b2", 11, 1.0),
             edge("e3", "supports", "b3", "b0", 12)]  # fmt: skip
    for e in edges:
        put_edge(st, e)
    whole = posterior.effective_confidence(
        {"b0": 0.9, "b1": 0.6, "b2": 0.3, "b3": 0.8}, edges
    )
    for belief_id in ("b0", "b1", "b2", "b3"):
        assert get(st, belief_id).effective_confidence == pytest.approx(
            whole[belief_id]
        )
    lowered = get(st, "b0").effective_confidence
    assert lowered is not None
    assert lowered < 0.9


def test_relinking_or_removing_an_edge_updates_the_index() -> None:
    st = MemoryState()
    for i in range(3):
        put_belief(st, f"b{i}", 0.5, version=i + 1)
    put_edge(st, edge("e1", "contradicts", "b0", "b1", 10))
    assert "contradicted" in get(st, "b1").flags
    put_edge(st, edge("e1", "contradicts", "b0", "b2", 11))  # same id, new target
    assert "contradicted" not in get(st, "b1").flags
    assert "contradicted" in get(st, "b2").flags
    put_edge(st, edge("e1", "contradicts", "b0", "b2", 9))  # older: ignored
    assert "contradicted" in get(st, "b2").flags
    put_edge(st, edge("e1", "contradicts", "b0", "b2", 12, removed=True))
    assert "contradicted" not in get(st, "b2").flags
    assert "contradicted" not in get(st, "b0").flags


def test_labels_and_supersession_come_from_the_neighbourhood() -> None:
    st = MemoryState()
    put_belief(st, "base", 0.5, version=1)
    put_belief(st, "a", 0.7, version=2)
    put_belief(st, "b", 0.7, version=3)
    put_edge(st, edge("e1", "depends_on", "a", "base", 10))
    assert get(st, "base").label == ""
    put_edge(st, edge("e2", "derived_from", "b", "base", 11))
    assert get(st, "base").label == "load-bearing"
    later = T0 + timedelta(days=3)
    put_edge(st, edge("e3", "supersedes", "b", "a", 12, at=later))
    assert get(st, "a").valid_until == later


def test_a_read_at_a_clock_sees_only_evidence_observed_by_then() -> None:
    st = MemoryState()
    evidence = [
        Evidence(id=f"e{i}", belief_id="b", direction="supports", kind="citation",
                 source=f"s{i}", observed_at=T0 + timedelta(days=i), author="ada")
        for i in range(3)
    ]  # fmt: skip
    belief = Belief(id="b", text="t", type="claim", confidence=0.5, author="ada",
                    created_at=T0, updated_at=T0, version=1)  # fmt: skip
    st.apply(core.handle(st, BeliefChanged(belief=belief, evidence=evidence), ctx(1)))
    assert get(st, "b", at=T0).evidence_count == 1
    assert get(st, "b", at=T0 + timedelta(days=2)).evidence_count == 3
    early = get(st, "b", at=T0)
    late = get(st, "b", at=T0 + timedelta(days=2))
    assert early.confidence is not None
    assert late.confidence is not None
    assert late.confidence > early.confidence
    reply = core.serve(st, TraceBelief(belief_id="b"), W)
    assert isinstance(reply, TraceReply)
    assert [s.evidence.id for s in reply.steps] == ["e0", "e1", "e2"]
    assert beliefs.world_beliefs(st, W, None)[0].id == "b"

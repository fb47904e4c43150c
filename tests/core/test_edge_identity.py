"""Belief edges are first-class and idempotent (issue 25, point 3): an edge's default
id is derived from its content (type and ends, ``text.edge_id``), so relating the same
two beliefs the same way again re-states one edge instead of adding a second whose
dependency compounds; removing the edge takes its effect away. Pure cores (fusion, the
materializer, the projector) fed the log, no bus (docs/belief-math.md, "Edges").

Before this change every relate drew a random id: ``relate c depends_on a`` three times
took c's effective confidence 0.32 -> 0.12 -> 0.04.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

import pytest

from worldline.actors.belief_model.text import edge_id
from worldline.actors.registry import build
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import BeliefEdge, EdgeType
from worldline.protocols.messages import (
    AddBelief,
    BeliefReply,
    GetBelief,
    LinkBeliefs,
    Message,
    OpsInbox,
    ReadWorld,
    WorldReply,
    encode,
)
from worldline.protocols.subjects import (
    MATERIALIZER_IN,
    MATERIALIZER_OPS_IN,
    RpcVerb,
    author_of,
    channel_of,
    ops,
    rpc_pattern,
    world_of,
)

W: Final = "w1"
AT: Final = datetime(2026, 1, 1, tzinfo=UTC)


def ctx(subject: str, seq: int) -> Context:
    return Context(world=world_of(subject), author=author_of(subject),
                   subject=subject, seq=seq, now=AT)  # fmt: skip


class Pipeline:
    """Fusion, the materializer and a projector replica, each op fed through all
    three in order (the op, then fusion's posteriors, then the change feed)."""

    def __init__(self) -> None:
        self.fusion_in = build("fusion").inputs[0]
        inputs = build("materializer").inputs
        self.ops_in = next(i for i in inputs if i.consumer == MATERIALIZER_OPS_IN)
        self.derived_in = next(i for i in inputs if i.consumer == MATERIALIZER_IN)
        self.state_in = build("projector", replica="r1").inputs[0]
        self.fusion, self.mat, self.proj = MemoryState(), MemoryState(), MemoryState()
        self.seqs = {"ops": 0, "derived": 0, "state": 0}

    def _next(self, stream: str) -> int:
        self.seqs[stream] += 1
        return self.seqs[stream]

    def run(self, *log: OpsInbox) -> Pipeline:
        for op in log:
            c = ctx(ops(W, op.author), self._next("ops"))
            posteriors = self.fusion.feed(self.fusion_in, encode(op), c)
            changes = self.mat.feed(self.ops_in, encode(op), c)
            for out in posteriors:
                d = ctx(out.subject, self._next("derived"))
                changes += self.mat.feed(self.derived_in, encode(out.message), d)
            for out in changes:
                if channel_of(out.subject) == "state":
                    s = ctx(out.subject, self._next("state"))
                    self.proj.feed(self.state_in, encode(out.message), s)
        return self

    def effective(self, belief_id: str) -> float | None:
        reply = self._serve("get", GetBelief(belief_id=belief_id, at=AT))
        assert isinstance(reply, BeliefReply)
        assert reply.belief is not None
        return reply.belief.effective_confidence

    def edges(self) -> list[BeliefEdge]:
        reply = self._serve("read", ReadWorld(at=AT))
        assert isinstance(reply, WorldReply)
        return list(reply.belief_edges)

    def _serve(self, verb: RpcVerb, request: Message) -> Message | None:
        services = build("projector", replica="r1").services
        service = next(s for s in services if s.subject == rpc_pattern(verb))
        return service.serve(self.proj, request, W)


_ops = iter(range(1_000_000))


def add(belief_id: str, confidence: float) -> AddBelief:
    return AddBelief(op_id=f"op-add-{belief_id}", author="ada", at=AT,
                     belief_id=belief_id, text=f"Statement {belief_id}.",
                     confidence=confidence)  # fmt: skip


def relate(
    source: str = "c",
    target: str = "a",
    *,
    author: str = "ada",
    type: EdgeType = "depends_on",
    confidence: float = 0.8,
    removed: bool = False,
    id: str | None = None,
) -> LinkBeliefs:
    """A ``LinkBeliefs`` as the SDK's ``relate`` (or ``unrelate``) writes it."""
    edge = BeliefEdge(id=id or edge_id(W, type, source, target), type=type,
                      source=source, target=target, confidence=confidence,
                      removed=removed)  # fmt: skip
    return LinkBeliefs(op_id=f"op-link-{next(_ops)}", author=author, at=AT, edge=edge)


def beliefs() -> tuple[AddBelief, ...]:
    return add("a", 0.2), add("c", 0.9)


def test_the_edge_id_is_its_content() -> None:
    one = edge_id(W, "depends_on", "c", "a")
    assert one == edge_id(W, "depends_on", "c", "a")  # every relate, every agent
    assert one.startswith("be-")
    assert len({one, edge_id(W, "depends_on", "a", "c"),  # direction counts
                edge_id(W, "supports", "c", "a"),  # so does the type
                edge_id("w2", "depends_on", "c", "a")}) == 4  # fmt: skip
    # "c contradicts a" is "a contradicts c": one disagreement, one edge.
    assert edge_id(W, "contradicts", "c", "a") == edge_id(W, "contradicts", "a", "c")


def test_relating_twice_is_one_edge_and_does_not_compound() -> None:
    once = Pipeline().run(*beliefs(), relate())
    twice = Pipeline().run(*beliefs(), relate(), relate())
    thrice = Pipeline().run(*beliefs(), relate(), relate(), relate())
    base = once.effective("c")
    assert base is not None
    assert base < 0.9  # the dependency on a weak premise costs c
    for repeated in (twice, thrice):
        assert [e.id for e in repeated.edges()] == [edge_id(W, "depends_on", "c", "a")]
        assert repeated.effective("c") == pytest.approx(base)
    # What the derived id prevents: two ids for one relation compound.
    two_ids = Pipeline().run(*beliefs(), relate(id="be-x"), relate(id="be-y"))
    compounded = two_ids.effective("c")
    assert compounded is not None
    assert compounded < base


def test_a_repeat_re_states_the_edge_last_write_wins() -> None:
    pipe = Pipeline().run(*beliefs(), relate(confidence=0.8), relate(confidence=0.3))
    (edge,) = pipe.edges()
    assert edge.confidence == 0.3
    weak = Pipeline().run(*beliefs(), relate(confidence=0.3))
    assert pipe.effective("c") == pytest.approx(weak.effective("c"))


def test_a_repeat_by_another_agent_is_the_same_edge_and_needs_authority() -> None:
    """Another agent relating the same beliefs the same way names the same edge: in
    a world with no declaration only its author and the operator may re-state it,
    so spock's repeat is refused and adds nothing; the operator's re-states it."""
    pipe = Pipeline().run(*beliefs(), relate())
    base = pipe.effective("c")
    pipe.run(relate(author="spock", confidence=0.99))
    (edge,) = pipe.edges()
    assert (edge.author, edge.confidence) == ("ada", 0.8)
    assert pipe.effective("c") == pytest.approx(base)
    pipe.run(relate(author="operator", confidence=0.5))
    (edge,) = pipe.edges()
    assert (edge.author, edge.confidence) == ("operator", 0.5)


def test_removing_the_edge_takes_its_effect_away_and_relating_restores_it() -> None:
    unlinked = Pipeline().run(*beliefs()).effective("c")
    pipe = Pipeline().run(*beliefs(), relate())
    linked = pipe.effective("c")
    pipe.run(relate(removed=True))
    assert pipe.edges() == []
    assert pipe.effective("c") == pytest.approx(unlinked)
    assert linked != pytest.approx(unlinked)
    pipe.run(relate())  # the same content again: the same edge, back
    assert [e.id for e in pipe.edges()] == [edge_id(W, "depends_on", "c", "a")]
    assert pipe.effective("c") == pytest.approx(linked)

"""No single agent re-wires the shared world's belief edges (issue 23): anyone may link
a new edge, and evidence about any edge stays open (weighed by its voice), but only the
edge's author (who first linked its id), the operator, the world's admins and the
agents of ``[trust] close`` may re-state it: a new strength, type or ends, a removal.
Anyone else is rejected ``unauthorized`` by the materializer, which decides every link,
and nothing changes anywhere: fusion records only what the same rule allows, so the
edge and its posterior agree in every store, whatever the split into shards. Pure
cores, no bus.

Before this change spock removed scotty's ``depends_on`` edge (the claim it held up
looked solid again), re-weighed it, and re-typed a ``contradicts`` edge.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import charter
from worldline.actors.fusion import core as fusion
from worldline.actors.fusion.edges import FusedEdge, decode_edge, edge_key
from worldline.actors.materializer import core as materializer
from worldline.actors.materializer import crew
from worldline.actors.materializer.edge_posterior import edge_posterior_key
from worldline.actors.materializer.keys import belief_edge_key
from worldline.actors.runtime.memory import MemoryState, state_hash
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import BeliefEdge, EdgeType, Evidence
from worldline.protocols.messages import (
    AddBelief,
    AddEdgeEvidence,
    DeclareWorld,
    EdgePosterior,
    LinkBeliefs,
    OpsInbox,
    OpStatus,
    OpStatusReply,
    OpVerdict,
    PosteriorUpdate,
)
from worldline.protocols.subjects import author_of, ops, world_of
from worldline.protocols.world import (
    OPERATOR,
    Authority,
    TrustRules,
    WorldDecl,
    WorldInfo,
)

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Outgoing

W: Final = "w1"
AT: Final = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

# henry rules the world, book may close (and so re-wire) anything; scotty, spock and
# ada are crew; mallory is named nowhere.
DECL: Final = WorldDecl(
    world=WorldInfo(id=W),
    authority=Authority(admins=["henry"]),
    sources={"lab": ["ada", "spock", "scotty"]},
    trust=TrustRules(close=["book"]),
)
_BEDGE: Final = msgspec.msgpack.Decoder(BeliefEdge)


def ctx(subject: str, seq: int) -> Context:
    return Context(
        world=world_of(subject), author=author_of(subject), subject=subject, seq=seq,
        now=AT,
    )  # fmt: skip


class Pipe:
    """Fusion (``shards`` of them) and the materializer fed the log as live, op by op:
    each op to every shard and to the materializer, then what fusion published."""

    def __init__(self, shards: int = 1) -> None:
        self.fusion = [MemoryState() for _ in range(shards)]
        self.mat = MemoryState()
        self.seq = 0
        self.published: list[Outgoing] = []  # fusion's answer to the last op

    def op(self, op: OpsInbox) -> int:
        self.seq += 1
        c = ctx(ops(W, op.author), self.seq)
        n = len(self.fusion)
        self.published = [
            out
            for i, state in enumerate(self.fusion)
            for out in state.apply(fusion.handle(state, op, c, shard=(i, n)))
        ]
        self.mat.apply(crew.handle(self.mat, op, c))
        for out in self.published:
            message = out.message
            assert isinstance(message, PosteriorUpdate | OpVerdict | EdgePosterior)
            d = msgspec.structs.replace(ctx(out.subject, 1), batch_prepared=self.seq)
            self.mat.apply(materializer.handle_derived(self.mat, message, d))
        return self.seq

    def run(self, *log: OpsInbox) -> Pipe:
        for op in log:
            self.op(op)
        return self

    def status(self, seq: int) -> OpStatusReply:
        reply = materializer.serve(self.mat, OpStatus(seq=seq), W)
        assert isinstance(reply, OpStatusReply)
        return reply

    def edge(self, edge_id: str) -> BeliefEdge | None:
        """The edge as the materializer holds it (as last stated)."""
        raw = self.mat.get(belief_edge_key(W, edge_id))
        return None if raw is None else _BEDGE.decode(raw)

    def fused(self, edge_id: str) -> FusedEdge | None:
        """Fusion's record of the edge, from the shard that owns it."""
        held = [raw for s in self.fusion if (raw := s.get(edge_key(W, edge_id)))]
        assert len(held) <= 1
        return decode_edge(held[0]) if held else None

    def refused(self, op: LinkBeliefs, code: str = "unauthorized") -> str:
        """``op`` applied: rejected with ``code`` by the materializer, fusion silent
        (and, for ``unauthorized``, unchanged), the edge and its posterior as they
        were. Returns the reason."""
        fused = [dict(s.data) for s in self.fusion]
        edge = self.mat.get(belief_edge_key(W, op.edge.id))
        post = self.mat.get(edge_posterior_key(W, op.edge.id))
        reply = self.status(self.op(op))
        assert reply.state == "rejected"
        assert reply.rejection is not None
        assert reply.rejection.code == code
        assert reply.verdict is None  # one answer: the materializer's
        assert not self.published
        if code == "unauthorized":  # (fusion cannot see an unknown end: it records)
            assert [dict(s.data) for s in self.fusion] == fused  # nothing half-applied
        assert self.mat.get(belief_edge_key(W, op.edge.id)) == edge
        assert self.mat.get(edge_posterior_key(W, op.edge.id)) == post
        return reply.rejection.reason

    def applied(self, op: LinkBeliefs) -> BeliefEdge:
        reply = self.status(self.op(op))
        assert reply.state == "applied", reply.rejection
        edge = self.edge(op.edge.id)
        fused = self.fused(op.edge.id)
        assert edge is not None
        assert fused is not None
        for held in (edge, fused.edge):  # both actors hold the statement
            assert (held.type, held.source, held.target) == (
                op.edge.type,
                op.edge.source,
                op.edge.target,
            )
            assert (held.confidence, held.removed) == (
                op.edge.confidence,
                op.edge.removed,
            )
            assert held.version == self.seq
        return edge


def declare() -> DeclareWorld:
    return DeclareWorld(op_id="op-declare", author="henry", at=AT, declaration=DECL)


def add(belief_id: str, author: str = "scotty") -> AddBelief:
    return AddBelief(
        op_id=f"op-add-{belief_id}",
        author=author,
        at=AT,
        belief_id=belief_id,
        text=f"Statement {belief_id}.",
    )


_links = iter(range(1_000_000))


def link(
    author: str,
    edge_id: str = "e1",
    source: str = "c",
    target: str = "a",
    *,
    type: EdgeType = "depends_on",
    strength: float = 0.9,
    removed: bool = False,
) -> LinkBeliefs:
    edge = BeliefEdge(id=edge_id, type=type, source=source, target=target,
                      confidence=strength, removed=removed)  # fmt: skip
    op_id = f"op-link-{edge_id}-{author}-{next(_links)}"
    return LinkBeliefs(op_id=op_id, author=author, at=AT, edge=edge)


def edge_evidence(author: str, edge_id: str = "e1", n: int = 0) -> AddEdgeEvidence:
    item = Evidence(
        id=f"ev-{edge_id}-{author}-{n}",
        belief_id=edge_id,
        direction="supports",
        kind="measurement",
        source=f"agent:{author}",
        observed_at=AT,
        author=author,
    )
    return AddEdgeEvidence(op_id=f"op-{item.id}", author=author, at=AT,
                           edge_id=edge_id, evidence=item)  # fmt: skip


def scottys(*, declared: bool = True, shards: int = 1) -> Pipe:
    """scotty's claim ``c`` depends on his assumption ``a`` (edge ``e1``, measured),
    and ``c`` contradicts ``b`` (edge ``e2``)."""
    log: list[OpsInbox] = [declare()] if declared else []
    pipe = Pipe(shards).run(*log, add("a"), add("b"), add("c"))
    pipe.applied(link("scotty"))
    pipe.op(edge_evidence("scotty"))
    pipe.applied(link("scotty", "e2", "c", "b", type="contradicts"))
    assert pipe.mat.get(edge_posterior_key(W, "e1")) is not None
    return pipe


# --- the attacks ----------------------------------------------------------------------


def test_spock_cannot_remove_scottys_depends_on_edge() -> None:
    pipe = scottys()
    reason = pipe.refused(link("spock", removed=True))
    assert "spock may not change or remove belief edge e1, which scotty linked" in (
        reason
    )
    assert "[trust] close" in reason
    edge = pipe.edge("e1")
    assert edge is not None
    assert (edge.removed, edge.author) == (False, "scotty")  # c still depends on a
    # The writer hears it in its inbox too, like any rejection.
    assert any(k.startswith(f"inbox/{W}/spock/".encode()) for k in pipe.mat.data)


@pytest.mark.parametrize(
    "change",
    [
        {"strength": 0.05},  # re-weigh
        {"type": "supports"},  # re-type
        {"target": "b"},  # re-aim
        {"strength": 0.9},  # even stating it again as it is
    ],
)
def test_spock_cannot_re_weigh_re_type_or_re_aim_scottys_edge(
    change: dict[str, Any],
) -> None:
    pipe = scottys()
    pipe.refused(link("spock", **change))
    pipe.refused(link("spock", "e2", "c", "b", type="supports"))  # nor the contradicts


@pytest.mark.parametrize(
    ("author", "allowed"),
    [
        ("scotty", True),  # its author
        ("henry", True),  # an admin
        (OPERATOR, True),  # the operator
        ("book", True),  # [trust] close
        ("spock", False),  # a crew member
        ("ada", False),  # another one
        ("mallory", False),  # a stranger
    ],
)
@pytest.mark.parametrize("shards", [1, 3])
def test_who_may_change_an_edge(author: str, allowed: bool, shards: int) -> None:
    pipe = scottys(shards=shards)
    reweigh = link(author, strength=0.3)
    if not allowed:
        pipe.refused(reweigh)
        pipe.refused(link(author, removed=True))
        return
    pipe.applied(reweigh)
    # The posterior moved to the new prior in both stores.
    (posterior,) = [o.message for o in pipe.published]
    assert isinstance(posterior, EdgePosterior)
    assert posterior.edge.stated == 0.3
    pipe.applied(link(author, removed=True))
    fused = pipe.fused("e1")
    assert fused is not None
    assert fused.owner == "scotty"  # still scotty's edge, whoever changed it


def test_an_edges_author_is_who_linked_it_first() -> None:
    pipe = scottys()
    assert pipe.applied(link("henry", strength=0.5)).author == "henry"  # last writer
    pipe.refused(link("spock", strength=0.1))
    pipe.refused(link("ada", removed=True))
    pipe.applied(link("scotty", strength=0.95))  # its author still may


def test_in_an_undeclared_world_the_author_and_the_operator_change_an_edge() -> None:
    pipe = scottys(declared=False)
    reason = pipe.refused(link("spock", removed=True))
    assert "no declaration" in reason
    pipe.refused(link("henry", strength=0.1))  # admin of nothing yet
    pipe.applied(link(OPERATOR, strength=0.4))
    pipe.applied(link("scotty", removed=True))


def test_anyone_may_link_a_new_edge_and_weigh_in_on_anothers() -> None:
    pipe = scottys()
    pipe.applied(link("spock", "e3", "c", "a", type="contradicts", strength=0.7))
    before = pipe.mat.get(edge_posterior_key(W, "e1"))
    pipe.op(edge_evidence("spock"))  # evidence about scotty's edge: open, voiced
    (posterior,) = [o.message for o in pipe.published]
    assert isinstance(posterior, EdgePosterior)
    assert posterior.edge.evidence_count == 2
    assert pipe.mat.get(edge_posterior_key(W, "e1")) != before
    # And spock's own edge is spock's: scotty may not remove it.
    pipe.refused(link("scotty", "e3", "c", "a", type="contradicts", removed=True))
    pipe.applied(link("spock", "e3", "c", "a", type="contradicts", removed=True))


def test_the_first_link_of_an_id_claims_it_even_when_refused() -> None:
    """Fusion cannot see whether a link's ends exist, so it records a link the
    materializer refuses for an unknown end; both count its author as the id's, so
    they agree on every later link of it (another agent picks another id)."""
    pipe = Pipe().run(declare(), add("a"), add("c"))
    pipe.refused(link("mallory", "e9", "c", "nope"), code="unknown_entity")
    assert pipe.edge("e9") is None
    fused = pipe.fused("e9")
    assert fused is not None
    assert fused.owner == "mallory"
    pipe.refused(link("scotty", "e9"))  # mallory's id: not scotty's to state
    pipe.applied(link("mallory", "e9"))


def test_a_refused_change_is_answered_by_the_materializer_alone() -> None:
    """No shard of fusion answers (or records) it: one rejection, never a verdict
    or a dead letter."""
    for shards in (1, 3):
        pipe = scottys(shards=shards)
        pipe.refused(link("spock", removed=True))


def test_the_rule_is_the_charters() -> None:
    assert charter.edge_refusal(DECL, "scotty", "scotty", edge_id="e1") is None
    assert charter.edge_refusal(DECL, "book", "scotty", edge_id="e1") is None
    assert charter.edge_refusal(None, OPERATOR, "scotty", edge_id="e1") is None
    assert charter.edge_refusal(None, "henry", "scotty", edge_id="e1")
    assert charter.edge_refusal(DECL, "spock", "scotty", edge_id="e1")


# --- the materializer decides, fusion follows (hypothesis) ---------------------------

AGENTS: Final = ("scotty", "spock", "henry", "book", "mallory", OPERATOR)
ENDS: Final = ("a", "b", "c", "x")  # x: never added
EDGES: Final = ("e1", "e2")


def may(declared: bool, author: str, owner: str) -> bool:
    """The rule, written out again here (not read from the charter)."""
    if author in (owner, OPERATOR):
        return True
    return declared and author in ("henry", "book")  # the admin, [trust] close


Drawn = tuple[str, str, str, str, str, str, float, bool]


@st.composite
def logs(draw: st.DrawFn) -> tuple[bool, list[Drawn]]:
    step = st.tuples(
        st.sampled_from(["link", "link", "link", "evidence"]),
        st.sampled_from(EDGES),
        st.sampled_from(AGENTS),
        st.sampled_from(ENDS),
        st.sampled_from(ENDS),
        st.sampled_from(["depends_on", "contradicts"]),
        st.sampled_from([0.2, 0.9]),
        st.booleans(),
    )
    return draw(st.booleans()), draw(st.lists(step, min_size=1, max_size=16))


def expected(
    declared: bool, log: list[OpsInbox]
) -> tuple[dict[str, BeliefEdge], dict[str, BeliefEdge], dict[str, str]]:
    """What the materializer holds per edge, what fusion records, and each link's
    outcome, by the rule."""
    owners: dict[str, str] = {}
    held: dict[str, BeliefEdge] = {}
    fused: dict[str, BeliefEdge] = {}
    outcomes: dict[str, str] = {}
    for op in log:
        if not isinstance(op, LinkBeliefs):
            continue
        edge = op.edge
        if edge.source == edge.target:
            outcomes[op.op_id] = "invalid"
            continue
        owner = owners.get(edge.id)
        if owner is None and edge.removed:
            outcomes[op.op_id] = "unknown_entity"
            continue
        if owner is not None and not may(declared, op.author, owner):
            outcomes[op.op_id] = "unauthorized"
            continue
        owners.setdefault(edge.id, op.author)
        fused[edge.id] = edge  # fusion cannot see the ends
        if "x" in (edge.source, edge.target) or (edge.removed and edge.id not in held):
            outcomes[op.op_id] = "unknown_entity"
            continue
        outcomes[op.op_id] = "applied"
        held[edge.id] = edge
    return held, fused, outcomes


def build_log(declared: bool, drawn: list[Drawn]) -> list[OpsInbox]:
    log: list[OpsInbox] = [declare()] if declared else []
    log += [add("a"), add("b"), add("c")]
    for n, (what, edge_id, agent, src, dst, type, strength, removed) in enumerate(
        drawn
    ):
        if what == "evidence":
            log.append(edge_evidence(agent, edge_id, n))
            continue
        op = link(agent, edge_id, src, dst, type=type,  # type: ignore[arg-type]
                  strength=strength, removed=removed)  # fmt: skip
        log.append(msgspec.structs.replace(op, op_id=f"op-{n}"))
    return log


def _stated(edge: BeliefEdge | None) -> tuple[object, ...] | None:
    if edge is None:
        return None
    return (edge.type, edge.source, edge.target, edge.confidence, edge.removed)


@settings(max_examples=80, deadline=None)
@given(logs())
def test_fusion_and_the_materializer_apply_exactly_the_links_the_rule_allows(
    drawn: tuple[bool, list[Drawn]],
) -> None:
    declared, steps = drawn
    log = build_log(declared, steps)
    held, fused, outcomes = expected(declared, log)
    hashes = set()
    for shards in (1, 3):
        pipe = Pipe(shards)
        seqs = {pipe.op(op): op.op_id for op in log}
        hashes.add(state_hash(pipe.mat, world=W))
        for edge_id in EDGES:
            edge, record = pipe.edge(edge_id), pipe.fused(edge_id)
            assert _stated(edge) == _stated(held.get(edge_id))
            record_edge = None if record is None else record.edge
            assert _stated(record_edge) == _stated(fused.get(edge_id))
        for seq, op_id in seqs.items():
            if op_id not in outcomes:
                continue
            reply = pipe.status(seq)
            if outcomes[op_id] == "applied":
                assert reply.state == "applied"
            else:
                assert reply.state == "rejected"
                assert reply.rejection is not None
                assert reply.rejection.code == outcomes[op_id]
    assert len(hashes) == 1  # any split into shards: the same canonical state

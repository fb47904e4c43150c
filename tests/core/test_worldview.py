"""The worldview projection (P10): a pure, bounded, traced function of (scene, agent,
query, clock), built from Scene structs directly or served by the projector core over
a MemoryState replica."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Final

import msgspec
import pytest

from worldline.actors.belief_model import posterior
from worldline.actors.projector import beliefs, core, prompt, views
from worldline.actors.projector.worldview import (
    CAP,
    CUT,
    FLOOR,
    MAX_TOKENS,
    Scene,
    bound,
    estimate_tokens,
    project,
    render,
)
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import BeliefEdge, Contradiction, Evidence
from worldline.protocols.messages import (
    AgentView,
    Before,
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    BeliefReply,
    BeliefType,
    EdgeChanged,
    EntityChanged,
    GetBelief,
    ProjectorInbox,
    WorldDeclared,
    WorldviewReply,
)
from worldline.protocols.subjects import state
from worldline.protocols.world import (
    Action,
    Authority,
    Constraint,
    Edge,
    Entity,
    Environment,
    FieldState,
    Goal,
    Grant,
    Intent,
    Policy,
    WorldDecl,
    WorldInfo,
)
from worldline.protocols.worldview import SLICES, Leaf, Worldview

W: Final = "w1"
AGENT: Final = "spock"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
QUERY: Final = "decide whether the payment gateway rollout can ship"

DECL: Final = WorldDecl(
    world=WorldInfo(id=W, kind="software", description="The payments crew."),
    environment=Environment(
        entity_types=["project"], surfaces=["repo", "tickets"], source_ranking=["ci"]
    ),
    intent=Intent(
        goals=[
            Goal(id="ship", text="Ship the payment gateway", success=["p99 < 300ms"]),
            Goal(id="retain", text="Keep churn of pilot customers low"),
        ],
        constraints=[
            Constraint(id="budget", text="Stay within the cloud budget"),
            Constraint(id="legal", text="No customer data leaves the EU"),
        ],
    ),
    policy=Policy(
        invariants=["main stays green"],
        source_hierarchy=["measurement", "docs"],
        conventions=["small commits"],
        anti_patterns=["friday deploys"],
    ),
    actions=[
        Action(id="lookup", text="Read the dashboards", safety="info"),
        Action(id="retry", text="Rerun the flaky job", safety="mutates"),
        Action(
            id="deploy",
            text="Deploy the gateway to prod",
            safety="needs-approval",
            constraints=["budget", "legal"],
        ),
    ],
    authority=Authority(grants=[Grant(agents=[AGENT], fields=["project.*"])]),
)

PROJECT: Final = Entity(
    id="project:gateway",
    type="project",
    fields={"phase": FieldState(value="build", version=3, author="ada", at=T0)},
    version=3,
)
ALLY: Final = Entity(id="agent:ada", type="agent", version=4)


def agent_view(*, may_write: tuple[str, ...] = ("project.*",)) -> AgentView:
    return AgentView(
        world=W, agent=AGENT, related=[ALLY, PROJECT], may_write=list(may_write)
    )


def belief(
    belief_id: str,
    text: str,
    *,
    kind: BeliefType = "claim",
    confidence: float | None = 0.6,
    uncertainty: float | None = 0.1,
    flags: tuple[str, ...] = (),
) -> Belief:
    return Belief(
        id=belief_id,
        text=text,
        type=kind,
        confidence=confidence,
        uncertainty=uncertainty,
        flags=flags,
        author="ada",
        created_at=T0,
        updated_at=T0,
    )


def gap(belief_id: str, text: str) -> Belief:
    return belief(belief_id, text, kind="gap", confidence=None, uncertainty=None)


def edge(edge_id: str, kind: str, source: str, target: str) -> BeliefEdge:
    return BeliefEdge(id=edge_id, type=kind, source=source, target=target)  # type: ignore[arg-type]


def rich_scene() -> Scene:
    """A declared world with every slice populated: claims, a dependency, a
    contradiction, a gap, a goal belief, related entities."""
    beliefs = [
        belief("b-latency", "Gateway p99 latency is 450ms under load", confidence=0.7,
               uncertainty=0.2, flags=("uncertain",)),
        belief("b-cache", "The token cache is warm after deploys", confidence=0.8),
        belief("b-cdn", "The CDN serves the checkout page", confidence=0.9,
               uncertainty=0.05, flags=("stable",)),
        belief("b-eu", "Payment logs stay in the EU region", confidence=0.4,
               uncertainty=0.25, flags=("contradicted",)),
        belief("b-us", "Payment logs replicate to a US bucket", confidence=0.5,
               uncertainty=0.25, flags=("contradicted",)),
        gap("b-why", "Why does the gateway time out at peak?"),
        belief("b-goal", "Cut checkout abandonment by half", kind="goal",
               confidence=None, uncertainty=None),
    ]  # fmt: skip
    edges = [
        edge("e-dep", "depends_on", "b-latency", "b-cache"),
        edge("e-vs", "contradicts", "b-eu", "b-us"),
        edge("e-sup", "supports", "b-cdn", "b-latency"),
    ]
    contradictions = [
        Contradiction(
            kind="edge", beliefs=("b-eu", "b-us"), strength=0.8,
            trace=("b-eu", "b-us", "e-vs"),
        )
    ]  # fmt: skip
    return Scene(
        world=W,
        decl=DECL,
        beliefs=beliefs,
        edges=edges,
        contradictions=contradictions,
        view=agent_view(),
    )


def slices(view: Worldview) -> dict[str, list[Leaf]]:
    return {name: list(getattr(view, name)) for name in SLICES}


def every_leaf(view: Worldview) -> list[Leaf]:
    leaves = [leaf for name in SLICES for leaf in getattr(view, name)]
    return leaves + ([view.limiting] if view.limiting else [])


def json_bytes(view: Worldview) -> bytes:
    return msgspec.json.encode(view, order="sorted")


# --- the core path: a MemoryState replica fed the change feed -----------------------


def ctx(seq: int, kind: str = "belief") -> Context:
    return Context(world=W, author="m", subject=state(W, kind), seq=seq, now=T0)


def replica() -> MemoryState:
    """A replica holding the declaration, spock's neighbourhood and a few beliefs
    (one with evidence, a dependency, a contradiction)."""
    st = MemoryState()
    changes: list[tuple[ProjectorInbox, str]] = [
        (WorldDeclared(declaration=DECL, version=1), "declared"),
        (EntityChanged(entity=PROJECT), "entity"),
        (EntityChanged(entity=ALLY), "entity"),
        (EdgeChanged(edge=Edge(id="x1", type="works_on", source="agent:spock",
                               target="project:gateway", version=5)), "edge"),
        (EdgeChanged(edge=Edge(id="x2", type="pairs_with", source="agent:ada",
                               target="agent:spock", version=6)), "edge"),
    ]  # fmt: skip
    for seq, (change, kind) in enumerate(changes, start=1):
        st.apply(core.handle(st, change, ctx(seq, kind)))
    evidence = [
        Evidence(id="ev-1", belief_id="b-latency", direction="supports",
                 kind="measurement", source="grafana", observed_at=T0, author="ada"),
        Evidence(id="ev-2", belief_id="b-latency", direction="supports",
                 kind="inference", source="ada-notes",
                 observed_at=T0 + timedelta(days=2), author="ada"),
    ]  # fmt: skip
    records = [
        BeliefChanged(belief=msgspec.structs.replace(
            belief("b-latency", "Gateway p99 latency is 450ms under load"),
            prior=0.5, version=10), evidence=evidence),
        BeliefChanged(belief=msgspec.structs.replace(
            belief("b-cache", "The token cache is warm after deploys"),
            prior=0.7, version=11)),
        BeliefChanged(belief=msgspec.structs.replace(
            belief("b-eu", "Payment logs stay in the EU region"),
            prior=0.6, version=12)),
        BeliefChanged(belief=msgspec.structs.replace(
            belief("b-us", "Payment logs replicate to a US bucket"),
            prior=0.5, version=13)),
        BeliefChanged(belief=msgspec.structs.replace(
            gap("b-why", "Why does the gateway time out at peak?"), version=14)),
    ]  # fmt: skip
    for record in records:
        st.apply(core.handle(st, record, ctx(record.belief.version)))
    for e in (
        BeliefEdge(id="e-dep", type="depends_on", source="b-latency",
                   target="b-cache", confidence=0.9, version=20),
        BeliefEdge(id="e-vs", type="contradicts", source="b-eu", target="b-us",
                   confidence=0.8, version=21),
    ):  # fmt: skip
        st.apply(core.handle(st, BeliefEdgeChanged(edge=e), ctx(e.version)))
    return st


def before(st: MemoryState, at: datetime, query: str = QUERY) -> Worldview:
    reply = core.serve(st, Before(agent=AGENT, query=query, at=at), W)
    assert isinstance(reply, WorldviewReply)
    return reply.view


# --- P10: determinism and the clock -----------------------------------------------


def test_equal_inputs_give_an_equal_byte_identical_view() -> None:
    one = project(rich_scene(), AGENT, QUERY, T0)
    two = project(rich_scene(), AGENT, QUERY, T0)
    assert one == two
    assert json_bytes(one) == json_bytes(two)
    assert one.current  # a non-trivial view
    again = project(rich_scene(), AGENT, QUERY, T0)
    assert json_bytes(again) == json_bytes(one)


def test_the_served_view_is_byte_identical_at_an_equal_clock() -> None:
    at = T0 + timedelta(days=30)
    one = before(replica(), at)
    two = before(replica(), at)
    assert json_bytes(one) == json_bytes(two)
    assert one.at == at


def test_changing_only_the_clock_moves_confidence_as_evidence_decays() -> None:
    st = replica()
    soon = before(st, T0 + timedelta(days=3))
    late = before(st, T0 + timedelta(days=900))
    assert json_bytes(soon) != json_bytes(late)

    def latency(view: Worldview) -> Leaf:
        return next(leaf for leaf in view.current if leaf.id == "b-latency")

    early, decayed = latency(soon), latency(late)
    assert early.confidence is not None
    assert decayed.confidence is not None
    assert decayed.confidence < early.confidence
    # The view reports the fusion core's number at that clock: no new math.
    for view, at in ((soon, T0 + timedelta(days=3)), (late, T0 + timedelta(days=900))):
        reply = core.serve(st, GetBelief(belief_id="b-latency", at=at), W)
        assert isinstance(reply, BeliefReply)
        assert reply.belief is not None
        assert latency(view).confidence == reply.belief.confidence


def test_evidence_after_the_clock_is_not_seen() -> None:
    st = replica()
    at_start = before(st, T0)  # ev-2 is observed two days later
    expected = posterior.read(
        0.5,
        [Evidence(id="ev-1", belief_id="b-latency", direction="supports",
                  kind="measurement", source="grafana", observed_at=T0,
                  author="ada")],
        {},
        T0,
    )  # fmt: skip
    leaf = next(leaf for leaf in every_leaf(at_start) if leaf.id == "b-latency")
    assert leaf.confidence == pytest.approx(expected.confidence)


@pytest.mark.parametrize(
    "at",
    [
        datetime(1901, 2, 3, 4, 5, 6, tzinfo=UTC),
        datetime(2999, 11, 12, 13, 14, 15, tzinfo=UTC),
    ],
)
def test_the_view_is_read_at_the_passed_clock_not_the_wall_clock(
    at: datetime,
) -> None:
    view = project(rich_scene(), AGENT, QUERY, at)
    assert view.at == at
    header = view.prompt.splitlines()[0]
    assert header == f"# Worldview for {AGENT} in {W} at {at.isoformat()}"
    # A pre-read scene at another clock differs only in the clock it names.
    other = project(rich_scene(), AGENT, QUERY, datetime(2026, 6, 1, tzinfo=UTC))
    assert msgspec.structs.replace(other, at=at, prompt="", tokens=0) == (
        msgspec.structs.replace(view, prompt="", tokens=0)
    )
    assert other.prompt.splitlines()[1:] == view.prompt.splitlines()[1:]


def test_the_served_view_header_names_a_far_clock() -> None:
    far = datetime(2301, 7, 8, 9, 10, 11, tzinfo=UTC)
    view = before(replica(), far)
    assert view.at == far
    assert view.prompt.splitlines()[0].endswith(f"at {far.isoformat()}")


# --- bounds -----------------------------------------------------------------------


def assert_bounded(view: Worldview) -> None:
    for name, leaves in slices(view).items():
        assert len(leaves) <= CAP, name
        if not leaves:
            continue
        leader = leaves[0].score
        assert [(-x.score, x.id) for x in leaves] == sorted(
            (-x.score, x.id) for x in leaves
        ), name
        if leader > 0:
            assert all(x.score >= CUT * leader for x in leaves), name


def test_every_slice_with_candidates_is_floored_capped_and_cut() -> None:
    view = project(rich_scene(), AGENT, QUERY, T0)
    for name, leaves in slices(view).items():
        assert len(leaves) >= FLOOR, name  # every slice has candidates here
    assert_bounded(view)


def test_the_served_view_is_bounded() -> None:
    view = before(replica(), T0 + timedelta(days=10))
    for name, leaves in slices(view).items():
        assert len(leaves) >= FLOOR, name
    assert_bounded(view)


def test_an_empty_scene_has_empty_slices() -> None:
    view = project(Scene(world=W, decl=None, beliefs=[]), AGENT, QUERY, T0)
    assert all(not leaves for leaves in slices(view).values())
    assert view.limiting is None
    assert view.clarity == 0.0


def test_the_cut_is_relative_to_the_leader() -> None:
    beliefs = [
        belief("b0", "The payment gateway rollout can ship"),
        belief("b1", "The rollout plan holds"),
        belief("b2", "Payroll closes on Friday"),
    ]
    view = project(Scene(world=W, decl=None, beliefs=beliefs), AGENT, QUERY, T0)
    # b0 holds every word of the move, b1 one of five: under half the leader.
    assert [leaf.id for leaf in view.current] == ["b0"]
    # Beliefs that answer the move equally are all kept: the cut is no absolute bar.
    same = [belief(f"b{i}", "The rollout plan holds") for i in range(3)]
    even = project(Scene(world=W, decl=None, beliefs=same), AGENT, QUERY, T0)
    assert [leaf.id for leaf in even.current] == ["b0", "b1", "b2"]
    # Influence lifts a belief by at most a quarter: not past one that answers more.
    heavy = {"b0": 0.05, "b1": 0.9, "b2": 0.05}
    lifted = project(Scene(world=W, decl=None, beliefs=beliefs, influence=heavy),
                     AGENT, QUERY, T0)  # fmt: skip
    assert lifted.current[0].id == "b0"


def test_a_lone_belief_is_kept_and_many_equal_ones_are_capped() -> None:
    lone = project(Scene(world=W, decl=None, beliefs=[belief("b0", "x y z")]),
                   AGENT, QUERY, T0)  # fmt: skip
    assert [leaf.id for leaf in lone.current] == ["b0"]
    many = [belief(f"b{i:02d}", "The rollout plan holds") for i in range(50)]
    view = project(Scene(world=W, decl=None, beliefs=many), AGENT, QUERY, T0)
    assert [leaf.id for leaf in view.current] == [f"b{i:02d}" for i in range(CAP)]
    assert len(view.moves) == CAP


def crafted(*scores: float) -> list[Leaf]:
    return [
        Leaf(id=f"l{i}", kind="claim", text=f"leaf {i}", score=s)
        for i, s in enumerate(scores)
    ]


def test_bound_orders_by_score_then_id() -> None:
    leaves = [
        Leaf(id="c", kind="claim", text="c", score=0.8),
        Leaf(id="a", kind="claim", text="a", score=0.9),
        Leaf(id="d", kind="claim", text="d", score=0.9),
        Leaf(id="b", kind="claim", text="b", score=0.8),
    ]
    assert [leaf.id for leaf in bound(leaves)] == ["a", "d", "b", "c"]
    assert bound(list(reversed(leaves))) == bound(leaves)


def test_bound_keeps_the_prefix_within_the_cut() -> None:
    kept = bound(crafted(1.0, 0.6, 0.5, 0.49, 0.1))
    assert [leaf.id for leaf in kept] == ["l0", "l1", "l2"]  # 0.5 is exactly CUT
    assert all(leaf.score >= CUT * kept[0].score for leaf in kept)


def test_bound_floors_when_every_score_is_zero() -> None:
    kept = bound(crafted(0.0, 0.0, 0.0))
    assert [leaf.id for leaf in kept] == ["l0"]
    assert len(bound(crafted(-1.0, -2.0))) == FLOOR
    assert bound([]) == []


def test_bound_caps_equal_scores() -> None:
    kept = bound(crafted(*([1.0] * 20)))
    assert len(kept) == CAP
    assert [leaf.id for leaf in kept] == sorted(f"l{i}" for i in range(20))[:CAP]


def test_bound_keeps_a_dominant_leader_alone() -> None:
    assert [leaf.id for leaf in bound(crafted(0.01, 10.0, 0.02))] == ["l1"]


# --- traces -----------------------------------------------------------------------

POLICY_IDS: Final = {
    "surfaces",
    "source-ranking",
    "source-hierarchy",
    "invariant-0",
    "convention-0",
    "anti-pattern-0",
}


def valid_ids(scene: Scene) -> set[str]:
    ids = {b.id for b in scene.beliefs} | {e.id for e in scene.edges} | POLICY_IDS
    if scene.decl:
        ids.add(scene.decl.world.id)
        ids |= {g.id for g in scene.decl.intent.goals}
        ids |= {c.id for c in scene.decl.intent.constraints}
        ids |= {a.id for a in scene.decl.actions}
    if scene.view:
        ids |= {e.id for e in scene.view.related}
    return ids


def assert_traced(view: Worldview, ids: set[str]) -> None:
    leaves = every_leaf(view)
    assert leaves
    for leaf in leaves:
        assert leaf.trace, leaf.id
        assert set(leaf.trace) <= ids, (leaf.id, set(leaf.trace) - ids)


def test_every_leaf_traces_to_ids_in_the_scene() -> None:
    scene = rich_scene()
    view = project(scene, AGENT, QUERY, T0)
    assert view.limiting is not None
    assert_traced(view, valid_ids(scene))


def test_a_claim_traces_to_itself_and_its_dependencies() -> None:
    view = project(rich_scene(), AGENT, "gateway p99 latency under load", T0)
    assert view.current[0].id == "b-latency"
    assert view.current[0].trace == ("b-latency", "b-cache")


def test_a_contradiction_traces_to_both_ends() -> None:
    view = project(rich_scene(), AGENT, "contradiction edge b-eu vs b-us", T0)
    contradiction = next(x for x in view.current if x.kind == "contradiction")
    assert {"b-eu", "b-us", "e-vs"} <= set(contradiction.trace)


def test_every_served_leaf_traces_to_ids_the_replica_holds() -> None:
    st = replica()
    scene = Scene(
        world=W,
        decl=DECL,
        beliefs=beliefs.world_beliefs(st, W, T0),
        edges=beliefs.belief_edges(st, W),
        view=views.build_view(st, W, AGENT),
    )
    ids = valid_ids(scene)
    assert {"project:gateway", "agent:ada"} <= ids
    view = before(st, T0 + timedelta(days=5))
    assert any(leaf.kind == "contradiction" for leaf in view.current)
    assert_traced(view, ids)


# --- the prompt -------------------------------------------------------------------


def assert_rendered(view: Worldview) -> None:
    assert render(view) == view.prompt
    assert view.tokens == estimate_tokens(view.prompt)
    assert view.tokens == math.ceil(len(view.prompt) / 4)
    assert view.tokens < MAX_TOKENS


def test_the_prompt_is_rendered_from_the_typed_view() -> None:
    view = project(rich_scene(), AGENT, QUERY, T0)
    assert_rendered(view)
    for name in SLICES:
        assert f"## {name}" in view.prompt
    for leaf in every_leaf(view):
        if leaf is not view.limiting:
            assert leaf.text[:40] in view.prompt


def test_a_hundred_thousand_beliefs_stay_within_the_bounds() -> None:
    n = 100_000
    beliefs = [
        belief(f"b{i:06d}", f"Service {i % 97} handles shard {i}",
               uncertainty=0.05 + (i % 11) / 100)
        for i in range(n)
    ]  # fmt: skip
    scene = Scene(world=W, decl=DECL, beliefs=beliefs, view=agent_view(),
                  influence={b.id: 1.0 / n for b in beliefs})  # fmt: skip
    view = project(scene, AGENT, "what does service 42 handle", T0)
    assert_rendered(view)
    assert_bounded(view)
    for name, leaves in slices(view).items():
        assert 1 <= len(leaves) <= CAP, name


def test_an_oversized_render_is_trimmed_under_max_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    filler = "about the checkout gateway rollout " * 8
    long_ids = [f"b-{i:02d}-" + "x" * 100 for i in range(40)]
    beliefs = [
        belief(bid, f"Long claim {i} {filler}", uncertainty=0.2)
        for i, bid in enumerate(long_ids)
    ]
    edges = [
        edge(f"d{i}-{j}", "depends_on", long_ids[i], long_ids[(i + j) % 40])
        for i in range(40)
        for j in range(1, 5)
    ]
    decl = msgspec.structs.replace(
        DECL,
        intent=Intent(
            goals=[Goal(id=f"g{i}", text=f"Goal {i} {filler}") for i in range(8)],
            constraints=[
                Constraint(id=f"k{i}", text=f"Bound {i} {filler}") for i in range(8)
            ],
        ),
        policy=Policy(invariants=[f"Rule {i} {filler}" for i in range(8)]),
        actions=[Action(id=f"a{i}", text=f"Act {i} {filler}") for i in range(8)],
    )
    scene = Scene(world=W, decl=decl, beliefs=beliefs, edges=edges, view=agent_view())
    monkeypatch.setattr(prompt, "MAX_TOKENS", 10**9)
    unfitted = project(scene, AGENT, QUERY, T0)
    monkeypatch.undo()
    assert unfitted.tokens >= MAX_TOKENS  # the bound has work to do
    fitted = project(scene, AGENT, QUERY, T0)
    assert_rendered(fitted)
    assert_bounded(fitted)
    for name in SLICES:
        kept, full = getattr(fitted, name), getattr(unfitted, name)
        assert kept == full[: len(kept)], name  # trimmed from the tail only
        assert len(kept) >= min(FLOOR, len(full)), name
    assert sum(map(len, slices(fitted).values())) < sum(
        map(len, slices(unfitted).values())
    )
    assert fitted == project(scene, AGENT, QUERY, T0)  # and deterministically


# --- query relevance --------------------------------------------------------------

TOPICS: Final = (
    "The payment gateway times out under heavy load",
    "The onboarding email bounces for corporate inboxes",
    "The search index rebuild takes six hours",
    "Mobile push notifications arrive late on Android",
    "The billing export drops rows with unicode names",
    "Invoice PDFs render blank in Safari",
    "The staging database runs out of disk weekly",
    "Feature flags flip back after a restart",
    "The analytics pipeline double counts refunds",
    "Password reset links expire too quickly",
    "The warehouse sync skips archived products",
    "Webhooks retry forever on HTTP 410",
)


def topic_scene() -> Scene:
    beliefs = [belief(f"t{i:02d}", text) for i, text in enumerate(TOPICS)]
    return Scene(world=W, decl=None, beliefs=beliefs)


def test_the_query_decides_which_equal_belief_leads() -> None:
    search = project(topic_scene(), AGENT, "speed up the search index rebuild", T0)
    billing = project(topic_scene(), AGENT, "fix the billing export for unicode", T0)
    assert search.current[0].id == "t02"
    assert billing.current[0].id == "t04"
    assert search.current[0].id != billing.current[0].id


@pytest.mark.parametrize("index", [0, 3, 6, 11])
def test_a_query_naming_a_belief_puts_it_first(index: int) -> None:
    view = project(topic_scene(), AGENT, f"about this: {TOPICS[index]}", T0)
    assert view.current[0].id == f"t{index:02d}"
    assert view.moves[0].trace == (f"t{index:02d}",)


# --- moves ------------------------------------------------------------------------


def test_the_top_move_informs_the_belief_of_most_influence_times_gain() -> None:
    # No goal rests on any: each move is worth its own expected information gain
    # (docs/worldview.md) weighted by its influence.
    text = "The rollout plan holds"
    beliefs = [
        belief("heavy", text, uncertainty=0.05),  # most influence
        belief("middle", text, uncertainty=0.2),  # the largest product
        belief("shaky", text, uncertainty=0.3),  # most uncertainty
        belief("aim", text, kind="goal", confidence=None, uncertainty=None),
        belief("bare", text, uncertainty=None),
    ]
    influence = {"heavy": 0.55, "middle": 0.35, "shaky": 0.1, "aim": 5.0,
                 "bare": 5.0}  # fmt: skip
    scene = Scene(world=W, decl=None, beliefs=beliefs, influence=influence)
    view = project(scene, AGENT, "unrelated question", T0)
    assert view.moves[0].trace == ("middle",)
    assert view.moves[0].id == "move:middle"
    assert view.moves[0].text == f"Gather evidence on: {text}"
    assert all(m.trace != ("aim",) and m.trace != ("bare",) for m in view.moves)


def test_the_top_move_follows_load_bearing_influence_from_edges() -> None:
    text = "The rollout plan holds"
    beliefs = [belief(f"b{i}", text, uncertainty=0.2) for i in range(6)]
    edges = [edge(f"e{i}", "depends_on", f"b{i}", "b5") for i in range(5)]
    view = project(Scene(world=W, decl=None, beliefs=beliefs, edges=edges),
                   AGENT, "unrelated question", T0)  # fmt: skip
    assert view.moves[0].trace == ("b5",)


def test_a_gap_yields_an_answer_the_open_question_move() -> None:
    scene = Scene(
        world=W,
        decl=None,
        beliefs=[gap("g1", "Who owns the gateway?"), belief("c1", "It is Tuesday")],
    )
    view = project(scene, AGENT, QUERY, T0)
    answers = [m for m in view.moves if m.text.startswith("Answer the open question")]
    assert [m.trace for m in answers] == [("g1",)]
    assert answers[0].text == "Answer the open question: Who owns the gateway?"


def test_a_contradicted_belief_yields_an_adjudicate_move() -> None:
    scene = Scene(
        world=W,
        decl=None,
        beliefs=[
            belief("c1", "Payment logs stay in the EU region", uncertainty=0.3,
                   flags=("contradicted",)),
            belief("c2", "The CDN serves checkout", uncertainty=0.3),
        ],
    )  # fmt: skip
    view = project(scene, AGENT, QUERY, T0)
    adjudicate = [m for m in view.moves if m.text.startswith("Adjudicate")]
    assert [m.trace for m in adjudicate] == [("c1",)]
    assert "contradicted" in adjudicate[0].flags
    others = [m for m in view.moves if m != adjudicate[0]]
    assert all(not m.text.startswith("Adjudicate") for m in others)


def test_the_served_view_adjudicates_an_explicit_contradiction() -> None:
    view = before(replica(), T0 + timedelta(days=1), "payment logs region")
    assert any(
        m.text.startswith("Adjudicate") and m.trace in (("b-eu",), ("b-us",))
        for m in view.moves
    )


# --- affordances ------------------------------------------------------------------


def affordances(view: Worldview) -> dict[str, Leaf]:
    return {leaf.id: leaf for leaf in view.affordances}


def test_affordances_are_filtered_through_policy() -> None:
    found = affordances(project(rich_scene(), AGENT, QUERY, T0))
    assert found["lookup"].status == "allowed"
    assert found["lookup"].trace == ("lookup",)
    assert found["retry"].status == "allowed"  # mutates, unbounded, may write
    assert found["deploy"].status == "flagged"
    assert found["deploy"].trace == ("budget", "legal")
    assert {leaf.kind for leaf in found.values()} == {
        "info",
        "mutates",
        "needs-approval",
    }


def test_an_agent_without_write_grants_sees_changes_blocked() -> None:
    scene = Scene(world=W, decl=DECL, beliefs=[], view=agent_view(may_write=()))
    found = affordances(project(scene, AGENT, QUERY, T0))
    assert found["lookup"].status == "allowed"
    assert found["retry"].status == "blocked"
    assert found["deploy"].status == "blocked"


def test_a_mutating_action_bounded_by_a_constraint_is_flagged() -> None:
    decl = msgspec.structs.replace(
        DECL,
        actions=[Action(id="scale", text="Scale up", safety="mutates",
                        constraints=["budget"])],
    )  # fmt: skip
    scene = Scene(world=W, decl=decl, beliefs=[], view=agent_view())
    found = affordances(project(scene, AGENT, QUERY, T0))
    assert found["scale"].status == "flagged"
    assert found["scale"].trace == ("budget",)


# --- clarity ----------------------------------------------------------------------


def claims_scene(
    *extra: Belief, contradictions: tuple[Contradiction, ...] = ()
) -> Scene:
    beliefs = [
        belief("c1", "The CDN serves the checkout page", confidence=0.9),
        belief("c2", "The token cache is warm after deploys", confidence=0.85),
        *extra,
    ]
    return Scene(world=W, decl=None, beliefs=beliefs, contradictions=contradictions)


@pytest.mark.parametrize(
    "scene",
    [
        rich_scene(),
        claims_scene(),
        topic_scene(),
        Scene(world=W, decl=None, beliefs=[]),
    ],
    ids=["rich", "claims", "topics", "empty"],
)
def test_clarity_is_a_fraction(scene: Scene) -> None:
    clarity = project(scene, AGENT, QUERY, T0).clarity
    assert 0.0 <= clarity <= 1.0


def test_a_contradiction_in_view_lowers_clarity() -> None:
    base = project(claims_scene(), AGENT, QUERY, T0)
    conflict = Contradiction(kind="edge", beliefs=("c1", "c2"), strength=0.5,
                             trace=("c1", "c2"))  # fmt: skip
    torn = project(claims_scene(contradictions=(conflict,)), AGENT, QUERY, T0)
    assert any(leaf.kind == "contradiction" for leaf in torn.current)
    assert base.clarity > 0.0
    assert torn.clarity < base.clarity


def test_an_open_gap_in_view_lowers_clarity() -> None:
    base = project(claims_scene(), AGENT, QUERY, T0)
    open_gap = gap("g1", "Does the token cache survive deploys?")
    asked = project(claims_scene(open_gap), AGENT, QUERY, T0)
    assert [leaf.id for leaf in asked.gaps] == ["g1"]
    assert asked.clarity < base.clarity


def test_clarity_counts_a_claim_held_false_as_sure() -> None:
    # Sureness is |confidence - 0.5| * 2: a claim at 0.0 is as settled as one at 1.0.
    def clarity(confidence: float) -> float:
        scene = Scene(world=W, decl=None,
                      beliefs=[belief("c1", "x y", confidence=confidence)])  # fmt: skip
        return project(scene, AGENT, QUERY, T0).clarity

    assert clarity(1.0) == pytest.approx(1.0)
    assert clarity(0.5) == pytest.approx(0.0)
    assert clarity(0.1) == pytest.approx(clarity(0.9))
    assert clarity(0.0) == pytest.approx(clarity(1.0))


# --- the limiting factor ----------------------------------------------------------


def test_the_limiting_factor_is_the_open_belief_of_most_influence_times_doubt() -> None:
    text = "Ship the payment gateway"  # equally relevant to the goals
    beliefs = [
        belief("heavy", text, uncertainty=0.05),
        belief("middle", text, uncertainty=0.2),
        belief("shaky", text, uncertainty=0.3),
        belief("aim", text, kind="goal", confidence=None, uncertainty=None),
    ]
    influence = {"heavy": 0.6, "middle": 0.25, "shaky": 0.15, "aim": 5.0}
    scene = Scene(world=W, decl=DECL, beliefs=beliefs, influence=influence)
    view = project(scene, AGENT, QUERY, T0)
    assert view.limiting is not None
    assert view.limiting.id == "middle"
    assert view.limiting.trace == ("middle",)


def test_the_limiting_factor_is_weighted_by_relevance_to_the_goals() -> None:
    beliefs = [
        belief("off", "Office plants need watering on Mondays", uncertainty=0.2),
        belief("on", "The payment gateway ships with p99 under 300ms",
               uncertainty=0.2),
        belief("aside", "Lunch orders close at eleven", uncertainty=0.2),
    ]  # fmt: skip
    scene = Scene(world=W, decl=DECL, beliefs=beliefs)
    for query in ("order lunch for the team", "water the office plants"):
        view = project(scene, AGENT, query, T0)
        assert view.limiting is not None
        assert view.limiting.id == "on"  # the goals decide, not the query


def test_the_limiting_factor_appears_in_the_intent_slice() -> None:
    view = project(rich_scene(), AGENT, QUERY, T0)
    assert view.limiting is not None
    assert view.limiting.kind != "goal"
    marked = [leaf for leaf in view.intent if leaf.kind == "limiting-factor"]
    assert len(marked) == 1
    assert marked[0].id == f"limiting:{view.limiting.id}"
    assert marked[0].trace == view.limiting.trace
    assert view.limiting.id in marked[0].trace

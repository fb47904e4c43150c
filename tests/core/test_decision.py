"""The decision scene read fast (``projector/decision.py``, issue 24): the same
candidates, scene and worldview bytes as ``beliefs.decision_scene`` and the
projector core's ``before``, on a replica with goals, work, gaps, split evidence,
every edge type, closed beliefs and lazily written cards."""

from __future__ import annotations

import importlib.util
from bisect import bisect_left
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import information
from worldline.actors.projector import (
    beliefs,
    contradictions,
    core,
    decision,
    index,
    views,
    worldview,
)
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import BeliefEdge, Evidence
from worldline.protocols.messages import (
    Before,
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    EntityChanged,
    ProjectorInbox,
    WorldDeclared,
    encode,
)
from worldline.protocols.subjects import state
from worldline.protocols.world import (
    Action,
    Authority,
    Constraint,
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

if TYPE_CHECKING:
    from collections.abc import Iterator

W: Final = "dec"
T0: Final = datetime(2026, 3, 1, tzinfo=UTC)
SENTENCES: Final = [
    "The Broncos defeated the Panthers to win Super Bowl 50",
    "The game was played at Levi's Stadium in Santa Clara",
    "Peyton Manning became the first quarterback to win with two teams",
    "The Panthers defense ranked sixth in the league that season",
    "Beyonce and Bruno Mars performed at the halftime show",
    "The whale breached beside the ship at dawn",
    "Call me Ishmael, said the sailor to the captain",
    "The sea was calm and the harbour lights were low",
    "Ticket prices for the game rose above five thousand dollars",
    "CBS broadcast the game with new camera angles",
    "The league moved the halftime show to a larger stage",
    "Why did the Panthers lose the turnover battle?",
]
TYPES: Final = ["claim", "claim", "assumption", "risk", "gap", "claim", "evidence"]
EDGE_TYPES: Final = [
    "depends_on", "supports", "contradicts", "derived_from", "supersedes", "depends_on",
]  # fmt: skip
DECL: Final = WorldDecl(
    world=WorldInfo(id=W, kind="research", description="A reading crew."),
    environment=Environment(entity_types=["project"], surfaces=["books"]),
    intent=Intent(
        goals=[
            Goal(id="g-bowl", text="Find who won Super Bowl 50", success=["cited"]),
            Goal(id="g-sea", text="Understand the whale and the sea"),
        ],
        constraints=[Constraint(id="c1", text="Cite public sources only")],
    ),
    policy=Policy(invariants=["every claim cited"]),
    actions=[Action(id="lookup", text="Read the book", safety="info")],
    authority=Authority(
        admins=["root"], grants=[Grant(agents=["ada"], fields=["work.*"])]
    ),
)
WORK: Final = Entity(
    id="work:w1",
    type="work",
    version=3,
    fields={
        "assigned_to": FieldState(value="ada", version=3, author="root", at=T0),
        "status": FieldState(value="open", version=3, author="root", at=T0),
        "goal": FieldState(value="Compare the Panthers defense", version=3,
                           author="root", at=T0),
    },
)  # fmt: skip


def _belief(i: int) -> tuple[Belief, list[Evidence]]:
    kind = "goal" if i % 23 == 0 else TYPES[i % len(TYPES)]
    sure = kind not in ("gap", "goal")
    belief = Belief(
        id=f"b{i:03d}",
        text=f"{SENTENCES[i % len(SENTENCES)]} ({i // len(SENTENCES)})",
        type=kind,  # type: ignore[arg-type]
        confidence=round(0.1 + (i * 37 % 80) / 100, 3) if sure else None,
        uncertainty=round(0.03 + (i * 13 % 30) / 100, 3) if sure else None,
        flags=("contradicted", "uncertain") if sure and i % 9 == 0 else (),
        status="retracted" if i % 31 == 0 else "active",
        author="ada",
        created_at=T0 - timedelta(days=30),
        updated_at=T0 - timedelta(hours=i),
        version=100 + i,
    )
    evidence = [
        Evidence(id=f"e{i}", belief_id=belief.id, direction="supports",
                 kind="citation", source=f"s{i % 5}",
                 observed_at=T0 - timedelta(days=i % 20), author="ada"),
    ]  # fmt: skip
    if i % 9 == 0:
        evidence.append(
            Evidence(id=f"r{i}", belief_id=belief.id, direction="refutes",
                     kind="measurement", source=f"s{(i + 2) % 5}",
                     observed_at=T0 - timedelta(days=i % 7), author="bob")
        )  # fmt: skip
    return belief, evidence


class _Snapshot:
    """A replica's state, read only, scanned by bisection (a MemoryState sorts
    every key on each scan; a decision view scans a few hundred prefixes)."""

    def __init__(self, replica: MemoryState) -> None:
        self.data = dict(replica.data)
        self.keys = sorted(self.data)

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        at = bisect_left(self.keys, prefix)
        while at < len(self.keys) and self.keys[at].startswith(prefix):
            yield self.keys[at], self.data[self.keys[at]]
            at += 1


def _replica(n: int, pending: int) -> _Snapshot:
    return _Snapshot(_fed(n, pending))


def _fed(n: int, pending: int) -> MemoryState:
    replica = MemoryState()
    changes: list[ProjectorInbox] = [
        WorldDeclared(declaration=DECL, version=1),
        EntityChanged(entity=Entity(id="agent:ada", type="agent", version=2)),
        EntityChanged(entity=WORK),
    ]
    for i in range(n):
        belief, evidence = _belief(i)
        changes.append(BeliefChanged(belief=belief, evidence=evidence))
        if i % 3 == 2:
            kind = EDGE_TYPES[(i // 3) % len(EDGE_TYPES)]
            edge = BeliefEdge(
                id=f"d{i}",
                type=kind,  # type: ignore[arg-type]
                source=f"b{i:03d}",
                target=f"b{i * 7 % i:03d}",
                confidence=0.5 + (i % 5) / 10,
                version=1000 + i,
                at=T0,
            )
            changes.append(BeliefEdgeChanged(edge=edge))
    for seq, change in enumerate(changes, start=1):
        left = pending if seq < len(changes) else 0
        ctx = Context(W, "m", state(W, "belief"), seq, T0, pending=left)
        replica.apply(core.handle(replica, change, ctx))
        if left == 0 and seq % 50 == 0:
            replica.apply(views.refresh_stale(replica, ctx))
    return replica


_LIVE, _BACKLOG = _replica(160, pending=0), _replica(160, pending=7)
QUERIES: Final = [*SENTENCES, "Who won Super Bowl 50?", "whale sea ship", ""]


@settings(max_examples=100, deadline=None)
@given(
    query=st.sampled_from(QUERIES) | st.text(max_size=30),
    agent=st.sampled_from(["ada", "bob"]),
    days=st.sampled_from([None, -40, -3, 0, 5]),
    backlog=st.booleans(),
)
def test_before_is_the_same_bytes_as_the_projector_core(
    query: str, agent: str, days: int | None, backlog: bool
) -> None:
    replica = _BACKLOG if backlog else _LIVE
    at = T0 if days is None else T0 + timedelta(days=days)
    request = Before(agent=agent, query=query, at=at)
    expected = encode(core.serve(replica, request, W))
    assert encode(decision.before(replica, request, W)) == expected


@pytest.mark.parametrize("query", QUERIES)
def test_candidates_and_matches_are_the_index_s(query: str) -> None:
    focus = views.focus_of(DECL, views.build_view(_LIVE, W, "ada", standing=False))
    cards = index.candidates(_LIVE, W, query, focus)
    fast = decision.candidates(_LIVE, W, query, focus)
    assert fast == cards
    light = decision.candidates(_LIVE, W, query, focus, full=False)
    assert [c.belief for c in light] == [c.belief for c in cards]
    assert [c.terms for c in light] == [c.terms for c in cards]
    counts = index.counts(_LIVE, W, query, focus)
    for budget in (0, 1, 5, 64, 2048):
        for limit in (0, 1, 3, 64):
            assert decision.matches(
                _LIVE, W, counts, query, limit, budget
            ) == index.matches(_LIVE, W, query, limit, budget)


@pytest.mark.parametrize("agent", ["ada", "bob"])
def test_a_standing_scene_projects_the_same(agent: str) -> None:
    decl = views.declaration(_LIVE, W)
    assert decl is not None
    view = views.build_view(_LIVE, W, agent, standing=False)
    focus = views.focus_of(decl, view)
    scenes = [
        read(_LIVE, W, decl=decl, view=view, query=focus, focus=focus, at=None,
             postings=index.STANDING_POSTINGS)
        for read in (beliefs.decision_scene, decision.decision_scene)
    ]  # fmt: skip
    old, new = (worldview.standing(scene, agent, focus) for scene in scenes)
    assert encode(new) == encode(old)
    assert [b.id for b in scenes[1].beliefs] == [b.id for b in scenes[0].beliefs]


@pytest.mark.parametrize("days", [None, -3, 0])
def test_a_paged_read_ranks_the_same_moves(days: int | None) -> None:
    at = None if days is None else T0 + timedelta(days=days)
    for replica in (_LIVE, _BACKLOG):
        scenes = [
            read(replica, W, decl=DECL, view=None, query="", focus="", at=at)
            for read in (beliefs.decision_scene, decision.decision_scene)
        ]
        old, new = (worldview.ranked_moves(scene) for scene in scenes)
        assert msgspec.msgpack.encode(new) == msgspec.msgpack.encode(old)


def test_the_best_by_threshold_is_the_sorted_prefix() -> None:
    scores = {f"b{i}".encode(): float(i % 4) for i in range(40)}
    expected = [i for i, _ in sorted(scores.items(), key=lambda x: (-x[1], x[0]))]
    for limit in (0, 1, 7, 10, 11, 39, 40, 64):
        assert decision._best(scores, limit) == expected[:limit]


def test_a_split_is_read_only_where_a_card_or_a_record_says_so() -> None:
    for i in range(160):
        card = index.card(_LIVE, W, f"b{i:03d}")
        assert card is not None
        found = contradictions.split_contradiction(_LIVE, W, card.belief)
        if found is not None:
            assert decision._maybe_split(_LIVE, W, card.belief)
        raw = _LIVE.get(f"belief/{W}/{card.belief.id}".encode())
        assert raw is not None  # the card holds the belief its record holds
        assert msgspec.msgpack.decode(raw, type=BeliefChanged).belief == card.belief
    split = [i for i in range(160) if "contradicted" in _belief(i)[0].flags]
    assert split
    assert all(decision._maybe_split(_LIVE, W, _belief(i)[0]) for i in split)


def test_without_goals_the_gains_are_information_s() -> None:
    for query in QUERIES[:4]:
        cards = index.candidates(_LIVE, W, query, "")
        beliefs_ = [c.belief for c in cards if c.belief.type != "goal"]
        scene = worldview.Scene(
            world=W,
            decl=None,
            beliefs=beliefs_,
            influence={c.belief.id: c.weight for c in cards},
        )
        pairs = {
            b.id: information.pair_of(
                None if b.type == "gap" else b.confidence,
                None if b.type == "gap" else b.uncertainty,
            )
            for b in beliefs_
            if b.type == "gap" or b.uncertainty is not None
        }
        load = {i: scene.influence.get(i, 0.0) for i in pairs}
        expected = information.gains(pairs, [], scene.edges, load=load)
        assert worldview.gains(scene) == expected
        assert list(worldview.gains(scene)) == list(expected)


HAS_WORDLLAMA: Final = importlib.util.find_spec("wordllama") is not None


@pytest.mark.skipif(not HAS_WORDLLAMA, reason="the wordllama package is not installed")
def test_with_a_semantic_embedder_the_answers_are_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORLDLINE_EMBEDDER", "wordllama")
    replicas = [_replica(60, pending=0), _replica(60, pending=5)]
    for query in QUERIES:
        request = Before(agent="ada", query=query, at=T0)
        answers = {
            encode(read(replica, request, W))
            for replica in replicas
            for read in (core.serve, decision.before)
        }
        assert len(answers) == 1, query


def test_the_light_card_is_the_card_without_its_vector() -> None:
    raw = _LIVE.get(index._card_key(W, "b001"))
    assert raw is not None
    full = msgspec.msgpack.decode(raw, type=index.Card)
    light = decision._RANKED.decode(raw)
    assert (light.belief, light.weight, light.stems, light.length) == (
        full.belief, full.weight, full.stems, full.length,
    )  # fmt: skip

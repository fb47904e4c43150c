"""The projector's paged ``read`` and ``list`` (actors/projector/pages.py), pure: one
page answers what the whole-world answer did; pages of any size join to it, each
belief and edge exactly once."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from worldline.actors.projector import beliefs, core, pages, worldview
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import BeliefEdge
from worldline.protocols.messages import (
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    BeliefListReply,
    ListBeliefs,
    ReadWorld,
    RpcError,
    WorldReply,
)
from worldline.protocols.subjects import state

W = "w"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SEED = 14


def _ctx() -> Context:
    subject = state(W, "belief")
    return Context(world=W, author="belief", subject=subject, seq=1, now=T0)


def _world(n: int = 40, seed: int = SEED) -> MemoryState:
    """``n`` beliefs (claims, gaps, goals, some retracted) created in an order that is
    not their id order, and edges of every kind between them."""
    rng = random.Random(seed)
    st = MemoryState()
    for i in range(n):
        kind = rng.choice(["claim", "claim", "risk", "gap", "goal"])
        created = T0 + timedelta(minutes=rng.randrange(n))
        belief = Belief(
            id=f"b-{i:03d}",
            text=f"statement {i} " + "x" * rng.randrange(200),
            type=kind,  # type: ignore[arg-type]
            confidence=None if kind in ("gap", "goal") else rng.random(),
            uncertainty=None if kind in ("gap", "goal") else rng.random() / 4,
            author="ada",
            created_at=created,
            updated_at=created,
            version=i + 1,
            status="retracted" if rng.random() < 0.15 else "active",
        )
        st.apply(core.handle(st, BeliefChanged(belief=belief), _ctx()))
    for j in range(n // 2):
        source, target = rng.sample(range(n), 2)
        edge = BeliefEdge(
            id=f"e-{j:03d}",
            type=rng.choice(["contradicts", "depends_on", "supports", "supersedes"]),
            source=f"b-{source:03d}",
            target=f"b-{target:03d}",
            confidence=rng.random(),
            version=1,
            removed=rng.random() < 0.1,
            at=T0 + timedelta(minutes=j),
        )
        st.apply(core.handle(st, BeliefEdgeChanged(edge=edge), _ctx()))
    return st


def _whole_world(st: MemoryState, at: datetime | None) -> WorldReply:
    """The unpaged answer as the projector computed it before pages."""
    every = beliefs.world_beliefs(st, W, at)
    if at is not None:
        every = [beliefs.as_of(b, at) for b in every if b.created_at <= at]
    active = [b for b in every if b.status == "active"]
    scene = worldview.Scene(
        world=W, decl=None, beliefs=active, edges=beliefs.belief_edges(st, W)
    )
    return WorldReply(
        beliefs=[b for b in active if b.type not in ("goal", "gap")],
        belief_edges=beliefs.belief_edges(st, W),
        gaps=[b for b in active if b.type == "gap"],
        goals=[b for b in active if b.type == "goal"],
        contradictions=beliefs.contradictions(st, W, every, at),
        moves=worldview.ranked_moves(scene),
    )


def _read_pages(st: MemoryState, request: ReadWorld) -> list[WorldReply]:
    out = []
    while True:
        reply = pages.read_world(st, W, request)
        assert isinstance(reply, WorldReply), reply
        out.append(reply)
        if not reply.next_cursor:
            return out
        request = ReadWorld(
            at=request.at, limit=request.limit, cursor=reply.next_cursor
        )


@pytest.mark.parametrize("at", [None, T0 + timedelta(minutes=20)])
def test_one_page_answers_what_the_whole_world_answer_did(at: datetime | None) -> None:
    st = _world()
    (only,) = _read_pages(st, ReadWorld(at=at))
    assert only == _whole_world(st, at)


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 20])
def test_pages_of_any_size_join_to_the_whole_answer(limit: int) -> None:
    st = _world()
    whole = _whole_world(st, None)
    read = _read_pages(st, ReadWorld(limit=limit))
    assert len(read) > 1, f"seed {SEED}"
    assert all(
        len(p.beliefs + p.gaps + p.goals + p.belief_edges) <= limit for p in read
    )
    assert [b for p in read for b in p.beliefs] == whole.beliefs  # once, in order
    assert [b for p in read for b in p.gaps] == whole.gaps
    assert [b for p in read for b in p.goals] == whole.goals
    assert [e for p in read for e in p.belief_edges] == whole.belief_edges
    joined = [c for p in read for c in p.contradictions]
    key = lambda c: (c.kind, c.trace)  # noqa: E731
    assert sorted(joined, key=key) == sorted(whole.contradictions, key=key)
    assert read[0].moves  # from the index's candidates, on the first page only
    assert not any(p.moves for p in read[1:])


@pytest.mark.parametrize("limit", [1, 4, 9, 1000])
@pytest.mark.parametrize(
    "request_",
    [
        ListBeliefs(),
        ListBeliefs(type="risk"),
        ListBeliefs(status="any"),
        ListBeliefs(flag="uncertain"),
        ListBeliefs(at=T0 + timedelta(minutes=10)),
    ],
)
def test_list_pages_keep_the_order_and_the_total(
    limit: int, request_: ListBeliefs
) -> None:
    st = _world()
    every = [
        b
        for b in beliefs.world_beliefs(st, W, request_.at)
        if (request_.type is None or b.type == request_.type)
        and (request_.flag is None or request_.flag in b.flags)
        and (request_.status == "any" or b.status == request_.status)
        and (request_.at is None or b.created_at <= request_.at)
    ]
    every.sort(key=lambda b: (b.created_at, b.id))
    got: list[Belief] = []
    cursor = ""
    while True:
        reply = pages.list_beliefs(
            st,
            W,
            ListBeliefs(
                type=request_.type,
                flag=request_.flag,
                status=request_.status,
                at=request_.at,
                limit=limit,
                cursor=cursor,
            ),
        )
        assert isinstance(reply, BeliefListReply), reply
        assert reply.total == len(every)
        assert len(reply.beliefs) <= limit
        got += reply.beliefs
        cursor = reply.next_cursor
        if not cursor:
            break
    assert got == every


def test_a_page_stops_at_its_byte_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    st = _world(60)
    monkeypatch.setattr(pages, "PAGE_BYTES", 2000)
    read = _read_pages(st, ReadWorld())
    assert len(read) > 3
    listed = pages.list_beliefs(st, W, ListBeliefs())
    assert isinstance(listed, BeliefListReply)
    assert listed.next_cursor
    assert 1 <= len(listed.beliefs) < listed.total


def test_a_cursor_it_did_not_hand_out_is_refused_clearly() -> None:
    st = _world(5)
    for request in (ReadWorld(cursor="%%%"), ListBeliefs(cursor="bm90IGEgY3Vyc29y")):
        reply = core.serve(st, request, W)
        assert isinstance(reply, RpcError)
        assert reply.code == "invalid"
        assert "next_cursor" in reply.message

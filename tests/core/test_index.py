"""The projector's incremental index: cards and ranks kept by the feed, and the bounded
candidate set decision views read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.projector import core, index
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import BeliefEdge
from worldline.protocols.messages import (
    Before,
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    WorldviewReply,
)
from worldline.protocols.subjects import state

W: Final = "w1"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)


class Replica:
    def __init__(self) -> None:
        self.st = MemoryState()
        self.seq = 0

    def ctx(self) -> Context:
        self.seq += 1
        return Context(world=W, author="m", subject=state(W, "belief"), seq=self.seq,
                       now=T0)  # fmt: skip

    def belief(self, belief_id: str, text: str, **fields: object) -> Belief:
        self.seq += 1
        values: dict[str, object] = {
            "type": "claim",
            "confidence": 0.6,
            "prior": 0.6,
            "uncertainty": 0.2,
            **fields,
        }
        b = Belief(id=belief_id, text=text, author="ada", created_at=T0,
                   updated_at=T0, version=self.seq, **values)  # type: ignore[arg-type]  # fmt: skip
        self.st.apply(core.handle(self.st, BeliefChanged(belief=b), self.ctx()))
        return b

    def edge(self, edge_id: str, kind: str, source: str, target: str,
             **fields: object) -> None:  # fmt: skip
        self.seq += 1
        e = BeliefEdge(id=edge_id, type=kind, source=source, target=target,  # type: ignore[arg-type]
                       confidence=1.0, version=self.seq, **fields)  # type: ignore[arg-type]  # fmt: skip
        self.st.apply(core.handle(self.st, BeliefEdgeChanged(edge=e), self.ctx()))

    def ranked(self) -> list[str]:
        return [
            k.decode().rsplit("/", 1)[1] for k, _ in self.st.scan(f"rw/{W}/".encode())
        ]

    def before(self, query: str) -> WorldviewReply:
        reply = core.serve(self.st, Before(agent="ada", query=query, at=T0), W)
        assert isinstance(reply, WorldviewReply)
        return reply


def test_ranks_follow_what_rests_on_a_belief() -> None:
    r = Replica()
    for i in range(4):
        r.belief(f"b{i}", f"statement number {i}")
    assert r.ranked() == ["b0", "b1", "b2", "b3"]  # equal weight: by id
    r.edge("e1", "depends_on", "b0", "b3")
    r.edge("e2", "derived_from", "b1", "b3")
    r.edge("e3", "supports", "b2", "b1")
    assert r.ranked()[:2] == ["b3", "b2"]  # b2 backs b1: the supporter gains
    card = index.card(r.st, W, "b3")
    assert card is not None
    assert card.weight == 3.0
    r.edge("e1", "depends_on", "b0", "b3", removed=True)
    card = index.card(r.st, W, "b3")
    assert card is not None
    assert card.weight == 2.0


def test_a_closed_belief_leaves_the_ranks_but_keeps_its_card() -> None:
    r = Replica()
    r.belief("b0", "the cache is warm")
    r.belief("b0", "the cache is warm", status="retracted")
    assert r.ranked() == []
    assert list(r.st.scan(f"lex/{W}/".encode())) == []  # no postings left
    assert list(r.st.scan(f"df/{W}/".encode())) == []  # nor counters
    assert r.st.get(f"lexn/{W}".encode()) is None
    card = index.card(r.st, W, "b0")
    assert card is not None
    assert card.belief.status == "retracted"


def test_candidates_stay_bounded_as_the_store_grows() -> None:
    r = Replica()
    for i in range(600):
        r.belief(f"b{i:03d}", f"topic {i % 7} detail {i}")
    found = index.candidates(r.st, W, "topic detail export", "")
    limit = (
        index.MATCHES + index.TOP * 2 + index.GOALS + index.FOCUS_MATCHES + index.RECENT
    )
    assert 0 < len(found) <= limit
    assert len(found) < 600
    view = r.before("topic detail").view
    assert 1 <= len(view.current) <= 7


def test_a_belief_linked_to_a_goal_ranks_above_an_unlinked_one() -> None:
    r = Replica()
    r.belief("g", "ship the pilot", type="goal", confidence=None, prior=None,
             uncertainty=None)  # fmt: skip
    r.belief("a", "alpha bravo charlie")
    r.belief("b", "delta echo foxtrot")
    first = [leaf.id for leaf in r.before("nothing in common").view.current]
    assert set(first[:2]) == {"a", "b"}
    r.edge("e1", "supports", "a", "g")
    ranked = [leaf.id for leaf in r.before("nothing in common").view.current]
    assert ranked[0] == "a"


def test_decision_views_read_the_survivors_at_the_clock() -> None:
    r = Replica()
    r.belief("b0", "the export route skips auth")
    view = r.before("export route auth").view
    (leaf,) = [leaf for leaf in view.current if leaf.id == "b0"]
    held = index.card(r.st, W, "b0")
    assert held is not None
    assert leaf.confidence == held.belief.confidence
    again = r.before("export route auth").view
    assert msgspec.json.encode(view, order="sorted") == msgspec.json.encode(
        again, order="sorted"
    )


_CHANGE = st.tuples(
    st.sampled_from(["b0", "b1", "b2"]),
    st.sampled_from(["the cache is warm", "the cache is cold", "deploys pass"]),
    st.sampled_from(["claim", "goal"]),
    st.sampled_from(["active", "active", "retracted"]),
    st.floats(0.05, 0.95),
    st.one_of(st.none(), st.floats(0.0, 0.5)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_CHANGE, min_size=1, max_size=12), st.booleans())
def test_the_index_kept_change_by_change_is_the_index_of_the_last_cards(
    changes: list[tuple[str, str, str, str, float, float | None]], linked: bool
) -> None:
    """Whatever moved (text, type, status, confidence, doubt, influence), no index
    key of an earlier card stays behind and none of the last card is missing."""
    kept, fresh = Replica(), Replica()
    if linked:  # influence: b0 rests on b1
        kept.edge("e1", "depends_on", "b0", "b1")
        fresh.edge("e1", "depends_on", "b0", "b1")
    last: dict[str, tuple[str, str, str, float, float | None]] = {}
    for belief_id, text, kind, status, confidence, doubt in changes:
        fields = {"type": kind, "status": status, "uncertainty": doubt}
        if kind == "goal":
            fields |= {"confidence": None, "prior": None}
        else:
            fields |= {"confidence": confidence}
        kept.belief(belief_id, text, **fields)
        last[belief_id] = (text, kind, status, confidence, doubt)
    for belief_id, (text, kind, status, confidence, doubt) in sorted(last.items()):
        fields = {"type": kind, "status": status, "uncertainty": doubt}
        if kind == "goal":
            fields |= {"confidence": None, "prior": None}
        else:
            fields |= {"confidence": confidence}
        fresh.seq = kept.seq  # the same version, so the same card
        fresh.belief(belief_id, text, **fields)

    def keys(r: Replica) -> list[bytes]:
        # Belief records and what ``history.py`` keeps of them for ``as_of`` reads
        # are not index keys.
        held = (b"card/", b"bel", b"bhead/", b"bclk", b"bclosed/")
        return [k for k, _ in r.st.scan(b"") if not k.startswith(held)]

    assert keys(kept) == keys(fresh)

"""Relevance (issue 16): the query's own evidence is not crowded out by priors, the
lexical channel is BM25 with real IDF kept incrementally, and ``search`` ranks and
pages from the same index. Through the projector core on an in-memory store."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import msgspec
import pytest

from tests.core.test_index import Replica
from worldline.actors.projector import core, index, lexical, upgrade
from worldline.actors.projector.worldview import Scene, project
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import (
    Belief,
    RpcError,
    SearchBeliefs,
    SearchReply,
    WorldviewReply,
    encode,
)
from worldline.protocols.worldview import SLICES

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.actors.runtime.memory import MemoryState
    from worldline.actors.runtime.spec import Reader

W: Final = "w1"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)


def goal_linked_world() -> Replica:
    """A goal, a belief that supports it (the prior's favourite) and the rest."""
    r = Replica()
    r.belief("g", "book the offsite for the whole team", type="goal",
             confidence=None, prior=None, uncertainty=None)  # fmt: skip
    r.belief("linked", "The offsite meeting needs a room for the team")
    r.edge("e1", "supports", "linked", "g")
    for i in range(8):
        r.belief(f"filler-{i}", f"Unrelated note number {i} about lunch orders")
    return r


def shown(reply: WorldviewReply) -> list[str]:
    return [leaf.id for leaf in reply.view.current]


def test_a_belief_holding_the_only_query_word_is_shown() -> None:
    r = goal_linked_world()
    r.belief("zebra", "Zebra population is stable")
    assert shown(r.before("zebra"))[0] == "zebra"


def test_an_exact_match_ranks_above_a_goal_linked_partial_match() -> None:
    r = goal_linked_world()
    r.belief("exact", "The meeting room is free on Tuesday")
    ranked = shown(r.before("meeting room Tuesday"))
    assert ranked[0] == "exact"
    assert "linked" in ranked  # the goal-linked belief still shows, below it


def test_with_no_query_evidence_the_priors_decide() -> None:
    r = goal_linked_world()
    assert shown(r.before("nothing in common"))[0] == "linked"


def test_a_rare_word_outweighs_a_common_one() -> None:
    r = Replica()
    for i in range(20):
        r.belief(f"common-{i:02d}", f"The deploy finished, run {i}")
    r.belief("rare", "The canary alarm fired")
    r.belief("both", "The deploy and the canary")
    # "deploy" is in 21 beliefs, "canary" in 2: IDF, not a word count, ranks them.
    ranked = shown(r.before("deploy canary"))
    assert ranked[:2] == ["both", "rare"]


def stats(st_: MemoryState) -> tuple[int, int]:
    raw = st_.get(f"lexn/{W}".encode())
    assert raw is not None
    docs, total = raw.split()
    return int(docs), int(total)


def df(st_: MemoryState, term: str) -> int:
    raw = st_.get(f"df/{W}/{term}".encode())
    return 0 if raw is None else int(raw)


def test_counters_follow_every_change_incrementally() -> None:
    r = Replica()
    r.belief("a", "auth token expires hourly")
    r.belief("b", "auth is enforced at the middleware")
    assert stats(r.st) == (2, 4 + 3)  # content words: auth token expir hourly; ...
    assert df(r.st, "auth") == 2
    # A confidence change moves no posting and no counter.
    r.belief("a", "auth token expires hourly", confidence=0.9)
    assert stats(r.st) == (2, 7)
    assert df(r.st, "auth") == 2
    # Closing a belief takes it out of the documents.
    r.belief("b", "auth is enforced at the middleware", status="retracted")
    assert stats(r.st) == (1, 4)
    assert df(r.st, "auth") == 1
    assert df(r.st, "middlewar") == 0
    postings = [k for k, _ in r.st.scan(f"lex/{W}/".encode())]
    assert len(postings) == 4
    assert all(k.endswith(b"/a") for k in postings)


def test_bm25_matches_the_textbook_formula() -> None:
    counts = lexical.Counts(documents=10, average_length=5.0,
                            frequency={"zebra": 1, "stabl": 4})  # fmt: skip
    lexicon = counts.lexicon("zebra stable")
    text = lexical.terms("Zebra population is stable")  # zebra popul stabl: 3 words
    norm = lexical.K1 * (1 - lexical.B + lexical.B * 3 / 5.0)
    idf = [math.log(1 + (10 - n + 0.5) / (n + 0.5)) for n in (1, 4)]
    assert lexicon.bm25(text) == pytest.approx(sum(idf) * 2.2 / (1 + norm))


def search(st_: Reader, query: str, **fields: object) -> SearchReply:
    reply = core.serve(st_, SearchBeliefs(query=query, **fields), W)  # type: ignore[arg-type]
    assert isinstance(reply, SearchReply)
    return reply


def test_search_ranks_by_query_and_names_its_channels_and_trace() -> None:
    r = goal_linked_world()
    r.belief("exact", "The meeting room is free on Tuesday")
    page = search(r.st, "meeting room Tuesday")
    assert [h.belief.id for h in page.hits][:2] == ["exact", "linked"]
    top = page.hits[0]
    assert top.channels["lexical"] > page.hits[1].channels["lexical"] > 0
    assert set(top.channels) >= {"lexical", "prior"}
    assert all(h.belief.id.startswith(("exact", "linked")) for h in page.hits)
    assert page.next_cursor == ""


def test_search_pages_hand_out_every_hit_once() -> None:
    r = Replica()
    for i in range(25):
        r.belief(f"b{i:02d}", f"The cache node {i} restarted")
    first = search(r.st, "cache restarted", limit=10)
    seen = [h.belief.id for h in first.hits]
    cursor = first.next_cursor
    while cursor:
        page = search(r.st, "cache restarted", limit=10, cursor=cursor)
        seen += [h.belief.id for h in page.hits]
        cursor = page.next_cursor
    assert sorted(seen) == [f"b{i:02d}" for i in range(25)]
    assert len(seen) == 25


def test_search_refuses_a_cursor_from_another_query() -> None:
    r = Replica()
    for i in range(5):
        r.belief(f"b{i}", f"The cache node {i} restarted")
    cursor = search(r.st, "cache", limit=2).next_cursor
    reply = core.serve(r.st, SearchBeliefs(query="node", cursor=cursor), W)
    assert isinstance(reply, RpcError)
    assert "another query" in reply.message
    assert "next_cursor" in reply.message
    garbage = core.serve(r.st, SearchBeliefs(query="node", cursor="!!"), W)
    assert isinstance(garbage, RpcError)


def test_the_json_form_carries_all_six_slices_even_when_empty() -> None:
    r = Replica()
    view = r.before("anything").view
    decoded = msgspec.json.decode(msgspec.json.encode(view))
    for name in SLICES:
        assert decoded[name] == [] or isinstance(decoded[name], list)
    assert set(SLICES) <= set(decoded)


def test_a_store_from_before_the_lexical_channel_is_upgraded(tmp_path: Path) -> None:
    r = Replica()
    for i in range(5):
        r.belief(f"b{i}", f"The cache node {i} restarted")
    # Make it look like a store written before issue 16: cards without a length,
    # no postings or counters, and the old stem keys.
    old: dict[bytes, bytes | None] = {}
    for key, raw in r.st.scan(b"card/"):
        card = msgspec.msgpack.decode(raw, type=index.Card)
        old[key] = encode(msgspec.structs.replace(card, length=-1))
    for prefix in (b"lex/", b"df/", b"lexn/"):
        old.update(dict.fromkeys((k for k, _ in r.st.scan(prefix)), None))
    old[f"tok/{W}/cach/0999999000000/b0".encode()] = b"b0"
    store = Store(tmp_path / "projector", actor="projector")
    try:
        with store._begin(write=True, db=store._state) as txn:
            for key, value in r.st.scan(b""):
                txn.put(key, value, db=store._state)
            for key, changed in old.items():
                if changed is None:
                    txn.delete(key, db=store._state)
                else:
                    txn.put(key, changed, db=store._state)
        with store.reader() as reader:
            assert search(reader, "cache restarted").hits == ()  # not indexed yet
        assert store.upgrade(upgrade.upgrade) == 2  # old keys, then the cards
        assert store.upgrade(upgrade.upgrade) == 0  # current: nothing to do
        with store.reader() as reader:
            assert list(reader.scan(b"tok/")) == []
            found = search(reader, "cache restarted", limit=10)
            assert sorted(h.belief.id for h in found.hits) == [
                f"b{i}" for i in range(5)
            ]
            assert reader.get(f"lexn/{W}".encode()) == r.st.get(f"lexn/{W}".encode())
    finally:
        store.close()


def test_the_top_move_answers_the_query_before_the_most_uncertain_belief() -> None:
    asked = r_belief("asked", "The meeting room is free on Tuesday", 0.05)
    shaky = r_belief("shaky", "The meeting may move", 0.3)
    scene = Scene(world=W, decl=None, beliefs=[asked, shaky])
    moves = project(scene, "ada", "meeting room Tuesday", T0).moves
    assert moves[0].trace == ("asked",)
    # With nothing the query finds, moves go by information value again.
    assert project(scene, "ada", "zebra", T0).moves[0].trace == ("shaky",)


def r_belief(belief_id: str, text: str, uncertainty: float) -> Belief:
    return Belief(id=belief_id, text=text, type="claim", confidence=0.6,
                  uncertainty=uncertainty, author="ada", created_at=T0,
                  updated_at=T0)  # fmt: skip

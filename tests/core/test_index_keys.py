"""The projector's index keys are bounded by construction: whatever the text, the
belief id or the world, no key is longer than LMDB's 511-byte limit, and a long token
or id is still found again."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.projector import core, index
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import BeliefEdge
from worldline.protocols.messages import Belief, BeliefChanged, BeliefEdgeChanged
from worldline.protocols.subjects import state

T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
LMDB_MAX_KEY: Final = 511


def _add(st_: MemoryState, world: str, belief_id: str, text: str, seq: int) -> None:
    b = Belief(
        id=belief_id,
        text=text,
        author="ada",
        created_at=T0,
        updated_at=T0,
        version=seq,
        type="claim",
        confidence=0.6,
        prior=0.6,
        uncertainty=0.2,
    )
    ctx = Context(world=world, author="m", subject=state(world, "belief"), seq=seq,
                  now=T0)  # fmt: skip
    st_.apply(core.handle(st_, BeliefChanged(belief=b), ctx))


def _longest_key(st_: MemoryState, *, index_only: bool = False) -> int:
    # ``belief/<world>/<id>``, the projector's copy of a belief, is no longer than
    # fusion's key for it, and fusion refuses an op whose key would not fit (the
    # store's key check), so such a belief never reaches the projector.
    return max(
        len(k)
        for k, _ in st_.scan(b"")
        if not (index_only and k.startswith(b"belief/"))
    )


def test_a_480_and_a_5000_character_token_give_short_keys_and_are_found() -> None:
    for length in (480, 5000):
        st_ = MemoryState()
        token = "https://example.com/" + "x" * length
        _add(st_, "w", "b-1", f"The spec lives at {token} today.", 1)
        _add(st_, "w", "b-2", "Something else entirely.", 2)
        assert _longest_key(st_) <= 300
        # The query's stem is shortened the same way, so the token finds its belief.
        found = [c.belief.id for c in index.candidates(st_, "w", token, "")]
        assert "b-1" in found
        postings = [k for k, _ in st_.scan(b"lex/w/") if b"example" not in k]
        assert any(b" " in k for k in postings)  # the long term, shortened


_ID = st.text(
    alphabet=st.characters(blacklist_categories=("Zs", "Zl", "Zp", "Cc", "Cs")),
    min_size=1,
    max_size=128,
)


@settings(max_examples=60, deadline=None)
@given(
    world=st.text(min_size=1, max_size=300).filter(lambda w: "." not in w),
    belief_id=_ID,
    text=st.text(min_size=1, max_size=3000),
)
def test_no_index_key_exceeds_lmdbs_limit_whatever_the_text(
    world: str, belief_id: str, text: str
) -> None:
    st_ = MemoryState()
    _add(st_, world, belief_id, text, 1)
    assert _longest_key(st_, index_only=True) <= LMDB_MAX_KEY
    # The id is read back whole from the ranks, however it was shortened in the key.
    cards = index.candidates(st_, world, text[:4000], "")
    assert [c.belief.id for c in cards] == [belief_id]


def test_a_four_byte_id_of_128_characters_is_kept_whole() -> None:
    st_ = MemoryState()
    belief_id = "\U0001f600" * 128  # 512 bytes: alone more than LMDB's limit
    _add(st_, "w" * 64, belief_id, "Emoji ids are ids.", 1)
    assert _longest_key(st_, index_only=True) <= LMDB_MAX_KEY
    assert index.recent(st_, "w" * 64) == [belief_id]
    assert index.card(st_, "w" * 64, belief_id) is not None


def test_an_edge_between_long_ids_is_indexed_by_both_ends() -> None:
    st_ = MemoryState()
    world, source, target = "w", "\U0001f600" * 100, "b-" + "t" * 126
    _add(st_, world, source, "It rests on the other one.", 1)
    _add(st_, world, target, "The other one.", 2)
    weight = index.card(st_, world, target)
    assert weight is not None
    edge = BeliefEdge(id="\U0001f4a5" * 30, type="depends_on", source=source,
                      target=target, confidence=1.0, version=3)  # fmt: skip
    ctx = Context(world=world, author="m", subject=state(world, "belief_edge"), seq=3,
                  now=T0)  # fmt: skip
    st_.apply(core.handle(st_, BeliefEdgeChanged(edge=edge), ctx))
    assert _longest_key(st_, index_only=True) <= LMDB_MAX_KEY
    # Found again by its ends: the target now has something resting on it.
    after = index.card(st_, world, target)
    assert after is not None
    assert after.weight > weight.weight


@given(st.text(max_size=400), st.text(max_size=400))
def test_a_shortened_part_never_equals_another_text(a: str, b: str) -> None:
    """Shortening is injective in practice: a shortened part holds a space (which no
    world, stem or id holds) and a digest of the whole text."""
    pa, pb = index.key_part(a, 64), index.key_part(b, 64)
    assert len(pa.encode()) <= 64
    if a != b and " " not in a and " " not in b:
        assert pa != pb

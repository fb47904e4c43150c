"""Index cards and their vectors (issues 14 and 24): a hashing card carries none
(nothing reads it; one is computed, to the bits a stored vector has, if asked), a
semantic card carries its vector from the moment it is written, so a read never
embeds a card, and every answer is the same bytes whether the replica was built
live or by a bulk load."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import embedding
from worldline.actors.projector import core, index
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import BeliefEdge
from worldline.protocols.messages import (
    Before,
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    GetBelief,
    encode,
)
from worldline.protocols.subjects import state

if TYPE_CHECKING:
    import pytest

W: Final = "lazy"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
WORDS: Final = ["pilot", "churn", "export", "audit", "invoice", "renewal", "latency"]


def _belief(i: int, version: int, text: str | None = None) -> Belief:
    words = [WORDS[(i * k + k) % len(WORDS)] for k in range(1, 6)]
    return Belief(
        id=f"b{i:04d}",
        text=text or f"{' '.join(words)} case {i}",
        type="claim",
        confidence=0.2 + (i % 7) / 10,
        prior=0.6,
        uncertainty=0.1 + (i % 5) / 20,
        author="ada",
        created_at=T0,
        updated_at=T0 + timedelta(seconds=i),
        version=version,
    )


def _replica(n: int, pending: int) -> MemoryState:
    """``n`` beliefs and a few edges, every change applied with ``pending`` more
    waiting (0: live)."""
    replica = MemoryState()
    seq = 0
    for i in range(n):
        seq += 1
        ctx = Context(W, "m", state(W, "belief"), seq, T0, pending=pending)
        replica.apply(core.handle(replica, BeliefChanged(belief=_belief(i, seq)), ctx))
        if i % 5 == 4:
            seq += 1
            edge = BeliefEdge(id=f"e{i}", source=f"b{i:04d}", target=f"b{i - 3:04d}",
                              type="depends_on", author="ada", version=seq)  # fmt: skip
            ctx = Context(W, "m", state(W, "edge"), seq, T0, pending=pending)
            change = BeliefEdgeChanged(edge=edge)
            replica.apply(core.handle(replica, change, ctx))
    return replica


def _card(replica: MemoryState, belief_id: str) -> index.Card:
    found = index.card(replica, W, belief_id)
    assert found is not None
    return found


def test_a_hashing_card_has_no_vector_and_reads_the_same_bits() -> None:
    """Issue 24: nothing reads the hashing embedder's vectors (relevance uses a
    card's vector only for a semantic embedder), so no card carries one, live or
    backlog; asked for one anyway, it is the stored vector's bits."""
    live, backlog = _replica(30, pending=0), _replica(30, pending=5)
    for i in range(30):
        card = _card(live, f"b{i:04d}")
        assert card.vector == b""
        assert card == _card(backlog, f"b{i:04d}")
        stored = embedding.embed(card.belief.text).astype(np.float32)
        assert index.vector_of(card).tobytes() == stored.astype(np.float64).tobytes()


def test_a_semantic_card_changed_keeps_its_vector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(embedding.ENV_EMBEDDER, "wordllama")
    replica = _replica(3, pending=5)
    before = _card(replica, "b0001").vector
    belief = msgspec.structs.replace(_belief(1, 1), confidence=0.9, version=50)
    ctx = Context(W, "m", state(W, "belief"), 50, T0)
    replica.apply(core.handle(replica, BeliefChanged(belief=belief), ctx))
    updated = _card(replica, "b0001")
    assert updated.vector == before != b""
    assert updated.belief.confidence == 0.9


@settings(max_examples=25, deadline=None)
@given(
    query=st.lists(st.sampled_from([*WORDS, "deploy", "case", "3"]), max_size=6),
    agent=st.sampled_from(["ada", "spock"]),
    clock=st.sampled_from([None, T0 + timedelta(days=2)]),
)
def test_answers_are_the_same_bytes_from_a_bulk_loaded_replica(
    query: list[str], agent: str, clock: datetime | None
) -> None:
    at = clock or T0
    request = Before(agent=agent, query=" ".join(query), at=at)
    answers = [encode(core.serve(replica, request, W)) for replica in (_LIVE, _BACKLOG)]
    assert answers[0] == answers[1]
    get = GetBelief(belief_id="b0007", at=clock)
    assert encode(core.serve(_LIVE, get, W)) == encode(core.serve(_BACKLOG, get, W))


_LIVE, _BACKLOG = _replica(120, pending=0), _replica(120, pending=3)


def test_a_read_embeds_each_lazy_text_once() -> None:
    replica = _replica(40, pending=9)
    index._deferred_vector.cache_clear()
    first = np.stack([index.vector_of(_card(replica, f"b{i:04d}")) for i in range(40)])
    hits = index._deferred_vector.cache_info().hits
    again = np.stack([index.vector_of(_card(replica, f"b{i:04d}")) for i in range(40)])
    assert index._deferred_vector.cache_info().hits == hits + 40
    assert (first == again).all()
    assert not index.vector_of(_card(replica, "b0001")).flags.writeable  # shared


def test_a_semantic_embedder_leaves_no_vector_for_a_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 24: with a semantic embedder a read never embeds, backlog or not: its
    cards carry their vectors, the bits an eager write stores."""
    monkeypatch.setenv(embedding.ENV_EMBEDDER, "wordllama")
    semantic = embedding.active()
    live, backlog = _replica(12, pending=0), _replica(12, pending=5)
    for i in range(12):
        eager, written = _card(live, f"b{i:04d}"), _card(backlog, f"b{i:04d}")
        assert written.embedder == semantic.id
        assert len(written.vector) == 4 * semantic.dimensions
        assert written.vector == eager.vector

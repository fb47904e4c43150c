"""Projector catch-up on bulk loads: what one batch costs must not grow with the
world. The attack loaded 100k beliefs into a declared world; fusion and the
materializer kept up, the projector took 600 s, because each batch's view rebuild
read every key under the index's ranked prefixes (an ``Overlay`` scan read its whole
prefix before the first key, so "the first 32" cost the whole world)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import embedding
from worldline.actors.projector import core, views
from worldline.actors.runtime.memory import MemoryState, Overlay
from worldline.actors.runtime.spec import Context
from worldline.protocols.messages import Belief, BeliefChanged, WorldDeclared
from worldline.protocols.subjects import state
from worldline.sdk.declaration import load_declaration

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy as np
    import pytest

W: Final = "enterprise"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
CREW: Final = Path(__file__).resolve().parents[2] / "examples" / "crew.toml"
WORDS: Final = [
    "pilot",
    "sla",
    "churn",
    "export",
    "auth",
    "cache",
    "deploy",
    "tenant",
    "audit",
    "invoice",
    "payer",
    "claims",
    "renewal",
    "outage",
    "latency",
    "roadmap",
    "partner",
    "onboarding",
    "contract",
    "pricing",
]


class Counting:
    """A reader that counts the keys its scans hand out."""

    def __init__(self, inner: MemoryState) -> None:
        self.inner = inner
        self.read = 0

    def get(self, key: bytes) -> bytes | None:
        return self.inner.get(key)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for item in self.inner.scan(prefix):
            self.read += 1
            yield item


def test_overlay_scan_reads_only_what_the_caller_takes() -> None:
    base = MemoryState()
    base.data = {f"k/{i:05d}".encode(): b"v" for i in range(2000)}
    counting = Counting(base)
    overlay = Overlay(counting, {b"k/00001": None, b"k/00002x": b"new"})
    first = []
    for key, _ in overlay.scan(b"k/"):
        first.append(key)
        if len(first) == 3:
            break
    assert first == [b"k/00000", b"k/00002", b"k/00002x"]
    assert counting.read <= 4  # was 2000: the whole prefix before the first key


@settings(max_examples=200, deadline=None)
@given(
    stored=st.dictionaries(st.binary(max_size=4), st.binary(max_size=2), max_size=30),
    writes=st.dictionaries(
        st.binary(max_size=4), st.none() | st.binary(max_size=2), max_size=30
    ),
    prefix=st.binary(max_size=2),
)
def test_overlay_scan_reads_as_the_committed_writes_would(
    stored: dict[bytes, bytes], writes: dict[bytes, bytes | None], prefix: bytes
) -> None:
    base = MemoryState()
    base.data = dict(stored)
    after = MemoryState()
    after.data = dict(stored)
    for key, value in writes.items():
        if value is None:
            after.data.pop(key, None)
        else:
            after.data[key] = value
    assert list(Overlay(base, writes).scan(prefix)) == list(after.scan(prefix))


def _world(n: int) -> MemoryState:
    """A declared crew world (six agents) holding ``n`` beliefs of varied text."""
    replica = MemoryState()
    decl = load_declaration(CREW)
    seq = 1
    ctx = Context(world=W, author="m", subject=state(W, "world"), seq=seq, now=T0)
    replica.apply(core.handle(replica, WorldDeclared(declaration=decl, version=1), ctx))
    for i in range(n):
        seq += 1
        words = [WORDS[(i * k + k * k) % len(WORDS)] for k in range(1, 9)]
        belief = Belief(
            id=f"b{i:06d}",
            text=f"{' '.join(words)} case {i}",
            type="claim",
            confidence=0.3 + (i % 7) / 10,
            prior=0.6,
            uncertainty=0.1 + (i % 5) / 20,
            author="ada",
            created_at=T0,
            updated_at=T0,
            version=seq,
        )
        ctx = Context(world=W, author="m", subject=state(W, "belief"), seq=seq, now=T0)
        replica.apply(core.handle(replica, BeliefChanged(belief=belief), ctx))
    return replica


def _refresh_reads(replica: MemoryState, n: int) -> int:
    """Keys one batch's view rebuild reads after one more belief changes."""
    counting = Counting(replica)
    belief = Belief(
        id="b-new", text="pilot churn renewal", type="claim", confidence=0.7,
        prior=0.6, author="ada", created_at=T0, updated_at=T0, version=n + 10,
    )  # fmt: skip
    ctx = Context(world=W, author="m", subject=state(W, "belief"), seq=n + 10, now=T0)
    step = core.handle(counting, BeliefChanged(belief=belief), ctx)
    replica.apply(step)
    counting.read = 0
    finished = views.refresh_stale(counting, ctx)
    assert finished.out  # the agents' views were rebuilt and pushed
    return counting.read


def test_a_batch_view_rebuild_reads_the_same_at_any_world_size() -> None:
    small = _refresh_reads(_world(600), 600)
    large = _refresh_reads(_world(1800), 1800)
    # Bounded by the index's top-N limits and postings budgets, not by the beliefs
    # held (on the old code ``large`` read several times ``small``: every ranked
    # key, per agent). Every word is common here, so both sizes fill the budgets.
    assert large <= small + 50, (small, large)


def test_a_view_rebuild_embeds_nothing_it_embedded_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Goals, constraints, actions and each agent's focus read the same in every
    batch: embedding them once per view and batch was a fifth of a bulk load."""
    replica = _world(40)
    _refresh_reads(replica, 40)  # every view rebuilt once
    calls: list[str] = []
    real = embedding.embed

    def counted(text: str) -> np.ndarray:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(embedding, "embed", counted)
    _refresh_reads(replica, 41)
    # The changed belief kept its text (its card keeps its vector), and the views'
    # goals, constraints, actions and focus were embedded in the first rebuild.
    assert calls == []

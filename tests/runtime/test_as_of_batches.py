"""What the projector keeps for ``as_of`` reads does not depend on how the change feed
was batched (issue 25, point 5): a real log's changes (beliefs, rival answers,
evidence from several sources, trust settings, closings, edges) applied in batches of
any size leave the store, and every read as of any op's time, exactly as applying
each change alone does, although a batch coalesces a belief's changes
(``core.newest_only``)."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.test_contradictions import Stack
from tests.core.test_order_independence import BELIEFS, W, build_log, draws
from worldline.actors.projector import core as projector
from worldline.actors.registry import build
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.memory import state_hash
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import (
    GetBelief,
    ProjectorRpc,
    ReadWorld,
    SetTrust,
    TraceBelief,
    encode,
    encode_batch,
)
from worldline.protocols.subjects import state

PROJECTOR = build("projector").inputs[0]
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def _changes(log: list[Any]) -> list[tuple[str, bytes]]:
    stack = Stack()
    for op in log:
        stack.op(op)
    stack.run()
    return [
        (c.subject, encode(c.message))
        for c in stack.changes
        if c.subject.startswith(state(W, ""))
    ]


def _apply(store: Store, items: list[tuple[str, bytes]], sizes: list[int]) -> None:
    """``items`` in batch messages of the given sizes (the last one takes the rest)."""
    subject = state(W, "batch")
    chunks, n = [], 0
    for size in [*sizes, len(items)]:
        if n < len(items):
            chunks.append(items[n : n + size])
            n += size
    deliveries = [
        Delivery(seq, subject, encode_batch(chunk), batch=True)
        for seq, chunk in enumerate(chunks, start=1)
    ]
    assert all(store.apply_batch(PROJECTOR, deliveries, NOW).accepted)


def _reads(store: Store, times: list[datetime]) -> list[bytes]:
    requests: list[ProjectorRpc] = []
    for t in times:
        requests.append(ReadWorld(as_of=t))
        requests += [GetBelief(belief_id=b, as_of=t) for b in BELIEFS]
        requests += [TraceBelief(belief_id=b, as_of=t) for b in BELIEFS]
    with store.reader() as r:
        return [encode(projector.serve(r, request, W)) for request in requests]


def _log(drawn: list[Any], slotted: bool) -> list[Any]:
    # A trust setting first too, so items bring sources with a multiplier.
    trust = SetTrust(
        op_id="op-t-first", author="ada", at=datetime(2026, 1, 1, tzinfo=UTC),
        source="s2", trust=0.4,
    )  # fmt: skip
    return [trust, *build_log(drawn, slotted)]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    drawn=draws,
    slotted=st.booleans(),
    sizes=st.lists(st.integers(1, 12), max_size=8),
)
def test_the_as_of_history_is_the_same_however_the_feed_was_batched(
    drawn: list[Any], slotted: bool, sizes: list[int]
) -> None:
    log = _log(drawn, slotted)
    items = _changes(log)
    times = sorted({op.at for op in log} | {op.at - timedelta(minutes=1) for op in log})
    with tempfile.TemporaryDirectory() as tmp:
        batched = Store(Path(tmp) / "batched", actor="projector")
        one_by_one = Store(Path(tmp) / "one-by-one", actor="projector")
        try:
            _apply(batched, items, sizes)
            _apply(one_by_one, items, [1] * len(items))
            with batched.reader() as a, one_by_one.reader() as b:
                assert state_hash(a) == state_hash(b)
            assert _reads(batched, times) == _reads(one_by_one, times)
        finally:
            batched.close()
            one_by_one.close()


def test_a_whole_log_in_one_batch_keeps_what_each_change_alone_keeps() -> None:
    """The coalescing case itself: every change of the log in one batch message."""
    drawn = [("for", 0, 0, 1), ("for", 0, 1, 2), ("against", 0, 2, 3),
             ("trust", 0, 0, 4), ("for", 0, 3, 5), ("close", 0, 0, 6)]  # fmt: skip
    log = _log(drawn, slotted=True)
    items = _changes(log)
    times = sorted({op.at for op in log})
    with tempfile.TemporaryDirectory() as tmp:
        batched = Store(Path(tmp) / "batched", actor="projector")
        one_by_one = Store(Path(tmp) / "one-by-one", actor="projector")
        _apply(batched, items, [len(items)])
        _apply(one_by_one, items, [1] * len(items))
        with batched.reader() as a, one_by_one.reader() as b:
            assert state_hash(a) == state_hash(b)
        assert _reads(batched, times) == _reads(one_by_one, times)
        batched.close()
        one_by_one.close()

"""Batches of actor outputs: how an outbox is packed into stream messages, and how a
consumer unpacks, applies and rejects what one carries."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Literal

import anyio
import anyio.to_thread
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.test_crew import AGENTS, T0, Crew
from tests.runtime.test_store import AT, WORLD, _deliveries
from worldline.actors.registry import build
from worldline.actors.runtime.bus import _batch_header, _sequences
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.memory import state_hash
from worldline.actors.runtime.outbox import BatchResult, OutboxItem
from worldline.actors.runtime.pace import INLINE_BUDGET, Pace
from worldline.actors.runtime.publish import BATCH_BYTES, BATCH_ITEMS, batched
from worldline.actors.runtime.store import Store
from worldline.protocols.beliefs import BeliefEdge
from worldline.protocols.messages import (
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    DeadLetter,
    decode_batch,
    encode,
    encode_batch,
)
from worldline.protocols.subjects import (
    VIEWS,
    batch_subject,
    bucket_key,
    bucket_put,
    derived,
    dlq,
    inbox,
    ops,
    state,
)

FUSION = build("fusion").inputs[0]
_, POSTERIORS = build("materializer").inputs


def _item(n: int, subject: str, size: int = 10) -> OutboxItem:
    return OutboxItem(n.to_bytes(8, "big"), subject, f"id-{n}", b"x" * size)


def test_batch_subjects_keep_each_consumer_and_world_apart() -> None:
    assert batch_subject(derived("w", "posterior", "0")) == derived(
        "w", "posterior", "0"
    )
    assert batch_subject(state("w", "belief")) == state("w", "batch")
    assert batch_subject(state("w", "entity")) == state("w", "batch")
    assert batch_subject(state("v", "entity")) == state("v", "batch")
    for alone in (inbox("w", "ada"), dlq("w", "fusion"), ops("w", "ada"), "x.y.z.w"):
        assert batch_subject(alone) is None


def test_consecutive_outputs_share_a_message_in_order_and_others_travel_alone() -> None:
    items = [
        _item(1, state("w", "belief")),
        _item(2, state("w", "entity")),
        _item(3, inbox("w", "ada")),  # never batched: agents read it one by one
        _item(4, state("w", "belief")),
        _item(5, state("v", "belief")),  # another world: another batch
        _item(6, state("v", "belief")),
    ]
    out = batched(items)
    assert [(m.subject, m.count) for m in out] == [
        (state("w", "batch"), 2),
        (inbox("w", "ada"), 0),
        (state("w", "belief"), 0),  # a run of one is sent as itself
        (state("v", "batch"), 2),
    ]
    assert decode_batch(out[0].payload) == [
        (state("w", "belief"), b"x" * 10),
        (state("w", "entity"), b"x" * 10),
    ]
    assert out[1].msg_id == "id-3"
    # The same items give the same Msg-Ids (a retried publish is de-duplicated);
    # different items give different ones.
    again = batched(items)
    assert [m.msg_id for m in again] == [m.msg_id for m in out]
    assert out[0].msg_id != out[3].msg_id


def test_batches_are_capped_by_count_and_bytes() -> None:
    many = [_item(n, state("w", "belief")) for n in range(BATCH_ITEMS + 5)]
    assert [m.count for m in batched(many)] == [BATCH_ITEMS, 5]
    big = [_item(n, state("w", "belief"), BATCH_BYTES // 3) for n in range(4)]
    out = batched(big)
    assert [m.count for m in out] == [2, 2]
    assert all(len(m.payload) < 1024 * 1024 for m in out)


def _posterior_batch(tmp_path: Path) -> tuple[list[tuple[str, bytes]], bytes]:
    """Fusion's real outputs for three ops, as the batch it would publish."""
    store = Store(tmp_path / "fusion", actor="fusion")
    result = store.apply_batch(FUSION, _deliveries(1, 4), AT)
    store.close()
    items = [(i.subject, i.payload) for i in result.outbox]
    return items, encode_batch(items)


def test_a_batch_applies_every_item_once_at_its_sequence(tmp_path: Path) -> None:
    items, payload = _posterior_batch(tmp_path)
    subject = items[0][0]
    store = Store(tmp_path / "materializer", actor="materializer")
    first = store.apply_batch(
        POSTERIORS, [Delivery(7, subject, payload, batch=True)], AT
    )
    assert first.accepted == [True]
    changed = {i.msg_id for i in first.outbox}
    assert {f"state:{WORLD}:belief:b-{n}:{n}" for n in (1, 2, 3)} <= changed
    # Redelivered (a crash before the ack): skipped whole, nothing twice.
    again = store.apply_batch(
        POSTERIORS, [Delivery(7, subject, payload, batch=True)], AT
    )
    assert again.accepted == [True]
    assert again.outbox == []
    assert store.applied_seq(POSTERIORS.consumer.durable) == 7
    store.close()


def test_a_broken_batch_or_a_smuggled_item_is_dead_lettered(tmp_path: Path) -> None:
    items, _ = _posterior_batch(tmp_path)
    subject = items[0][0]
    other_world = derived("elsewhere", "posterior", "0")
    smuggled = encode_batch([items[0], (other_world, items[1][1]), items[2]])
    store = Store(tmp_path / "materializer", actor="materializer")
    result = store.apply_batch(
        POSTERIORS,
        [
            Delivery(1, subject, b"\xc1 not a batch", batch=True),
            Delivery(2, subject, smuggled, batch=True),
        ],
        AT,
    )
    assert result.accepted == [False, False]
    letters = [
        msgspec.msgpack.decode(i.payload, type=DeadLetter)
        for i in result.outbox
        if i.subject == dlq(WORLD, "materializer")
    ]
    assert [(d.stream_seq, d.reason.split(":")[0]) for d in letters] == [
        (1, "undecodable"),
        (2, "invalid"),
    ]
    assert letters[1].subject == other_world  # the item, not the whole batch
    # The smuggled batch's honest items were applied; the foreign one was not.
    changed = {
        i.msg_id for i in result.outbox if i.subject != dlq(WORLD, "materializer")
    }
    assert f"state:{WORLD}:belief:b-1:1" in changed
    assert f"state:{WORLD}:belief:b-3:3" in changed
    assert not any("elsewhere" in m for m in changed)
    assert [i.msg_id for i in result.outbox if i.msg_id.startswith("dlq:")] == [
        f"dlq:{POSTERIORS.consumer.durable}:1.0",
        f"dlq:{POSTERIORS.consumer.durable}:2.1",
    ]
    store.close()


def test_a_batch_runs_on_the_event_loop_only_once_it_is_known_to_be_quick() -> None:
    pace = Pace()
    assert not pace.inline("in", 1)  # nothing measured yet: a worker thread
    pace.note("in", 256, 256 * 40e-6)  # 40 us a delivery
    assert pace.inline("in", 256)  # about 10 ms: within the budget
    assert not pace.inline("in", int(2 * INLINE_BUDGET / 40e-6))
    assert not pace.inline("other", 1)  # each input is measured on its own
    pace.note("in", 256, 3.0)  # a slow batch (a crew world's views, a slow disk)
    assert not pace.inline("in", 256)
    for _ in range(30):  # quick again
        pace.note("in", 256, 256 * 40e-6)
    assert pace.inline("in", 256)


async def test_no_batch_runs_on_the_event_loop_while_another_applies_in_a_thread() -> (
    None
):
    pace = Pace()
    pace.note("a", 1, 1e-6)
    started, release = threading.Event(), threading.Event()

    def slow() -> BatchResult:
        started.set()
        release.wait(5)
        return BatchResult([], [])

    async with anyio.create_task_group() as tg:
        tg.start_soon(pace.in_thread, slow)
        await anyio.to_thread.run_sync(started.wait, 5)
        assert not pace.inline("a", 1)  # it would wait on the store's write lock
        release.set()
    assert pace.inline("a", 1)


PROJECTOR = build("projector").inputs[0]
Status = Literal["active", "retracted"]
_CHANGE = st.tuples(
    st.sampled_from(["b0", "b1", "b2"]),
    st.sampled_from(["the cache is warm", "the cache is cold"]),
    st.sampled_from(["active", "active", "retracted"]),
    st.floats(0.05, 0.95),
    st.sampled_from([None, ("e1", "b0", "b1"), ("e2", "b2", "b0")]),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(_CHANGE, min_size=1, max_size=20))
def test_a_batch_of_changes_leaves_the_projector_as_applying_each_in_turn(
    changes: list[tuple[str, str, Status, float, tuple[str, str, str] | None]],
) -> None:
    """The projector handles only the last change of a belief in a batch: the
    replica it leaves is the one applying every change alone leaves."""
    items = []
    for version, (belief_id, text, status, confidence, edge) in enumerate(changes, 1):
        if edge is not None:
            edge_id, source, target = edge
            link = BeliefEdge(
                id=edge_id,
                type="depends_on",
                source=source,
                target=target,
                confidence=1.0,
                version=version,
            )
            change = encode(BeliefEdgeChanged(edge=link))
            items.append((state(WORLD, "belief_edge"), change))
        belief = Belief(
            id=belief_id,
            text=text,
            type="claim",
            author="ada",
            status=status,
            confidence=confidence,
            created_at=AT,
            updated_at=AT,
            version=version,
        )
        items.append((state(WORLD, "belief"), encode(BeliefChanged(belief=belief))))
    subject = state(WORLD, "batch")
    with tempfile.TemporaryDirectory() as tmp:
        batched_store = Store(Path(tmp) / "batched", actor="projector")
        one_by_one = Store(Path(tmp) / "one-by-one", actor="projector")
        result = batched_store.apply_batch(
            PROJECTOR, [Delivery(1, subject, encode_batch(items), batch=True)], AT
        )
        assert result.accepted == [True]
        alone = [
            Delivery(n, subject, encode_batch([item]), batch=True)
            for n, item in enumerate(items, 1)
        ]
        assert all(one_by_one.apply_batch(PROJECTOR, alone, AT).accepted)
        with batched_store.reader() as a, one_by_one.reader() as b:
            assert state_hash(a) == state_hash(b)
        batched_store.close()
        one_by_one.close()


def test_agents_views_are_rebuilt_once_per_batch_not_once_per_change() -> None:
    """A batch of 40 belief changes in a world with a crew pushes each agent's view
    once (it used to rebuild every view per change), and leaves the replica and the
    views exactly as applying each change alone does."""
    crew = Crew()
    changes = [
        (out.subject, encode(out.message))
        for out in crew.declare()
        if out.subject.startswith(state(crew.world, ""))
    ]
    for n in range(40):
        belief = Belief(id=f"b{n}", text=f"the soteria pilot needs part {n}",
                        type="claim", author="ada", confidence=0.5 + n / 100,
                        uncertainty=0.3 - n / 200, created_at=T0,
                        updated_at=T0, version=100 + n)  # fmt: skip
        changes.append(
            (state(crew.world, "belief"), encode(BeliefChanged(belief=belief)))
        )
    subject = state(crew.world, "batch")

    def pushed(outbox: list[OutboxItem]) -> dict[str, list[bytes]]:
        views: dict[str, list[bytes]] = {}
        keys = {bucket_put(VIEWS, bucket_key(crew.world, a)) for a in AGENTS}
        for item in outbox:
            if item.subject in keys:
                views.setdefault(item.subject, []).append(item.payload)
        return views

    with tempfile.TemporaryDirectory() as tmp:
        batched_store = Store(Path(tmp) / "batched", actor="projector")
        one_by_one = Store(Path(tmp) / "one-by-one", actor="projector")
        once = batched_store.apply_batch(
            PROJECTOR, [Delivery(1, subject, encode_batch(changes), batch=True)], AT
        )
        each = [
            item
            for n, change in enumerate(changes, 1)
            for item in one_by_one.apply_batch(
                PROJECTOR,
                [Delivery(n, subject, encode_batch([change]), batch=True)],
                AT,
            ).outbox
        ]
        by_batch, by_change = pushed(once.outbox), pushed(each)
        assert len(by_batch) == len(AGENTS)  # a view for every agent of the crew
        assert all(len(p) == 1 for p in by_batch.values())
        assert sum(len(p) for p in by_change.values()) > 10 * len(AGENTS)
        # The same last view of every agent, and the same replica, marks gone.
        assert {k: p[-1] for k, p in by_batch.items()} == {
            k: p[-1] for k, p in by_change.items()
        }
        with batched_store.reader() as a, one_by_one.reader() as b:
            assert state_hash(a) == state_hash(b)
            assert not [k for k, _ in a.scan(b"") if b"stale" in k]
        batched_store.close()
        one_by_one.close()


def test_the_raw_pull_reads_sequences_and_headers_and_never_raises_on_them() -> None:
    assert _sequences("$JS.ACK.WL_OPS.fusion.1.42.7.1700000000000000000.3") == (42, 7)
    assert _sequences(  # the form with a domain and an account hash
        "$JS.ACK.hub.ACCHASH.WL_OPS.fusion.1.42.7.1700000000000000000.3.rnd"
    ) == (42, 7)
    for bad in ("_INBOX.x", "$JS.ACK.S.c.1.x.7.1.3", "$JS.ACK.too.short"):
        with pytest.raises(ValueError, match=r"not a JetStream delivery|invalid"):
            _sequences(bad)
    assert _batch_header(b"NATS/1.0\r\nNats-Msg-Id: a\r\nWl-Batch: 12\r\n\r\n") == "12"
    assert _batch_header(b"NATS/1.0\r\nNats-Msg-Id: a\r\n\r\n") is None
    assert _batch_header(b"NATS/1.0\r\nWl-Batch: \xff9") == "\ufffd9"  # no CRLF

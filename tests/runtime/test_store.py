"""The LMDB shell: a batch commits state, the applied sequence and the outbox
together."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import lmdb
import msgspec

from worldline.actors.registry import build
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.memory import MemoryState, state_hash
from worldline.actors.runtime.spec import Context
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import AddBelief, DeadLetter, PosteriorUpdate, encode
from worldline.protocols.subjects import derived, dlq, ops

if TYPE_CHECKING:
    from pathlib import Path

AT = datetime(2026, 3, 1, tzinfo=UTC)
WORLD = "store-test"
FUSION = build("fusion").inputs[0]


def _op(n: int, author: str = "ada") -> bytes:
    return encode(
        AddBelief(
            op_id=f"op-{n}", author=author, at=AT, belief_id=f"b-{n}", text=f"t{n}"
        )
    )


def _deliveries(start: int, stop: int) -> list[Delivery]:
    return [Delivery(n, ops(WORLD, "ada"), _op(n)) for n in range(start, stop)]


def test_redelivered_sequences_are_applied_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "fusion", actor="fusion")
    first = store.apply_batch(FUSION, _deliveries(1, 6), AT)
    # A crash between commit and ack redelivers an overlapping batch.
    again = store.apply_batch(FUSION, _deliveries(3, 9), AT)
    assert first.accepted == [True] * 5
    assert again.accepted == [True] * 6
    assert len(first.outbox) == 5
    assert [i.msg_id for i in again.outbox] == [
        f"posterior:{WORLD}:b-{n}:op-{n}" for n in (6, 7, 8)
    ]
    assert store.applied_seq(FUSION.consumer.durable) == 8
    store.close()


def test_live_batches_equal_a_replay_from_scratch(tmp_path: Path) -> None:
    store = Store(tmp_path / "fusion", actor="fusion")
    for start in range(1, 20, 3):
        store.apply_batch(FUSION, _deliveries(start, start + 3), AT)
    replay = MemoryState()
    for d in _deliveries(1, 22):
        replay.feed(FUSION, d.data, _context(d))
    with store.reader() as reader:
        assert state_hash(reader) == state_hash(replay)
    store.close()


def _context(d: Delivery) -> Context:
    return Context(world=WORLD, author="ada", subject=d.subject, seq=d.seq, now=AT)


def test_outbox_survives_a_crash_before_publish(tmp_path: Path) -> None:
    store = Store(tmp_path / "fusion", actor="fusion")
    result = store.apply_batch(FUSION, _deliveries(1, 3), AT)
    store.close()  # "crash": committed, never published
    reopened = Store(tmp_path / "fusion", actor="fusion")
    pending = reopened.pending_outbox()
    assert pending == result.outbox
    update = msgspec.msgpack.decode(pending[0].payload, type=PosteriorUpdate)
    assert update.belief.id == "b-1"
    reopened.clear_outbox([item.key for item in pending])
    assert reopened.pending_outbox() == []
    reopened.close()


def test_a_batch_outputs_share_one_outbox_entry_and_older_entries_still_read(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "fusion", actor="fusion")
    first = store.apply_batch(FUSION, _deliveries(1, 4), AT)
    second = store.apply_batch(FUSION, _deliveries(4, 6), AT)
    assert len({i.key for i in first.outbox}) == 1
    assert len(first.outbox) == 3
    assert first.outbox[0].key < second.outbox[0].key
    store.close()
    # An entry as stores kept them before outputs were kept per batch: one output.
    env = lmdb.open(str(tmp_path / "fusion"), max_dbs=4)
    with env.begin(write=True, db=env.open_db(b"outbox")) as txn:
        legacy = msgspec.msgpack.encode((derived("w", "posterior", "0"), "old", b"x"))
        txn.put((10**6).to_bytes(8, "big"), legacy)
    env.close()
    reopened = Store(tmp_path / "fusion", actor="fusion")
    pending = reopened.pending_outbox()
    assert pending[:5] == first.outbox + second.outbox
    assert [(i.msg_id, i.payload) for i in pending[5:]] == [("old", b"x")]
    reopened.clear_outbox([item.key for item in pending[:3]])  # one batch published
    assert reopened.pending_outbox() == pending[3:]
    reopened.close()


def test_rejected_input_is_dead_lettered_in_the_same_commit(tmp_path: Path) -> None:
    store = Store(tmp_path / "fusion", actor="fusion")
    bad = [
        Delivery(1, ops(WORLD, "ada"), b"\x00garbage"),
        Delivery(2, ops(WORLD, "mallory"), _op(2, author="ada")),
        Delivery(3, ops(WORLD, "ada"), _op(3)),
    ]
    result = store.apply_batch(FUSION, bad, AT)
    assert result.accepted == [False, False, True]
    letters = [
        msgspec.msgpack.decode(i.payload, type=DeadLetter)
        for i in result.outbox
        if i.subject == dlq(WORLD, "fusion")
    ]
    assert [(x.stream_seq, x.payload) for x in letters] == [
        (1, bad[0].data),
        (2, bad[1].data),
    ]
    assert letters[1].reason.startswith("invalid")
    assert store.applied_seq(FUSION.consumer.durable) == 3
    store.close()

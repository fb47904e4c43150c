"""The store's room: the LMDB map is configurable and grows when full, a full disk is
told apart from a broken input, and no key a handler writes can poison a batch."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import lmdb
import msgspec
import pytest

from worldline.actors.registry import build
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.errors import StoreError, StoreFull
from worldline.actors.runtime.room import MAP_SIZE_ENV, configured_map_size, parse_size
from worldline.actors.runtime.spec import Input, Step
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import AddBelief, DeadLetter, encode
from worldline.protocols.subjects import dlq, ops

if TYPE_CHECKING:
    from pathlib import Path

AT = datetime(2026, 3, 1, tzinfo=UTC)
WORLD = "room-test"
FUSION = build("fusion").inputs[0]
MIB = 1 << 20


def _op(n: int, text: str = "") -> bytes:
    return encode(
        AddBelief(
            op_id=f"op-{n}",
            author="ada",
            at=AT,
            belief_id=f"b-{n}",
            text=text or f"belief number {n} " + "x" * 2000,
        )
    )


def _batch(start: int, stop: int) -> list[Delivery]:
    return [Delivery(n, ops(WORLD, "ada"), _op(n)) for n in range(start, stop)]


def test_a_tiny_map_is_outgrown_without_losing_or_refusing_anything(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "fusion", actor="fusion", map_size=MIB)
    assert store.map_size == MIB
    for start in range(1, 801, 100):  # about 3.5 MB of beliefs, their outputs
        result = store.apply_batch(FUSION, _batch(start, start + 100), AT)
        assert result.accepted == [True] * 100
        store.clear_outbox([i.key for i in result.outbox])
    assert store.map_size >= 4 * MIB  # doubled, more than once
    assert store.applied_seq(FUSION.consumer.durable) == 800
    with store.reader() as reader:
        assert reader.get(b"belief/room-test/b-1") is not None
        assert reader.get(b"belief/room-test/b-800") is not None
    store.close()
    # Reopened at the configured size, the store keeps what it holds.
    again = Store(tmp_path / "fusion", actor="fusion", map_size=MIB)
    assert again.applied_seq(FUSION.consumer.durable) == 800
    again.close()


def _fill(store: Store) -> None:
    for start in range(1, 801, 100):
        store.apply_batch(FUSION, _batch(start, start + 100), AT)


def test_a_map_at_its_ceiling_is_no_room_not_a_bad_input(tmp_path: Path) -> None:
    store = Store(tmp_path / "fusion", actor="fusion", map_size=MIB, max_map_size=MIB)
    with pytest.raises(StoreFull, match="full at its ceiling of 1,048,576 bytes"):
        _fill(store)
    committed = store.applied_seq(FUSION.consumer.durable)
    assert committed < 800  # what did not fit was not recorded as applied
    store.close()


def test_a_reader_in_another_thread_is_not_broken_by_growing(tmp_path: Path) -> None:
    """Growing waits for open transactions (py-lmdb invalidates them otherwise)."""
    store = Store(tmp_path / "fusion", actor="fusion", map_size=MIB)
    store.apply_batch(FUSION, _batch(1, 2), AT)
    reading, grown = threading.Event(), threading.Event()
    seen: list[bytes | None] = []

    def read() -> None:
        with store.reader() as reader:
            reading.set()
            grown.wait(0.5)  # the writer below must wait for this transaction
            seen.append(reader.get(b"belief/room-test/b-1"))

    thread = threading.Thread(target=read)
    thread.start()
    reading.wait()
    for start in range(2, 602, 100):
        store.apply_batch(FUSION, _batch(start, start + 100), AT)
    grown.set()
    thread.join()
    assert len(seen) == 1
    assert seen[0] is not None
    assert store.map_size > MIB
    store.close()


@pytest.mark.parametrize(
    ("text", "size"),
    [("1048576", MIB), ("512M", 512 * MIB), ("8G", 8 << 30), ("2GiB", 2 << 30),
     (" 64k ", 64 << 10), ("1T", 1 << 40)],
)  # fmt: skip
def test_map_sizes_are_read_in_bytes_or_with_a_suffix(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_the_map_size_comes_from_the_environment_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    configured_map_size.cache_clear()
    monkeypatch.setenv(MAP_SIZE_ENV, "2M")
    try:
        assert configured_map_size() == 2 * MIB
        monkeypatch.setenv(MAP_SIZE_ENV, "9M")
        assert configured_map_size() == 2 * MIB  # read once
        store = Store(tmp_path / "s", actor="fusion")
        assert store.map_size == 2 * MIB
        store.close()
        configured_map_size.cache_clear()
        monkeypatch.setenv(MAP_SIZE_ENV, "lots")
        with pytest.raises(StoreError, match="WORLDLINE_LMDB_MAP_SIZE='lots' is not"):
            Store(tmp_path / "t", actor="fusion")
    finally:
        configured_map_size.cache_clear()


@pytest.mark.parametrize(
    "error",
    [
        lmdb.DiskError("mdb_txn_commit", 28),
        lmdb.Error("mdb_txn_commit: Disk quota exceeded"),
        OSError(28, "No space left on device"),
    ],
)
def test_a_full_disk_is_no_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    store = Store(tmp_path / "fusion", actor="fusion")

    def full(*args: Any) -> Any:
        raise error

    monkeypatch.setattr(store, "_apply_batch", full)
    with pytest.raises(StoreFull, match="free or add disk space"):
        store.apply_batch(FUSION, _batch(1, 2), AT)
    store.close()


def test_another_lmdb_failure_is_a_store_error_not_no_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "fusion", actor="fusion")

    def broken(*args: Any) -> Any:
        raise lmdb.CorruptedError("mdb_get: MDB_CORRUPTED")

    monkeypatch.setattr(store, "_apply_batch", broken)
    with pytest.raises(StoreError, match="MDB_CORRUPTED") as raised:
        store.apply_batch(FUSION, _batch(1, 2), AT)
    assert not isinstance(raised.value, StoreFull)
    store.close()


def test_an_environment_lmdb_gave_up_on_is_reopened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "fusion", actor="fusion")
    store.apply_batch(FUSION, _batch(1, 3), AT)
    real = store._apply_batch
    calls: list[int] = []

    def panics_once(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise lmdb.PanicError("mdb_txn_begin: MDB_PANIC")
        return real(*args)

    monkeypatch.setattr(store, "_apply_batch", panics_once)
    with pytest.raises(StoreError, match="the store was reopened"):
        store.apply_batch(FUSION, _batch(3, 5), AT)
    # The next try works on the reopened environment, without a restart.
    assert store.apply_batch(FUSION, _batch(3, 5), AT).accepted == [True, True]
    assert store.applied_seq(FUSION.consumer.durable) == 4
    store.close()


def _writes_long_keys(reader: Any, message: Any, ctx: Any) -> Step:
    return Step(writes={f"k/{ctx.world}/{message.text}".encode(): b"v"})


def test_a_key_lmdb_would_refuse_dead_letters_that_input_alone(tmp_path: Path) -> None:
    """A handler's key over 511 bytes (MDB_BAD_VALSIZE) used to fail the whole batch
    forever; now that input is dead-lettered with the reason and the rest applies."""
    inp: Input[Any] = Input(
        consumer=FUSION.consumer,
        decoder=FUSION.decoder,
        handle=_writes_long_keys,
    )
    store = Store(tmp_path / "custom", actor="custom")
    batch = [
        Delivery(1, ops(WORLD, "ada"), _op(1, "short")),
        Delivery(2, ops(WORLD, "ada"), _op(2, "y" * 600)),
        Delivery(3, ops(WORLD, "ada"), _op(3, "\U0001f600" * 130)),  # 520 bytes
        Delivery(4, ops(WORLD, "ada"), _op(4, "also short")),
    ]
    result = store.apply_batch(inp, batch, AT)
    assert result.accepted == [True, False, False, True]
    letters = [
        msgspec.msgpack.decode(i.payload, type=DeadLetter)
        for i in result.outbox
        if i.subject == dlq(WORLD, "custom")
    ]
    assert [x.stream_seq for x in letters] == [2, 3]
    assert "over LMDB's limit of 511" in letters[0].reason
    assert letters[0].reason.startswith("invalid: ")
    with store.reader() as reader:
        assert reader.get(f"k/{WORLD}/also short".encode()) == b"v"
    store.close()


def test_refused_deliveries_are_dead_lettered_unhandled(tmp_path: Path) -> None:
    store = Store(tmp_path / "fusion", actor="fusion")
    result = store.apply_batch(
        FUSION, _batch(1, 4), AT, refuse={2: "unstorable: mdb_put: broken"}
    )
    assert result.accepted == [True, False, True]
    (letter,) = [
        msgspec.msgpack.decode(i.payload, type=DeadLetter)
        for i in result.outbox
        if i.subject == dlq(WORLD, "fusion")
    ]
    assert (letter.stream_seq, letter.reason) == (2, "unstorable: mdb_put: broken")
    assert [i.msg_id for i in result.outbox if i.subject == dlq(WORLD, "fusion")] == [
        f"dlq:{FUSION.consumer.durable}:2"
    ]
    with store.reader() as reader:
        assert reader.get(b"belief/room-test/b-2") is None
        assert reader.get(b"belief/room-test/b-3") is not None
    assert store.applied_seq(FUSION.consumer.durable) == 3
    store.close()

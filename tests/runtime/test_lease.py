"""The materializer lease: one publishing holder per partition, hot standbys that take
over within seconds with the same state, partitions that split the worlds."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import nats
import pytest

from tests.support import all_actors, running
from worldline.actors.registry import build
from worldline.actors.runtime.lease import LeaseGate, Unreadable, decide, read_lease
from worldline.protocols.messages import LEASE_VALUE, Lease
from worldline.protocols.subjects import (
    LEASES,
    bucket_put,
    lease_key,
    ops,
    partition_of,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from nats.aio.client import Client as NATS
    from nats.js import JetStreamContext

WORLDLINE = str(Path(sys.executable).parent / "worldline")
KEY = lease_key("materializer", 0, 1)

# --- the rule ---------------------------------------------------------------------


def test_decide_creates_renews_waits_and_takes_over_only_when_stale() -> None:
    mine = Lease(holder="a", term=3)
    theirs = Lease(holder="b", term=3)
    assert decide("a", None, 0.0, 4.0) == "create"
    assert decide("a", mine, 100.0, 4.0) == "renew"  # own lease: same term, any age
    assert decide("a", theirs, 3.9, 4.0) == "wait"
    assert decide("a", theirs, 4.0, 4.0) == "take"


def test_junk_is_taken_back_at_once_only_by_a_valid_holder() -> None:
    junk = Unreadable("revision 7 holds 30 bytes that are no lease")
    assert decide("a", junk, 0.0, 4.0, valid=True) == "renew"  # the holder, in time
    assert decide("a", junk, 3.9, 4.0) == "wait"  # anyone else: a stale lease
    assert decide("a", junk, 4.0, 4.0) == "take"


def test_a_lease_must_expire_for_its_holder_first() -> None:
    with pytest.raises(ValueError, match="expire"):
        LeaseGate(KEY, "a", ttl=1.0, valid_for=1.0)


# --- two gates on a real bucket ------------------------------------------------------


async def test_one_holder_at_a_time_and_the_standby_follows_its_watermark(
    nats_url: str,
) -> None:
    from worldline.actors.runtime.declare import ensure_buckets

    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_buckets(js, [LEASES])
    activations: list[tuple[str, bool]] = []

    def gate(name: str) -> LeaseGate:
        return LeaseGate(KEY, name, ttl=1.2, valid_for=0.7, renew_every=0.1)

    def activate(name: str) -> object:
        async def run(same_term: bool) -> dict[str, int]:
            activations.append((name, same_term))
            return {"WL_OPS": 10}

        return run

    first, second = gate("a"), gate("b")
    overlap = 0

    async def watch() -> None:
        nonlocal overlap
        while True:
            overlap += first.active and second.active
            await anyio.sleep(0.01)

    try:
        async with anyio.create_task_group() as outer:
            outer.start_soon(watch)
            async with anyio.create_task_group() as holder:
                await holder.start(first.run, js, activate("a"))
                await outer.start(second.run, js, activate("b"))
                assert first.active
                assert not second.active
                first.note_published("WL_OPS", 42)
                await anyio.sleep(0.5)
                assert second.follow_limit("WL_OPS") == 42  # the advertised watermark
                assert first.follow_limit("WL_OPS") == 0  # a holder follows no one
                holder.cancel_scope.cancel()  # the holder dies (stops renewing)
            stopped = time.monotonic()
            with anyio.fail_after(5):
                await second.wait_active(True)
            took = time.monotonic() - stopped
            outer.cancel_scope.cancel()
    finally:
        await nc.close()
    assert overlap == 0
    assert 1.0 < took < 3.0, took  # after the lease time, not before
    assert activations == [("a", False), ("b", False)]  # created, then taken over
    assert second.term == first.term + 1


# --- junk over the key ---------------------------------------------------------------

JUNK_STREAM = "JUNKTEST"


async def _pub_ack_into_lease(nc: NATS) -> None:
    """The attack of issue 23: a message published into a stream with reply subject
    ``$KV.wl-leases.<key>``, so the server writes its PubAck JSON over the lease."""
    await nc.publish("junk.op", b"an op", reply=bucket_put(LEASES, KEY))
    await nc.flush()


async def _until(check: Callable[[], bool]) -> None:
    while not check():  # noqa: ASYNC110 (a gate's state, no event to wait on)
        await anyio.sleep(0.05)


def _gates(*names: str) -> list[LeaseGate]:
    return [
        LeaseGate(KEY, name, ttl=1.2, valid_for=0.7, renew_every=0.1) for name in names
    ]


async def _lease_now(js: JetStreamContext) -> bytes:
    kv = await js.key_value(LEASES.bucket)
    entry = await kv.get(KEY)
    assert entry.value is not None
    return bytes(entry.value)


async def test_a_holder_takes_back_its_lease_from_junk_at_once(
    nats_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from worldline.actors.runtime.declare import ensure_buckets

    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_buckets(js, [LEASES])
    await js.add_stream(name=JUNK_STREAM, subjects=["junk.>"])
    first, second = _gates("a", "b")
    lapsed = overlap = 0

    async def activate(same_term: bool) -> dict[str, int]:
        return {}

    async def watch() -> None:
        nonlocal overlap, lapsed
        while True:
            overlap += first.active and second.active
            lapsed += not first.active
            await anyio.sleep(0.01)

    caplog.set_level("INFO", logger="worldline.lease")
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(first.run, js, activate)
            await tg.start(second.run, js, activate)
            assert first.active
            term = first.term
            tg.start_soon(watch)
            await _pub_ack_into_lease(nc)
            for _ in range(4):  # and again, faster than the warnings may come
                await anyio.sleep(0.3)
                await _pub_ack_into_lease(nc)
            await anyio.sleep(1.0)
            tg.cancel_scope.cancel()
        lease = LEASE_VALUE.decode(await _lease_now(js))
    finally:
        await nc.close()
    assert lease.holder == "a"
    assert lease.term == term  # taken back in its own term: no takeover
    assert lapsed == 0  # the holder never stopped being able to write
    assert overlap == 0
    assert not second.active
    assert lease.repairs == 5  # each junk write landed, and was taken back
    assert "JUNKTEST" in lease.repaired
    unreadable = [r for r in caplog.records if "unreadable" in r.getMessage()]
    # Logged once per replica within JUNK_LOG_EVERY, not per junk write or look.
    assert 1 <= len([r for r in unreadable if "is unreadable" in r.getMessage()]) <= 2
    assert len([r for r in unreadable if "taken back" in r.getMessage()]) == 1


async def test_junk_over_a_dead_holders_lease_is_taken_by_exactly_one_standby(
    nats_url: str,
) -> None:
    from worldline.actors.runtime.declare import ensure_buckets
    from worldline.ops.status import _leases

    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_buckets(js, [LEASES])
    await js.add_stream(name=JUNK_STREAM, subjects=["junk.>"])
    holder, *standbys = _gates("a", "b", "c")

    async def activate(same_term: bool) -> dict[str, int]:
        return {}

    overlap = 0

    async def watch() -> None:
        nonlocal overlap
        while True:
            overlap += sum(g.active for g in standbys) > 1
            await anyio.sleep(0.01)

    try:
        async with anyio.create_task_group() as outer:
            async with anyio.create_task_group() as dies:
                await dies.start(holder.run, js, activate)
                for gate in standbys:
                    await outer.start(gate.run, js, activate)
                term = holder.term
                await anyio.sleep(0.3)  # the standbys have read the lease
                dies.cancel_scope.cancel()  # the holder dies ...
            await _pub_ack_into_lease(nc)  # ... and junk lands on its lease
            rows = await _leases(js)
            assert rows[0].holder == "?"
            assert "JUNKTEST" in (rows[0].unreadable or "")
            outer.start_soon(watch)
            with anyio.fail_after(5):
                await _until(lambda: any(g.active for g in standbys))
            await anyio.sleep(0.5)
            outer.cancel_scope.cancel()
        lease = LEASE_VALUE.decode(await _lease_now(js))
        rows = await _leases(js)
    finally:
        await nc.close()
    assert overlap == 0
    assert [g.holder for g in standbys if g.active] == [lease.holder]
    assert lease.term == term + 1  # one takeover
    assert lease.repairs == 1
    assert rows[0].unreadable is None
    assert rows[0].repairs == 1


async def test_junk_again_and_again_does_not_keep_the_standbys_waiting(
    nats_url: str,
) -> None:
    """Junk is no renewal: written every 0.3 s over a dead holder's lease (less than
    the lease time apart), it does not restart the standby's wait."""
    from worldline.actors.runtime.declare import ensure_buckets

    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_buckets(js, [LEASES])
    await js.add_stream(name=JUNK_STREAM, subjects=["junk.>"])
    holder, standby = _gates("a", "b")

    async def activate(same_term: bool) -> dict[str, int]:
        return {}

    async def flood() -> None:
        while True:
            await _pub_ack_into_lease(nc)
            await anyio.sleep(0.3)

    try:
        async with anyio.create_task_group() as outer:
            async with anyio.create_task_group() as dies:
                await dies.start(holder.run, js, activate)
                await outer.start(standby.run, js, activate)
                await anyio.sleep(0.3)  # the standby has read the lease
                dies.cancel_scope.cancel()  # the holder dies, and junk keeps coming
            died = time.monotonic()
            outer.start_soon(flood)
            with anyio.fail_after(5):
                await _until(lambda: standby.active)
            took = time.monotonic() - died
            outer.cancel_scope.cancel()
    finally:
        await nc.close()
    assert took < 1.2 + 0.5, took  # the lease time from the last renewal, no more


def test_status_shows_junk_and_its_repair() -> None:
    from datetime import UTC, datetime

    from worldline.ops.status import LeaseRow, build_report
    from worldline.ops.status_table import render

    report = build_report(
        url="nats://x",
        now=datetime(2026, 1, 1, tzinfo=UTC),
        heartbeats=[],
        consumers={},
        dlq_counts={},
        streams=[],
        expected={},
        leases=[
            LeaseRow(
                partition=KEY, holder="?", term=0, published={}, unreadable="junk!"
            ),
            LeaseRow(
                partition="materializer.p1of2",
                holder="a",
                term=2,
                published={},
                repairs=1,
                repaired="revision 5 holds 28 bytes",
            ),
        ],
    )
    text = render(report)
    assert f"lease {KEY}: unreadable, the replicas take it back: junk!" in text
    assert "lease materializer.p1of2: taken back 1x from an unreadable value" in text


# --- partitions ----------------------------------------------------------------------


async def test_partitions_split_the_worlds_and_each_answers_for_its_own(
    nats_url: str, tmp_path: Path
) -> None:
    import worldline

    worlds = [f"part-{i}" for i in range(6)]
    owners = {partition_of(w, 2) for w in worlds}
    assert owners == {0, 1}  # both partitions get some worlds
    specs = [s for s in all_actors() if s.name != "materializer"]
    specs += [build("materializer", partition=f"{i}/2") for i in range(2)]
    async with running(specs, url=nats_url, data=tmp_path):
        for w in worlds:
            async with worldline.connect(nats_url, world=w, agent="ada") as world:
                added = await world.add(f"{w} holds", confidence=0.7)
                await world.sync()
                state = await world.state_hash()
                assert state.applied > 0
                got = await world.get(added.id)
                assert got is not None
                assert got.text == f"{w} holds"
    for i in range(2):
        mine = {w for w in worlds if partition_of(w, 2) == i}
        stored = _worlds_in(tmp_path / f"materializer-p{i}of2")
        assert stored == mine, (i, stored, mine)


def _worlds_in(store: Path) -> set[str]:
    import lmdb

    env = lmdb.open(str(store), readonly=True, max_dbs=4, lock=False)
    try:
        db = env.open_db(b"state", create=False)
        with env.begin(db=db) as txn:
            keys = [bytes(k).decode() for k, _ in txn.cursor(db=db)]
    finally:
        env.close()
    return {k.split("/")[1] for k in keys if k.count("/") >= 2}


async def test_writes_go_on_after_junk_lands_on_the_materializers_lease(
    nats_url: str, tmp_path: Path
) -> None:
    """Issue 23 end to end: an agent's op with reply ``$KV.wl-leases.<key>`` (the
    server writes its PubAck over the lease). Before, the materializer could never
    read or renew its lease again and every later write waited in vain (exit 4)."""
    import worldline

    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world="leasejunk", agent="ada") as ada,
    ):
        await ada.add("before the junk", confidence=0.6)
        await ada._nc.publish(
            ops("leasejunk", "ada"), b"junk op", reply=bucket_put(LEASES, KEY)
        )
        await ada._nc.flush()
        with anyio.fail_after(10):
            added = await ada.add("after the junk", confidence=0.6)
        assert (await ada.get(added.id)) is not None
        with anyio.fail_after(3):  # taken back at the holder's next renewal
            while True:
                lease = read_lease(await _lease_now(ada._js), 0)
                if isinstance(lease, Lease):
                    break
                await anyio.sleep(0.1)
        with anyio.fail_after(10):  # and writes still apply
            await ada.add("after the repair", confidence=0.6)
    assert lease.repairs == 1
    assert "WL_OPS" in lease.repaired

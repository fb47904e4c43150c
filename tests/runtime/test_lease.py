"""The materializer lease: one publishing holder per partition, hot standbys that take
over within seconds with the same state, partitions that split the worlds."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import nats
import pytest

from tests.support import all_actors, running
from worldline.actors.registry import build
from worldline.actors.runtime.lease import LeaseGate, decide
from worldline.protocols.messages import Lease
from worldline.protocols.subjects import LEASES, lease_key, partition_of

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

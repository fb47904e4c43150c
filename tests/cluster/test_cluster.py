"""Failover on a 3-node JetStream cluster started from ``deploy/nats/cluster/``.

All five actors run in this process against the cluster (every node in the URL, stream
replicas 3; the streams and buckets start at one replica, so the actors must scale
them). A writer streams crew ops; once a quarter of them is acknowledged, the
node leading ``WL_OPS`` is killed with SIGKILL. The writer retries a failed write with
the same op id (Nats-Msg-Id de-duplication makes that harmless) until a new leader
takes it. Then the killed node is restarted and must catch up, and every acknowledged
op must be in the log exactly once and the live state must equal a clean replay.

``WORLDLINE_CLUSTER_OPS=5000 python -m pytest tests/cluster`` writes more ops.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio
import nats.errors
import pytest
from nats.js import api

import worldline
from tests.cluster.cluster import NatsCluster
from tests.reliability.test_crash import _op
from tests.runtime.test_crew import CREW_TOML
from tests.support import all_actors, running
from worldline.actors.runtime.bus import connect as bus_connect
from worldline.actors.runtime.declare import (
    REPLICAS_ENV,
    ensure_buckets,
    ensure_streams,
)
from worldline.ops.replay import replay
from worldline.protocols.messages import encode
from worldline.protocols.subjects import (
    BUCKETS,
    OPS,
    STREAMS,
    VIEWS,
    bucket_stream,
    ops,
)
from worldline.sdk.declaration import parse_declaration
from worldline.sdk.errors import BusUnavailable

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from nats.js import JetStreamContext

# About 25 s on a quiet 2-core machine; room for one that is busy.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

WORLD = "cluster"
OPS_COUNT = int(os.environ.get("WORLDLINE_CLUSTER_OPS", "600"))
RESUME_WITHIN = 30.0  # seconds a write may keep failing before the test gives up


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    nodes = NatsCluster(tmp_path / "nats")
    try:
        nodes.start_all()
        yield nodes
    finally:
        nodes.stop()


@dataclass
class Writer:
    """Streams ops one at a time; a failed write is retried with the same op id."""

    js: JetStreamContext
    count: int
    acked: list[str] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)
    retries: int = 0
    duplicates: int = 0  # retries JetStream recognised as already stored
    kill_at: int = 0  # after this many acknowledged ops, ``reached`` is set
    reached: anyio.Event = field(default_factory=anyio.Event)

    async def run(self) -> None:
        at = datetime.now(UTC)
        for i in range(self.count):
            op = _op(i, at)
            with anyio.fail_after(RESUME_WITHIN):
                while True:
                    try:
                        ack = await self.js.publish(
                            ops(WORLD, "ada"),
                            encode(op),
                            timeout=2,
                            headers={api.Header.MSG_ID: op.op_id},
                        )
                        break
                    except (nats.errors.Error, TimeoutError, OSError):
                        self.retries += 1
                        await anyio.sleep(0.1)
            self.duplicates += bool(ack.duplicate)
            self.acked.append(op.op_id)
            self.acked_at.append(time.monotonic())
            if len(self.acked) == self.kill_at:
                self.reached.set()

    def longest_gap(self) -> float:
        pairs = zip(self.acked_at, self.acked_at[1:], strict=False)
        return max((b - a for a, b in pairs), default=0.0)


async def _leader(js: JetStreamContext) -> str:
    info = await js.stream_info(OPS.name)
    assert info.cluster is not None
    assert info.cluster.leader, info.cluster
    return info.cluster.leader


async def _caught_up(js: JetStreamContext, name: str, *, within: float) -> None:
    """Wait until node ``name`` holds a current copy of WL_OPS again."""
    with anyio.fail_after(within):
        while True:
            with anyio.move_on_after(2):
                info = await js.stream_info(OPS.name)
                assert info.cluster is not None
                peers = {p.name: p for p in info.cluster.replicas or []}
                if info.cluster.leader == name or (
                    name in peers and peers[name].current and not peers[name].lag
                ):
                    return
            await anyio.sleep(0.2)


async def test_kill_9_of_the_ops_leader_loses_and_doubles_nothing(
    cluster: NatsCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await cluster.wait_jetstream()
    # A deployment that started with one replica: the actors scale it to three.
    nc = await bus_connect(cluster.url, name="cluster-setup")
    try:
        await ensure_streams(nc.jetstream(), STREAMS, replicas=1)
        await ensure_buckets(nc.jetstream(), BUCKETS, replicas=1)
    finally:
        await nc.close()
    monkeypatch.setenv(REPLICAS_ENV, "3")
    declaration = parse_declaration(
        CREW_TOML.read_text().replace('id = "enterprise"', f'id = "{WORLD}"', 1),
        source="crew.toml",
    )
    async with running(all_actors(), url=cluster.url, data=tmp_path / "actors"):
        nc = await bus_connect(cluster.url, name="cluster-test")
        try:
            js = nc.jetstream()
            for name in [s.name for s in STREAMS] + [bucket_stream(VIEWS)]:
                assert (await js.stream_info(name)).config.num_replicas == 3, name
            async with worldline.connect(cluster.url, world=WORLD, agent="henry") as w:
                await w.declare(declaration)

            writer = Writer(js, OPS_COUNT, kill_at=OPS_COUNT // 4)
            async with anyio.create_task_group() as tg:
                tg.start_soon(writer.run)
                await writer.reached.wait()
                leader = await _leader(js)
                victim = int(leader.rsplit("-", 1)[1]) - 1
                cluster.kill(victim)
                killed_after = len(writer.acked)

            new_leader = await _leader(js)
            cluster.restart(victim)
            await _caught_up(js, leader, within=30)
        finally:
            await nc.close()

        async with worldline.connect(cluster.url, world=WORLD, agent="ada") as w:
            matched = False
            with anyio.move_on_after(40):
                attempt = 0
                while not matched:
                    attempt += 1
                    try:
                        records = [r async for r in w.export()]
                        live = await w.state_hash()
                    except (nats.errors.Error, TimeoutError, BusUnavailable) as exc:
                        # A node that just rejoined can keep JetStream requests
                        # waiting a few seconds while the cluster settles.
                        print(f"cluster: reading the world failed ({exc!r}); again")
                        await anyio.sleep(0.5)
                        continue
                    result = await anyio.to_thread.run_sync(
                        replay, records, tmp_path / f"replay-{attempt}", WORLD
                    )
                    matched = (live.applied, live.hash) == (
                        result.last_seq,
                        result.hash,
                    )
                    if not matched:
                        await anyio.sleep(0.5)
            assert matched, (
                f"live state applied through op {live.applied} (hash {live.hash}), "
                f"replay of {result.ops} ops through {result.last_seq} "
                f"(hash {result.hash})"
            )

    written = {_op(i, datetime.now(UTC)).op_id for i in range(OPS_COUNT)}
    logged = [r.op.op_id for r in records if r.op.op_id in written]
    print(
        f"cluster: killed {leader} (WL_OPS leader) after {killed_after} of "
        f"{OPS_COUNT} acknowledged ops; new leader {new_leader}; writes paused at most "
        f"{writer.longest_gap():.2f}s; {writer.retries} retried writes, "
        f"{writer.duplicates} recognised as already stored; {len(logged)} in the log; "
        f"{leader} restarted and caught up"
    )
    assert 0 < killed_after < OPS_COUNT  # the kill came mid-write
    assert new_leader != leader
    assert len(writer.acked) == OPS_COUNT  # every write was eventually acknowledged
    assert set(writer.acked) == set(logged)  # none lost
    assert len(logged) == len(set(logged))  # none doubled
    assert live.hash == result.hash  # the live state is the log applied exactly once

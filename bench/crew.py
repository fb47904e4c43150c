"""Crew-world benchmark: propagation latency for a 50-agent crew, cascade failures,
and the materializer's in-core apply rate, each beside the raw baseline measured in the
same run on the same machine (the raw bus for latency, raw LMDB puts for applying).

Run: ``python bench/crew.py [--ops 300]`` (starts its own nats-server and actors).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import lmdb
import msgspec
import nats
from nats.js import api

import worldline
from worldline.actors.registry import build
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import (
    INBOX,
    DeclareWorld,
    Notification,
    SetField,
    WorkAssigned,
    encode,
)
from worldline.protocols.subjects import inbox as inbox_subject
from worldline.protocols.subjects import ops
from worldline.protocols.world import EdgeSeed, EntitySeed, WorldDecl
from worldline.sdk.declaration import load_declaration

ROOT = Path(__file__).resolve().parent.parent
PILOT = "project:soteria-pilot-conversion"
AGENTS = [f"a{i:02d}" for i in range(50)]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def raw_bus(url: str, n: int, size: int) -> tuple[float, list[float]]:
    """JetStream publish + pull-consume-ack of ``size``-byte messages: one at a time
    for latency, pipelined for throughput."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    stream = f"RAW_{uuid.uuid4().hex[:8]}"
    subject = f"raw.{stream}"
    await js.add_stream(api.StreamConfig(name=stream, subjects=[subject]))
    sub = await js.pull_subscribe(subject, durable="raw", stream=stream)
    payload = os.urandom(size)
    latencies = []
    for _ in range(n):
        start = time.perf_counter()
        await js.publish(subject, payload)
        (msg,) = await sub.fetch(1, timeout=5)
        await msg.ack()
        latencies.append(time.perf_counter() - start)
    start = time.perf_counter()
    futures = [await js.publish_async(subject, payload) for _ in range(n * 10)]
    for future in futures:
        await future
    got = 0
    while got < n * 10:
        msgs = await sub.fetch(500, timeout=5)
        for msg in msgs:
            await msg.ack()
        got += len(msgs)
    rate = n * 10 / (time.perf_counter() - start)
    await js.delete_stream(stream)
    await nc.close()
    return rate, latencies


def crew_declaration(world: str) -> WorldDecl:
    decl = load_declaration(ROOT / "examples" / "crew.toml")
    return msgspec.structs.replace(
        decl,
        world=msgspec.structs.replace(decl.world, id=world),
        entities=[*decl.entities, *(EntitySeed(id=f"agent:{a}") for a in AGENTS)],
        edges=[
            *decl.edges,
            *(
                EdgeSeed(
                    id=f"c-{a}",
                    type="collaborates_on",
                    source=f"agent:{a}",
                    target=PILOT,
                )
                for a in AGENTS
            ),
        ],
    )


async def propagation(url: str, n: int) -> tuple[list[float], int, int, int]:
    """Latency from an op's PubAck to the first inbox delivery it causes."""
    world = f"bench-{uuid.uuid4().hex[:8]}"
    async with worldline.connect(
        url, world=world, agent="ada", request_timeout=30
    ) as w:
        await w.declare(crew_declaration(world))
    nc = await nats.connect(url)
    js = nc.jetstream()
    sub = await nc.subscribe(inbox_subject(world, "*"), pending_msgs_limit=1_000_000)
    latencies: list[float] = []
    notes = works = cascades = 0
    base = datetime.now(UTC)
    for i in range(n):
        op = SetField(
            op_id=f"bench-{uuid.uuid4().hex}",
            author="ada",
            at=base + timedelta(seconds=i),
            entity=PILOT,
            field="phase",
            value=f"phase-{i}",
        )
        await js.publish(
            ops(world, "ada"), encode(op), headers={api.Header.MSG_ID: op.op_id}
        )
        acked = time.perf_counter()
        first = None
        per_op = 0
        deadline = acked + 10
        while time.perf_counter() < deadline:
            try:
                msg = await sub.next_msg(timeout=0.2)
            except nats.errors.TimeoutError:
                if first is not None:
                    break
                continue
            message = INBOX.decode(msg.data)
            if getattr(message, "cause", None) != op.op_id:
                continue
            first = first or time.perf_counter()
            per_op += 1
            notes += isinstance(message, Notification)
            works += isinstance(message, WorkAssigned)
            if isinstance(message, Notification) and message.depth > 2:
                cascades += 1
            if per_op >= 2 * (len(AGENTS) + 3) + 1:  # notes + first-window work
                break
        if first is None:
            cascades += 1  # lost propagation counts as a failure too
            continue
        latencies.append(first - acked)
        # Drain what this op still has in flight before timing the next one.
        if per_op > 2 * (len(AGENTS) + 3) + 1:
            cascades += 1
    await nc.close()
    return latencies, notes, works, cascades


def apply_rates(n: int) -> tuple[float, float]:
    """Crew ops applied per second by the materializer core through its LMDB store,
    against raw batched LMDB puts of the same number of same-sized values."""
    with tempfile.TemporaryDirectory() as tmp:
        world = "apply"
        store = Store(Path(tmp) / "m", actor="materializer")
        ops_input = build("materializer").inputs[0]
        decl = crew_declaration(world)
        at = datetime.now(UTC)
        first = DeclareWorld(op_id="d", author="ada", at=at, declaration=decl)
        store.apply_batch(
            ops_input, [Delivery(1, ops(world, "ada"), encode(first))], at
        )
        deliveries = [
            Delivery(
                i + 2,
                ops(world, "ada"),
                encode(
                    SetField(
                        op_id=f"o{i}",
                        author="ada",
                        at=at + timedelta(hours=2 * i),  # past the dedupe window
                        entity="company:soteria",
                        field="hot_leads",
                        value=i,
                    )
                ),
            )
            for i in range(n)
        ]
        start = time.perf_counter()
        for chunk in range(0, n, 256):
            result = store.apply_batch(ops_input, deliveries[chunk : chunk + 256], at)
            store.clear_outbox([item.key for item in result.outbox])
        applied = n / (time.perf_counter() - start)
        store.close()
        size = len(deliveries[0].data)
        env = lmdb.open(str(Path(tmp) / "raw"), map_size=1 << 30)
        value = os.urandom(size)
        start = time.perf_counter()
        for chunk in range(0, n, 256):
            with env.begin(write=True) as txn:
                for i in range(chunk, min(n, chunk + 256)):
                    txn.put(f"k{i:09d}".encode(), value)
        raw = n / (time.perf_counter() - start)
        env.close()
    return applied, raw


def start_actors(url: str, data: Path) -> list[subprocess.Popen[str]]:
    """The actors the crew path uses, each in its own process, as an operator runs
    them; returns once each one consumes."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "worldline.cli", "actor", name, "--nats", url,
             "--data", str(data)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for name in ("materializer", "fusion", "projector")
    ]  # fmt: skip
    for proc in procs:
        assert proc.stdout is not None
        proc.stdout.readline()
    return procs


def stop_actors(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
        if proc.stdout:
            proc.stdout.close()


def row(label: str, value: str) -> None:
    print(f"{label:<36}{value}")


def ms(p50: float, p99: float) -> str:
    return f"p50 {p50 * 1e3:6.2f} ms  p99 {p99 * 1e3:6.2f} ms"


async def main(n: int) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedNats(Path(tmp) / "nats") as server,
    ):
        procs = start_actors(server.url, Path(tmp) / "data")
        try:
            raw_rate, raw_lat = await raw_bus(server.url, n, 300)
            lat, notes, works, cascades = await propagation(server.url, n)
        finally:
            stop_actors(procs)
    applied, raw_put = apply_rates(20_000)
    p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
    r50, r99 = pct(raw_lat, 0.5), pct(raw_lat, 0.99)
    row("ops measured", f"{len(lat)} of {n}")
    row("raw bus publish->consume->ack", ms(r50, r99))
    row("raw bus pipelined", f"{raw_rate:,.0f} msgs/s")
    row("propagation op ack->first inbox", ms(p50, p99))
    row("propagation / raw bus (p50, p99)", f"{p50 / r50:.1f}x  {p99 / r99:.1f}x")
    row("inbox messages", f"{notes} notifications, {works} work requests")
    row("cascade failures", str(cascades))
    row("materializer apply (core + LMDB)", f"{applied:,.0f} ops/s")
    row("raw LMDB batched puts", f"{raw_put:,.0f} puts/s")
    row("apply / raw puts", f"{applied / raw_put:.3f}")
    row("p99 under 50 ms", "yes" if p99 < 0.05 else "NO")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=300)
    anyio.run(main, parser.parse_args().ops, backend="asyncio")

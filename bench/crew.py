"""Crew-world benchmark: propagation latency for a crew of N extra agents (default 50),
cascade failures, and the materializer's in-core apply rate, each beside the raw
baseline measured in the same run on the same machine (the raw bus for latency, raw
LMDB puts for applying).

Run: ``python bench/crew.py [--ops 300] [--agents 50]`` (starts its own nats-server and
actors).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

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

# bench/ holds scripts, not a package: the pipeline bench's actor processes.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline import start_actor_processes, stop_actor_processes

if TYPE_CHECKING:
    from nats.aio.msg import Msg

ROOT = Path(__file__).resolve().parent.parent
PILOT = "project:soteria-pilot-conversion"


def agent_names(n: int) -> list[str]:
    """The ``n`` extra collaborators: a00..a49 for the default 50 (as before)."""
    width = max(2, len(str(n - 1)))
    return [f"a{i:0{width}d}" for i in range(n)]


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


def crew_declaration(world: str, agents: list[str]) -> WorldDecl:
    """The example crew plus ``agents`` collaborating on the pilot project. The rules'
    fan-out cap is raised to reach every collaborator (the example's 64 already does
    at 50 agents, so the default run declares the same world as before)."""
    decl = load_declaration(ROOT / "examples" / "crew.toml")
    fanout = max(decl.dampening.max_fanout, collaborators(agents))
    return msgspec.structs.replace(
        decl,
        world=msgspec.structs.replace(decl.world, id=world),
        entities=[*decl.entities, *(EntitySeed(id=f"agent:{a}") for a in agents)],
        edges=[
            *decl.edges,
            *(
                EdgeSeed(
                    id=f"c-{a}",
                    type="collaborates_on",
                    source=f"agent:{a}",
                    target=PILOT,
                )
                for a in agents
            ),
        ],
        dampening=msgspec.structs.replace(decl.dampening, max_fanout=fanout),
    )


def collaborators(agents: list[str]) -> int:
    """Who the phase-replan rule notifies of a write by ada: the extra agents plus the
    example's three collaborators on the pilot (spock, scotty, zora)."""
    return len(agents) + 3


@dataclass
class Propagation:
    first: list[float] = field(default_factory=list)  # PubAck -> first inbox message
    last: list[float] = field(default_factory=list)  # PubAck -> last one it causes
    notes: int = 0
    works: int = 0
    cascades: int = 0


@dataclass
class PubAckWait:
    came: anyio.Event = field(default_factory=anyio.Event)
    at: float = 0.0  # when its callback ran
    data: bytes = b""


async def propagation(url: str, n: int, agents: list[str]) -> Propagation:
    """Latency from an op's PubAck to the first inbox delivery it causes, and to the
    last (when everyone it reaches has heard).

    The PubAck and the inbox messages are timestamped alike, in their subscriptions'
    callbacks (the PubAck comes first on the socket, so its callback runs first), and
    decoded after the op settles (no message for 0.2 s): decoding hundreds of them
    does not delay the timestamps of the later ones."""
    world = f"bench-{uuid.uuid4().hex[:8]}"
    async with worldline.connect(
        url, world=world, agent="ada", request_timeout=60
    ) as w:
        await w.declare(crew_declaration(world, agents))
    nc = await nats.connect(url)
    arrived: list[tuple[float, bytes]] = []

    async def on_msg(msg: Msg) -> None:
        arrived.append((time.perf_counter(), msg.data))

    await nc.subscribe(
        inbox_subject(world, "*"), cb=on_msg, pending_msgs_limit=1_000_000
    )
    waiting: list[PubAckWait] = []  # the op whose PubAck is awaited

    async def on_ack(msg: Msg) -> None:
        if waiting:
            waiting[0].at, waiting[0].data = time.perf_counter(), msg.data
            waiting[0].came.set()

    reply = nc.new_inbox()
    await nc.subscribe(reply, cb=on_ack)
    # Per op: a notification to each collaborator and to book (subscribed to
    # project.phase), plus one work request per collaborator in the first window.
    most = 2 * collaborators(agents) + 1
    result = Propagation()
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
        arrived.clear()
        ack = PubAckWait()
        waiting[:] = [ack]
        await nc.publish(
            ops(world, "ada"),
            encode(op),
            reply=reply,
            headers={api.Header.MSG_ID: op.op_id},
        )
        with anyio.fail_after(10):
            await ack.came.wait()
        assert b'"error"' not in ack.data, ack.data
        acked = ack.at
        deadline = acked + 10
        while time.perf_counter() < deadline:
            await anyio.sleep(0.02)
            if arrived and time.perf_counter() - arrived[-1][0] > 0.2:
                break  # settled: nothing more for 0.2 s
        caused = []
        notes = 0
        for at, data in arrived:
            message = INBOX.decode(data)
            if getattr(message, "cause", None) != op.op_id:
                continue  # an earlier op's, after that op settled
            caused.append(at)
            notes += isinstance(message, Notification)
            result.works += isinstance(message, WorkAssigned)
            if isinstance(message, Notification) and message.depth > 2:
                result.cascades += 1
        result.notes += notes
        if not caused:
            result.cascades += 1  # lost propagation counts as a failure too
            continue
        result.first.append(min(caused) - acked)
        result.last.append(max(caused) - acked)
        if len(caused) > most or notes != collaborators(agents) + 1:
            result.cascades += 1  # too many messages, or someone did not hear
    await nc.close()
    return result


def apply_rates(n: int, agents: list[str]) -> tuple[float, float]:
    """Crew ops applied per second by the materializer core through its LMDB store,
    against raw batched LMDB puts of the same number of same-sized values."""
    with tempfile.TemporaryDirectory() as tmp:
        world = "apply"
        store = Store(Path(tmp) / "m", actor="materializer")
        ops_input = build("materializer").inputs[0]
        decl = crew_declaration(world, agents)
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


def row(label: str, value: str) -> None:
    print(f"{label:<36}{value}")


def ms(p50: float, p99: float) -> str:
    return f"p50 {p50 * 1e3:6.2f} ms  p99 {p99 * 1e3:6.2f} ms"


async def main(
    n: int, agents: list[str], profile: Path | None = None, applies: int = 20_000
) -> Propagation:
    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedNats(Path(tmp) / "nats") as server,
    ):
        procs = start_actor_processes(server.url, Path(tmp) / "data", profile)
        try:
            raw_rate, raw_lat = await raw_bus(server.url, n, 300)
            prop = await propagation(server.url, n, agents)
        finally:
            stop_actor_processes(procs)
    applied, raw_put = apply_rates(applies, agents)
    p50, p99 = pct(prop.first, 0.5), pct(prop.first, 0.99)
    l50, l99 = pct(prop.last, 0.5), pct(prop.last, 0.99)
    r50, r99 = pct(raw_lat, 0.5), pct(raw_lat, 0.99)
    row("agents (extra, collaborators)", f"{len(agents)}, {collaborators(agents)}")
    row("ops measured", f"{len(prop.first)} of {n}")
    row("raw bus publish->consume->ack", ms(r50, r99))
    row("raw bus pipelined", f"{raw_rate:,.0f} msgs/s")
    row("propagation op ack->first inbox", ms(p50, p99))
    row("propagation / raw bus (p50, p99)", f"{p50 / r50:.1f}x  {p99 / r99:.1f}x")
    row("op ack->last inbox (all heard)", ms(l50, l99))
    row("inbox messages", f"{prop.notes} notifications, {prop.works} work requests")
    row("cascade failures", str(prop.cascades))
    row("materializer apply (core + LMDB)", f"{applied:,.0f} ops/s")
    row("raw LMDB batched puts", f"{raw_put:,.0f} puts/s")
    row("apply / raw puts", f"{applied / raw_put:.3f}")
    row("p99 under 10 ms", "yes" if p99 < 0.01 else "NO")
    return prop


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument(
        "--agents", type=int, default=50, help="extra agents collaborating (50)"
    )
    parser.add_argument(
        "--profile", type=Path, default=None, help="cProfile each actor into DIR"
    )
    args = parser.parse_args()
    anyio.run(main, args.ops, agent_names(args.agents), args.profile, backend="asyncio")

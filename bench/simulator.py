"""Simulator index benchmark on real-sized traces: build time, peak memory, size on
disk, load time and ``retrieve()`` latency at 1k, 10k and 100k transitions, beside the
raw cost of embedding one query, measured in the same run.

Run: ``python bench/simulator.py [--sizes 1000 10000 100000] [--samples 200]
[--messages SHARE] [--bus] [--kernel 1000000]`` (``--json``: one JSON object).

``--messages SHARE`` makes that share of the replicas message turns (every transition
of the replica paired as a ``turn``, its texts unchanged, so the rows keep their real
size): real agent traces are message-heavy (53% turns in tau-bench's), and a message
query scores the whole message block, the largest a query reads. ``--bus`` also times
session steps over the bus: an embedded nats-server and ``worldline actor simulator
--index`` in its own process (BLAS pinned as it pins it), one ``sim_start`` with the
query's task and context (its group excluded) and one timed ``sim_step`` (its action:
``tool_calls`` for a call, text for a message; ``best_guess`` so every step answers),
each beside a raw core-NATS request-reply round trip to a trivial responder on the
same server, with a reply as large as the step's, interleaved in the same run so the
machine's load falls on both. ``--kernel N`` times, in process, what grows with the
index: scoring the candidate blocks of an index of ``N`` random unit rows (the same
message share, 40 tools) and picking the best 5, through retrieval's own functions;
embedding the query and reading the 5 transitions back do not grow with ``N`` (the
100k rows above measure them).

The transitions are the real traces in ``tests/data/traces/`` (ToolBench answers and
SWE-agent trajectories, licenses beside them) replicated until there are enough:
replica ``r`` of a file declares lineage ``<file>-r<r>`` and group ``<file>-g<r//4>``
(four trials per group, as a benchmark's trials of one task), and every message but
the system prompt gets the prefix ``[run r]``, so replicas are distinct
conversations (new transition ids, contexts that share only their system prompt, as
real runs of one agent do). Each file goes through ``parse_trace`` and is streamed
into an :class:`~worldline.actors.simulator.builder.IndexBuilder`, as
``worldline sim index`` reads traces; the index is saved, and loaded back from disk
for the queries.

Each query is a stored transition's task, whole context and action, excluding its
own group (as an evaluated episode would), answered from the fit partition. The raw
embed is the cost of embedding that query alone
(:func:`~worldline.actors.simulator.index.query_vector`: the action and the recent
window); "whole prefix" is what embedding task + context + action cost before
(index format 1), for comparison. Each size runs in its own process, so the peak
resident memory printed is that size's (``ru_maxrss``, the whole process).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import msgspec
import numpy as np

from worldline.actors.belief_model.embedding import active
from worldline.actors.extractor.traces import parse_trace
from worldline.actors.simulator import retrieval
from worldline.actors.simulator.builder import IndexBuilder
from worldline.actors.simulator.index import load, query_vector, retrieve, save
from worldline.actors.simulator.partition import PROBES
from worldline.actors.simulator.storage import call_tool

try:
    from worldline.actors.simulator.threads import pin_blas_threads
except ImportError:  # a worldline before issue 26 (measured for comparison)

    def pin_blas_threads(threads: int | None = None) -> int | None:
        del threads
        return None


EVERY_CELL = 1 << 30  # probes: every cell, the exact scan
TRACES = Path(__file__).resolve().parent.parent / "tests" / "data" / "traces"
MB = 1024 * 1024


def originals() -> list[tuple[str, dict[str, Any]]]:
    """The real trace files, parsed once (every file but the licenses)."""
    return [
        (path.name, json.loads(path.read_bytes()))
        for path in sorted(TRACES.glob("*/*"))
        if path.name != "LICENSE"
    ]


def messages_of(doc: dict[str, Any]) -> list[Any]:
    if "history" in doc:
        history: list[Any] = doc["history"]
        return history
    train = doc.get("answer_generation", {}).get("train_messages") or [[]]
    last: list[Any] = train[-1]
    return last


def replica(name: str, doc: dict[str, Any], r: int) -> bytes:
    """Replica ``r`` of one trace file: declared lineage and group, every message
    but the system prompt marked with the run."""
    stem = name.split(".")[0]
    copy = json.loads(json.dumps(doc))
    for message in messages_of(copy):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str) and message.get("role") != "system":
            message["content"] = f"[run {r}] {content}"
    copy["lineage"] = f"{stem}-r{r}"
    copy["group"] = f"{stem}-g{r // 4}"
    return json.dumps(copy).encode()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def as_turn(t: Any) -> Any:
    """The same transition paired as a message turn (its texts unchanged)."""
    return msgspec.structs.replace(t, id=f"{t.id}-turn", pairing="turn")


def measure(
    n: int,
    samples: int,
    messages: float = 0.0,
    bus: bool = False,
    probes: tuple[int, ...] = (),
) -> dict[str, Any]:
    """Build an index of ``n`` replicated real transitions and query it."""
    docs = originals()
    before = rss_mb()
    start = time.perf_counter()
    builder = IndexBuilder(held_out=0.2)
    added = whole = 0
    sources, r = [], 0
    while added < n:
        for name, doc in docs:
            parsed = parse_trace(f"r{r}-{name}", replica(name, doc, r))
            sources.append(f"r{r}-{name}")
            turns = (r * 7919 % 100) < messages * 100  # this replica's kind
            for t in parsed.transitions[: n - added]:
                builder.add(as_turn(t) if turns else t, parsed.groups.get(t.lineage))
                whole += len(t.context.encode())
                added += 1
            if added >= n:
                break
        r += 1
    index = builder.finish(sources=sources)
    built = time.perf_counter() - start
    peak = rss_mb()
    if index.manifest.transitions != n:
        raise SystemExit(f"the index holds {index.manifest.transitions}, not {n}")
    over_bus: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ix"
        save(index, out)
        del builder, index
        files = {p.name: p.stat().st_size for p in out.iterdir()}
        start = time.perf_counter()
        loaded = load(out)
        loading = time.perf_counter() - start
        if bus:
            over_bus = bus_steps(out, loaded, samples)
    pin_blas_threads()  # as the simulator pins it where it starts
    rng = random.Random(11)
    embedder = active()
    cells = "probes" in inspect.signature(retrieve).parameters  # issue 26's cells
    sweep = sorted({PROBES, *probes}) if cells else []
    timings: dict[int, list[float]] = {p: [] for p in [*sweep, EVERY_CELL]}
    got: dict[int, list[set[str]]] = {p: [] for p in timings}
    raw: list[float] = []
    prefix: list[float] = []
    queries: list[dict[str, Any]] = []
    # First the default: each query timed as before cells existed (then its raw
    # embeds); then, in a second pass over the same queries, every other probe
    # count and the exact scan (every cell), so nothing else runs between the
    # default's queries.
    for _ in range(samples):
        t = loaded.transitions[rng.randrange(n)]
        queries.append(
            {
                "task": t.task,
                "context": t.context,
                "action": t.action,
                "exclude_groups": [loaded.group_of(t.lineage)],
                "kind": "message" if t.pairing == "turn" else "tool",
            }
        )
    passes = [PROBES, *(c for c in sweep if c != PROBES), EVERY_CELL]
    if not cells:  # a worldline before cells: one exact pass
        passes = [EVERY_CELL]
    for count in passes:
        options: dict[str, Any] = {"probes": count} if cells else {}
        for query in queries:
            start = time.perf_counter()
            found = retrieve(loaded, **query, **options)
            timings[count].append(time.perf_counter() - start)
            (group,) = query["exclude_groups"]
            if any(loaded.group_of(f.lineage) == group for f, _ in found):
                raise SystemExit(f"retrieved from the excluded group {group}")
            got[count].append({f.id for f, _ in found})
            if count == passes[0]:
                start = time.perf_counter()
                query_vector(query["context"], query["action"], embedder)
                raw.append(time.perf_counter() - start)
                start = time.perf_counter()
                embedder.embed(
                    "\n".join((query["task"], query["context"], query["action"]))
                )
                prefix.append(time.perf_counter() - start)
    wanted = sum(map(len, got[EVERY_CELL]))
    hits = {
        count: sum(map(len, map(set.intersection, got[count], got[EVERY_CELL])))
        for count in sweep
    }
    return {
        "n": n,
        "build_s": built,
        "rss_before_mb": before,
        "rss_peak_mb": peak,
        "disk_mb": sum(files.values()) / MB,
        "contexts_mb": files["contexts.jsonl"] / MB,
        "whole_contexts_mb": whole / MB,
        "load_s": loading,
        "p50_ms": pct(timings[PROBES if cells else EVERY_CELL], 0.5) * 1e3,
        "p95_ms": pct(timings[PROBES if cells else EVERY_CELL], 0.95) * 1e3,
        **(
            {
                "exact_p50_ms": pct(timings[EVERY_CELL], 0.5) * 1e3,
                "exact_p95_ms": pct(timings[EVERY_CELL], 0.95) * 1e3,
                "recall_at_5": hits[PROBES] / max(1, wanted),
                "cells": sum(len(e) - 1 for e in loaded.manifest.partitions),
                "sweep": [
                    {
                        "probes": count,
                        "p50_ms": pct(timings[count], 0.5) * 1e3,
                        "p95_ms": pct(timings[count], 0.95) * 1e3,
                        "recall_at_5": hits[count] / max(1, wanted),
                    }
                    for count in sweep
                ],
            }
            if cells
            else {}
        ),
        "raw_ms": pct(raw, 0.5) * 1e3,
        "prefix_ms": pct(prefix, 0.5) * 1e3,
        "message_share": sum(r.pairing == "turn" for r in loaded.rows) / n,
        **over_bus,
    }


# --- over the bus ----------------------------------------------------------------

WARMUP = 10
_CALL = re.compile(r"\s*([A-Za-z_][\w.\-]*)\((.*)\)\s*\Z", re.DOTALL)


def step_message(t: Any, n: int) -> str | dict[str, Any]:
    """A transition's action as a session step: ``tool_calls`` for a tool result's
    call (when its arguments are JSON), else assistant text."""
    match = _CALL.match(t.action) if t.pairing != "turn" else None
    if match and call_tool(t.action):
        try:
            json.loads(match.group(2))
        except ValueError:
            return str(t.action)
        function = {"name": match.group(1), "arguments": match.group(2)}
        call = {"id": f"call_{n}", "type": "function", "function": function}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return str(t.action)


async def _bus(url: str, index: Any, samples: int) -> dict[str, float]:
    """Session steps and raw round trips, interleaved (see the module docstring)."""
    import nats

    import worldline
    from worldline.protocols.messages import encode

    rng = random.Random(12)
    picks = [
        index.transitions[rng.randrange(len(index.rows))]
        for _ in range(WARMUP + samples)
    ]
    steps: list[float] = []
    rtts: list[float] = []
    sizes: list[int] = []
    ungrounded = 0
    async with worldline.connect(url, world="bench", agent="bench") as w:
        # A worldline before issue 26 has no best guesses: it always answers.
        guess = (
            {"best_guess": True}
            if "best_guess" in inspect.signature(w.sim_step).parameters
            else {}
        )
        for _ in range(600):  # the simulator loads its index, then answers
            try:
                await w.sim_end((await w.sim_start("ready?")).session_id)
                break
            except Exception:  # not answering yet
                await anyio.sleep(0.2)
        nc = await nats.connect(url, name="bench-simulator-echo")
        reply = b"x"

        async def answer(msg: Any) -> None:
            await msg.respond(reply)

        subject = f"bench.echo.{os.getpid()}"
        await nc.subscribe(subject, cb=answer)
        try:
            for n, t in enumerate(picks):
                group = index.group_of(t.lineage)
                started = await w.sim_start(
                    t.task, context=t.context, exclude_lineages=[group]
                )
                message = step_message(t, n)
                if n == WARMUP:  # the raw reply as large as a step's
                    reply = os.urandom(int(pct([float(x) for x in sizes], 0.5)))
                start = time.perf_counter()
                got = await w.sim_step(started.session_id, message, **guess)
                took = time.perf_counter() - start
                with contextlib.suppress(worldline.SimulationError):  # ended
                    await w.sim_end(started.session_id)
                sizes.append(len(encode(got)))
                asked = os.urandom(len(json.dumps(message)))  # about the step's size
                start = time.perf_counter()
                await nc.request(subject, asked, timeout=5)
                rtt = time.perf_counter() - start
                if n >= WARMUP:
                    steps.append(took)
                    rtts.append(rtt)
                    ungrounded += not getattr(got, "grounded", True)
        finally:
            await nc.close()
    return {
        "bus_p50_ms": pct(steps, 0.5) * 1e3,
        "bus_p95_ms": pct(steps, 0.95) * 1e3,
        "rtt_p50_ms": pct(rtts, 0.5) * 1e3,
        "rtt_p95_ms": pct(rtts, 0.95) * 1e3,
        "reply_bytes": pct([float(x) for x in sizes], 0.5),
        "ungrounded": ungrounded / max(1, len(steps)),
    }


def bus_steps(out: Path, index: Any, samples: int) -> dict[str, float]:
    """The simulator in its own process on an embedded nats-server, asked."""
    from pipeline import stop_actor_processes  # bench/ scripts import by name

    from worldline.actors.runtime.embedded import EmbeddedNats

    env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_LLM_")}
    with (
        tempfile.TemporaryDirectory(prefix="wl-simbench-") as tmp,
        EmbeddedNats(Path(tmp) / "nats") as server,
    ):
        cmd = [sys.executable, "-m", "worldline.cli", "actor", "simulator"]
        cmd += ["--nats", server.url, "--data", str(Path(tmp) / "data")]
        cmd += ["--index", str(out)]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        try:
            return anyio.run(_bus, server.url, index, samples)
        finally:
            stop_actor_processes([proc])


# --- the kernel at 1M, in process ------------------------------------------------


def _draw(topics: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` unit rows, each a random topic plus noise (cosine about 0.6 to it)."""
    noise = rng.standard_normal((size, topics.shape[1]), dtype=np.float32) * 0.08
    block = topics[rng.integers(len(topics), size=size)] + noise
    out: np.ndarray = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def _clustered(
    n: int, dims: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` unit rows around ``n // 500`` random topics, filled in chunks, and
    the topics: text embeddings are clustered, random unit rows are not, and an
    approximate search is only worth measuring on the former."""
    topics = rng.standard_normal((max(1, n // 500), dims), dtype=np.float32)
    topics /= np.linalg.norm(topics, axis=1, keepdims=True)
    vectors = np.empty((n, dims), dtype=np.float32)
    for a in range(0, n, 65536):
        vectors[a : min(n, a + 65536)] = _draw(topics, min(n, a + 65536) - a, rng)
    return vectors, topics


def _partitioned(vectors: np.ndarray, blocks: list[tuple[int, int]]) -> Any:
    """Cut each block into cells as ``sim index`` does (``partition.py``), its rows
    reordered by cell in place; the cells as retrieval reads them."""
    from worldline.actors.simulator.partition import Cells, cells_of

    bounds, centroids = [], []
    for a, b in blocks:

        def rows(at: np.ndarray, a: int = a) -> np.ndarray:
            picked: np.ndarray = vectors[a + at]
            return picked

        cell, fitted = cells_of(rows, b - a)
        if len(fitted):
            by_cell = np.argsort(cell, kind="stable")
            vectors[a:b] = vectors[a:b][by_cell]
            edges = np.flatnonzero(np.diff(cell[by_cell])) + 1
            bounds.append([a, *(a + edges).tolist(), b])
            centroids.append(fitted)
    return Cells.of(bounds, np.concatenate(centroids))


def kernel(
    n: int, samples: int, messages: float, probes: tuple[int, ...] = ()
) -> dict[str, Any]:
    """Score and pick through retrieval's own functions on ``n`` clustered unit
    rows laid out as an index is (tools first, 40 of them, then the message
    turns; each block cut into cells), probed and exact, in turn."""
    rng = np.random.default_rng(5)
    dims = active().dimensions
    vectors, topics = _clustered(n, dims, rng)
    first_turn = int(n * (1 - messages))
    edges = np.linspace(0, first_turn, 41).astype(int)
    tools = {f"tool{i}": (int(edges[i]), int(edges[i + 1])) for i in range(40)}
    start = time.perf_counter()
    cells = _partitioned(vectors, [*tools.values(), (first_turn, n)])
    cutting = time.perf_counter() - start
    index = SimpleNamespace(
        vectors=vectors,
        _spans={"tool": (0, first_turn), "message": (first_turn, n)},
        _tools=tools,
        _commands={},
        _row_lineage=(np.arange(n) // 8).astype(np.int32),
        _rank=rng.permutation(n).astype(np.int64),  # ids in no order of the rows
        _cells=cells,
    )
    ok = np.ones(n // 8 + 1, dtype=bool)
    ok[: n // 800] = False  # a few lineages excluded, as an episode's own are
    out: dict[str, Any] = {
        "kernel_n": n,
        "kernel_message_share": messages,
        "kernel_cells": len(cells.lo),
        "kernel_cut_s": cutting,
    }
    for threads in (1, os.cpu_count() or 1):
        pin_blas_threads(threads)
        # Other probe counts with one thread only (the query path's).
        counts = sorted({PROBES, *(probes if threads == 1 else ())})
        timings: dict[tuple[int, bool], list[float]] = {
            (p, m): [] for p in (*counts, EVERY_CELL) for m in (False, True)
        }
        hits = dict.fromkeys(counts, 0)
        wanted = 0
        for k in range(samples):
            query = _draw(topics, 1, rng)[0].astype(np.float32)  # a new row
            message = rng.random() < messages
            action = "" if message else f"tool{k % 40}({{}})"
            found = {}
            for count in [*counts, EVERY_CELL][:: 1 if k % 2 else -1]:
                start = time.perf_counter()
                found[count] = retrieval._ranked(
                    index,  # type: ignore[arg-type]
                    query,
                    ok,
                    "message" if message else "tool",
                    action,
                    5,
                    count,
                )
                timings[count, message].append(time.perf_counter() - start)
            for count in counts:
                hits[count] += len(set(found[count]) & set(found[EVERY_CELL]))
            wanted += len(found[EVERY_CELL])
        for name, count in (("", PROBES), ("_exact", EVERY_CELL)):
            for kind, message in (("", True), ("_tool", False)):
                took = timings[count, message]
                if took:
                    out[f"kernel{name}{kind}_p50_ms_{threads}t"] = pct(took, 0.5) * 1e3
                    out[f"kernel{name}{kind}_p95_ms_{threads}t"] = pct(took, 0.95) * 1e3
        out[f"kernel_recall_{threads}t"] = hits[PROBES] / max(1, wanted)
        if threads == 1:
            out["kernel_sweep"] = [
                {
                    "probes": count,
                    "p50_ms": pct(timings[count, True], 0.5) * 1e3,
                    "p95_ms": pct(timings[count, True], 0.95) * 1e3,
                    "recall_at_5": hits[count] / max(1, wanted),
                }
                for count in counts
                if timings[count, True]
            ]
    pin_blas_threads()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 10000, 100000])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument(
        "--messages", type=float, default=0.0, help="share of replicas as turns"
    )
    parser.add_argument(
        "--bus", action="store_true", help="also session steps over the bus"
    )
    parser.add_argument(
        "--kernel", type=int, nargs="*", default=[], help="scoring alone at N rows"
    )
    parser.add_argument(
        "--probes",
        type=int,
        nargs="*",
        default=[],
        help=f"also these probe counts, in process (default {PROBES} always)",
    )
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--one-kernel", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object (times in s, ms)"
    )
    args = parser.parse_args()
    if args.one:
        found = measure(
            args.one, args.samples, args.messages, args.bus, tuple(args.probes)
        )
        print(json.dumps(found))
        return
    if args.one_kernel:
        found = kernel(args.one_kernel, args.samples, args.messages, tuple(args.probes))
        print(json.dumps(found))
        return
    if not args.json:
        print(
            f"embedder {active().id}, {args.samples} queries per size, "
            f"{args.messages:.0%} of replicas message turns"
        )
    rows = []
    options = ["--samples", str(args.samples), "--messages", str(args.messages)]
    options += ["--probes", *map(str, args.probes)]
    for n in args.kernel:
        child = subprocess.run(
            [sys.executable, __file__, "--one-kernel", str(n), *options],
            check=True,
            capture_output=True,
            text=True,
        )
        m = json.loads(child.stdout)
        rows.append(m)
        if args.json:
            continue
        print(
            f"{n:>7} rows ({m['kernel_cells']} cells, cut in"
            f" {m['kernel_cut_s']:.0f} s), scoring and picking alone (in process),"
            f" {PROBES} cells probed (every cell: the exact scan):",
            flush=True,
        )
        for t in sorted({1, os.cpu_count() or 1}):
            print(
                f"{'':>7} {t} BLAS thread(s), message queries:"
                f" p50 {m.get(f'kernel_p50_ms_{t}t', 0):6.2f} ms"
                f" p95 {m.get(f'kernel_p95_ms_{t}t', 0):6.2f} ms"
                f" (exact p50 {m.get(f'kernel_exact_p50_ms_{t}t', 0):6.2f} ms"
                f" p95 {m.get(f'kernel_exact_p95_ms_{t}t', 0):6.2f} ms);"
                f" tool queries: p50 {m.get(f'kernel_tool_p50_ms_{t}t', 0):6.2f} ms"
                f" p95 {m.get(f'kernel_tool_p95_ms_{t}t', 0):6.2f} ms"
                f" (exact p50 {m.get(f'kernel_exact_tool_p50_ms_{t}t', 0):6.2f} ms"
                f" p95 {m.get(f'kernel_exact_tool_p95_ms_{t}t', 0):6.2f} ms);"
                f" recall@5 {m[f'kernel_recall_{t}t']:.3f}",
                flush=True,
            )
        for row in m["kernel_sweep"] if len(m["kernel_sweep"]) > 1 else []:
            print(
                f"{'':>7} {row['probes']:>4} cells probed, 1 BLAS thread, message"
                f" queries: p50 {row['p50_ms']:6.2f} ms p95 {row['p95_ms']:6.2f} ms,"
                f" recall@5 {row['recall_at_5']:.3f}",
                flush=True,
            )
    for n in args.sizes:
        bus = ["--bus"] if args.bus else []
        child = subprocess.run(
            [sys.executable, __file__, "--one", str(n), *options, *bus],
            check=True,
            capture_output=True,
            text=True,
        )
        m = json.loads(child.stdout)
        if args.json:
            rows.append(m)
            continue
        exact = (
            f" (exact scan p50 {m['exact_p50_ms']:5.2f} ms"
            f" p95 {m['exact_p95_ms']:5.2f} ms; {m['cells']} cells,"
            f" recall@5 {m['recall_at_5']:.3f})"
            if "recall_at_5" in m
            else ""
        )
        print(
            f"{n:>7} transitions  build {m['build_s']:6.1f} s"
            f"  peak RSS {m['rss_peak_mb']:6.0f} MB"
            f" (before build {m['rss_before_mb']:.0f})"
            f"  disk {m['disk_mb']:6.1f} MB (contexts {m['contexts_mb']:.1f};"
            f" every context whole: {m['whole_contexts_mb']:,.0f})"
            f"  load {m['load_s']:5.2f} s"
            f"  retrieve p50 {m['p50_ms']:5.2f} ms p95 {m['p95_ms']:5.2f} ms"
            f"{exact}"
            f"  raw embed p50 {m['raw_ms']:5.2f} ms"
            f" (whole prefix {m['prefix_ms']:5.2f} ms)"
            f"  messages {m['message_share']:.0%}",
            flush=True,
        )
        for row in m.get("sweep", []) if len(m.get("sweep", [])) > 1 else []:
            print(
                f"{'':>7} {row['probes']:>4} cells probed: retrieve"
                f" p50 {row['p50_ms']:5.2f} ms p95 {row['p95_ms']:5.2f} ms,"
                f" recall@5 {row['recall_at_5']:.3f}",
                flush=True,
            )
        if "bus_p50_ms" in m:
            print(
                f"{'':>7} over the bus: sim_step p50 {m['bus_p50_ms']:5.2f} ms"
                f" p95 {m['bus_p95_ms']:5.2f} ms; raw request-reply"
                f" ({m['reply_bytes']:,.0f} B replies) p50 {m['rtt_p50_ms']:5.2f} ms"
                f" p95 {m['rtt_p95_ms']:5.2f} ms; step / raw"
                f" p50 {m['bus_p50_ms'] / m['rtt_p50_ms']:4.1f}x"
                f" p95 {m['bus_p95_ms'] / m['rtt_p95_ms']:4.1f}x;"
                f" best guesses below the floor {m['ungrounded']:.0%}",
                flush=True,
            )
    if args.json:
        sizes = [r for r in rows if "n" in r]
        kernels = [r for r in rows if "kernel_n" in r]
        out = {"embedder": active().id, "samples": args.samples, "sizes": sizes}
        if kernels:
            out["kernels"] = kernels
        print(json.dumps(out))


if __name__ == "__main__":
    main()

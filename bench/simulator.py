"""Simulator index benchmark on real-sized traces: build time, peak memory, size on
disk, load time and ``retrieve()`` latency at 1k, 10k and 100k transitions, beside the
raw cost of embedding one query, measured in the same run.

Run: ``python bench/simulator.py [--sizes 1000 10000 100000] [--samples 200]``
(``--json``: one JSON object).

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
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from worldline.actors.belief_model.embedding import active
from worldline.actors.extractor.traces import parse_trace
from worldline.actors.simulator.builder import IndexBuilder
from worldline.actors.simulator.index import load, query_vector, retrieve, save

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


def measure(n: int, samples: int) -> dict[str, float]:
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
            for t in parsed.transitions[: n - added]:
                builder.add(t, parsed.groups.get(t.lineage))
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
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ix"
        save(index, out)
        files = {p.name: p.stat().st_size for p in out.iterdir()}
        start = time.perf_counter()
        loaded = load(out)
        loading = time.perf_counter() - start
    rng = random.Random(11)
    embedder = active()
    timings, raw, prefix = [], [], []
    for _ in range(samples):
        t = loaded.transitions[rng.randrange(n)]
        group = loaded.group_of(t.lineage)
        start = time.perf_counter()
        found = retrieve(
            loaded,
            task=t.task,
            context=t.context,
            action=t.action,
            exclude_groups=[group],
        )
        timings.append(time.perf_counter() - start)
        if any(loaded.group_of(f.lineage) == group for f, _ in found):
            raise SystemExit(f"retrieved from the excluded group {group}")
        start = time.perf_counter()
        query_vector(t.context, t.action, embedder)
        raw.append(time.perf_counter() - start)
        start = time.perf_counter()
        embedder.embed("\n".join((t.task, t.context, t.action)))
        prefix.append(time.perf_counter() - start)
    return {
        "n": n,
        "build_s": built,
        "rss_before_mb": before,
        "rss_peak_mb": peak,
        "disk_mb": sum(files.values()) / MB,
        "contexts_mb": files["contexts.jsonl"] / MB,
        "whole_contexts_mb": whole / MB,
        "load_s": loading,
        "p50_ms": pct(timings, 0.5) * 1e3,
        "p95_ms": pct(timings, 0.95) * 1e3,
        "raw_ms": pct(raw, 0.5) * 1e3,
        "prefix_ms": pct(prefix, 0.5) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object (times in s, ms)"
    )
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.samples)))
        return
    if not args.json:
        print(f"embedder {active().id}, {args.samples} queries per size")
    rows = []
    for n in args.sizes:
        child = subprocess.run(
            [sys.executable, __file__, "--one", str(n), "--samples", str(args.samples)],
            check=True,
            capture_output=True,
            text=True,
        )
        m = json.loads(child.stdout)
        if args.json:
            rows.append(m)
            continue
        print(
            f"{n:>7} transitions  build {m['build_s']:6.1f} s"
            f"  peak RSS {m['rss_peak_mb']:6.0f} MB"
            f" (before build {m['rss_before_mb']:.0f})"
            f"  disk {m['disk_mb']:6.1f} MB (contexts {m['contexts_mb']:.1f};"
            f" every context whole: {m['whole_contexts_mb']:,.0f})"
            f"  load {m['load_s']:5.2f} s"
            f"  retrieve p50 {m['p50_ms']:5.2f} ms p95 {m['p95_ms']:5.2f} ms"
            f"  raw embed p50 {m['raw_ms']:5.2f} ms"
            f" (whole prefix {m['prefix_ms']:5.2f} ms)",
            flush=True,
        )
    if args.json:
        out = {"embedder": active().id, "samples": args.samples, "sizes": rows}
        print(json.dumps(out))


if __name__ == "__main__":
    main()

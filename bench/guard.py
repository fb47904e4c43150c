"""Regression guard: short runs of the pipeline, worldview and simulator benchmarks,
each figure divided by a raw baseline measured in the same run, compared with the
committed ratios in ``bench/baseline.json``.

Run: ``python bench/guard.py [--rounds 3] [--json] [--update-baseline] [--write-docs]``.

Each round runs ``bench/pipeline.py --json`` (small counts), ``bench/worldview.py
--json`` and ``bench/simulator.py --json`` as subprocesses, and raw LMDB batched puts
in this process; a metric's reading is the best of the rounds (the machines are
shared: load only ever makes a round look worse). A metric regresses when its reading
is worse than its baseline by more than its margin ``m``: a throughput-like ratio
(higher is better) below ``baseline * (1 - m)``, a cost-like ratio (lower is better)
above ``baseline / (1 - m)``; either way the work may take up to ``1 / (1 - m)`` times
as long as it did, relative to its raw baseline, before the guard fails. Faster never
fails. A metric past its limit gets up to ``--retries`` more rounds of its bench
before it counts (a real regression shows in every round, a burst of load passes).

Ratios of CPU time are judged whatever the load. Ratios of wall-clock times need one
round on a machine that had a core to spare: around each bench this process times a
busy loop, and a loop that took more than ``BUSY`` times its CPU time marks the round
busy (other processes wanted the cores). A wall-clock metric past its limit with busy
rounds alone is reported ``busy``, not failed.

Exit status 1 when a metric regressed or could not be read, 0 otherwise.
``--update-baseline`` rewrites the baseline file from this run (margins kept);
``--write-docs`` rewrites the current table in ``docs/benchmarks.md`` (between the
``guard:current`` markers) and moves the table it replaces to the top of the history
below it. What each ratio is, the margins and why: ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import lmdb

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

__all__ = [
    "METRICS",
    "Metric",
    "Reading",
    "Row",
    "best",
    "compare",
    "limit_of",
    "main",
    "regressed",
    "rotate_docs",
    "typical",
]

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
BASELINE = BENCH / "baseline.json"
DOCS = ROOT / "docs" / "benchmarks.md"
COMMAND = "python bench/guard.py"
UPDATE_COMMAND = "python bench/guard.py --update-baseline --write-docs"
CURRENT_START = "<!-- guard:current:start -->"
CURRENT_END = "<!-- guard:current:end -->"
HISTORY_START = "<!-- guard:history:start -->"
HISTORY_END = "<!-- guard:history:end -->"

# The short runs: about 20 s a round on an idle 2-core machine, each figure long
# enough not to be mostly start-up.
PIPELINE_ARGS = (
    *("--ops", "10000", "--apply-ops", "5000"),
    *("--replay-ops", "200", "--latency-ops", "10"),
)
# Synthetic text: the real one needs the books file, which is built, not committed.
WORLDVIEW_ARGS = (
    *("--text", "synthetic", "--sizes", "10000"),
    *("--samples", "100", "--warmup", "10"),
)
SIMULATOR_ARGS = ("--sizes", "10000", "--samples", "200")
# Raw LMDB batched puts: values of the ops' size, in the actors' batch.
LMDB_PUTS, LMDB_VALUE, LMDB_BATCH = 50_000, 236, 256
# A round is busy when a busy loop here took more than this times its CPU time.
BUSY = 1.5

Better = Literal["higher", "lower"]
Status = Literal["ok", "REGRESSED", "MISSING", "busy", "new"]


@dataclass(frozen=True)
class Metric:
    """One ratio the guard holds: a figure over a raw baseline of the same run."""

    name: str
    better: Better
    margin: float  # the default; the baseline file's margin wins
    wall: bool  # wall-clock: judged on a round that was not busy
    what: str  # the figure, then the raw baseline it is divided by
    figure_unit: str
    raw_unit: str


METRICS: tuple[Metric, ...] = (
    Metric(
        "pipeline.e2e/lean",
        "higher",
        0.5,
        True,
        "(b) op->projector applied over (a') raw bus publish->consumed with the "
        "actors' pull",
        "ops/s",
        "msgs/s",
    ),
    Metric(
        "pipeline.cpu/raw",
        "lower",
        0.3,
        False,
        "(b) CPU time of every process per op over (a) CPU time of the raw bus "
        "(server + client) per message",
        "µs/op",
        "µs/msg",
    ),
    Metric(
        "pipeline.fusion/lmdb",
        "higher",
        0.3,
        False,
        "(d) fusion core + LMDB, ops per CPU second, over raw LMDB batched puts per "
        "CPU second",
        "ops/CPU s",
        "puts/CPU s",
    ),
    Metric(
        "pipeline.materializer/lmdb",
        "higher",
        0.3,
        False,
        "(d) the materializer's core, the same way",
        "ops/CPU s",
        "puts/CPU s",
    ),
    Metric(
        "pipeline.projector/lmdb",
        "higher",
        0.3,
        False,
        "(d) the projector's core, the same way",
        "ops/CPU s",
        "puts/CPU s",
    ),
    Metric(
        "worldview.core.cpu/get",
        "lower",
        0.3,
        False,
        "before() CPU time p50 at 10k beliefs (core.serve, what the before RPC "
        "answers with) over a raw LMDB get of one belief (p50)",
        "ms CPU",
        "µs",
    ),
    Metric(
        "worldview.core.p95/get",
        "lower",
        0.6,
        True,
        "before() p95 at 10k beliefs (core) over the same raw get",
        "ms",
        "µs",
    ),
    Metric(
        "worldview.decision.cpu/get",
        "lower",
        0.3,
        False,
        "before() CPU time p50 at 10k beliefs (decision.before, issue 24's read "
        "path) over a raw LMDB get of one belief (p50)",
        "ms CPU",
        "µs",
    ),
    Metric(
        "worldview.decision.p95/get",
        "lower",
        0.6,
        True,
        "before() p95 at 10k beliefs (decision) over the same raw get",
        "ms",
        "µs",
    ),
    Metric(
        "simulator.p50/embed",
        "lower",
        0.3,
        False,
        "retrieve() p50 at 10k transitions over embedding the query alone (p50)",
        "ms",
        "ms",
    ),
    Metric(
        "simulator.p95/embed",
        "lower",
        0.75,
        True,
        "retrieve() p95 at 10k transitions over the same raw embed",
        "ms",
        "ms",
    ),
)
BY_NAME = {m.name: m for m in METRICS}
BENCHES = ("pipeline", "worldview", "simulator")


@dataclass(frozen=True)
class Reading:
    """A metric in one round: the ratio, the two figures it divides, and whether the
    machine was busy around that round (wall-clock metrics only; of a best reading:
    whether every round was)."""

    ratio: float
    figure: float
    raw: float
    busy: bool = False


def reading(figure: float, raw: float, scale: float = 1.0) -> Reading:
    """``figure`` over ``raw``; ``scale`` brings them to one unit (ms over µs: 1000)."""
    return Reading(figure * scale / raw, figure, raw)


# --- the pure part: best of the rounds, the comparison, the docs -------------------


def best(better: Better, readings: Sequence[Reading]) -> Reading:
    """The round that did best on this metric (busy, as the result, when every round
    was: one quiet round that misses the limit is enough to judge)."""
    pick = max if better == "higher" else min
    top = pick(readings, key=lambda r: r.ratio)
    return replace(top, busy=all(r.busy for r in readings))


def typical(readings: Sequence[Reading]) -> float:
    """The median ratio, of the rounds that were not busy if there are any: what a
    baseline is set to, so that a check's best round is compared with a typical one,
    not with the luckiest round of the run that set it."""
    return statistics.median(
        r.ratio for r in ([r for r in readings if not r.busy] or readings)
    )


def limit_of(better: Better, baseline: float, margin: float) -> float:
    """The worst ratio still accepted: the floor, or for a cost the ceiling."""
    if not 0 <= margin < 1:
        raise ValueError(f"a margin is a fraction in [0, 1), not {margin}")
    return baseline * (1 - margin) if better == "higher" else baseline / (1 - margin)


@dataclass(frozen=True)
class Row:
    """One line of the comparison."""

    metric: str
    better: Better
    margin: float
    baseline: float | None  # None: not in the baseline file yet (new)
    now: float | None  # None: this run could not read it
    limit: float | None
    status: Status

    @property
    def failed(self) -> bool:
        return self.status in ("REGRESSED", "MISSING")


def compare(
    baseline: Mapping[str, Mapping[str, Any]],
    now: Mapping[str, float],
    busy: Collection[str] = (),
) -> list[Row]:
    """Each metric of ``baseline`` (name -> {"ratio", "margin", "better"}) against this
    run's ratios ``now``: REGRESSED past its limit, or ``busy`` if its reading came
    from a busy round only (named in ``busy``: not judged); MISSING if this run has no
    reading. A metric only this run has is "new" (not compared)."""
    rows = []
    for name, base in baseline.items():
        better: Better = base["better"]
        margin = float(base["margin"])
        ratio = float(base["ratio"])
        limit = limit_of(better, ratio, margin)
        value = now.get(name)
        status: Status = "ok"
        if value is None:
            status = "MISSING"
        elif (value < limit) if better == "higher" else (value > limit):
            status = "busy" if name in busy else "REGRESSED"
        rows.append(Row(name, better, margin, ratio, value, limit, status))
    for name, value in now.items():
        if name not in baseline:
            metric = BY_NAME.get(name)
            better = metric.better if metric else "higher"
            margin = metric.margin if metric else 0.0
            rows.append(Row(name, better, margin, None, value, None, "new"))
    return rows


def regressed(rows: Sequence[Row]) -> list[str]:
    """The metrics that fail the guard."""
    return [row.metric for row in rows if row.failed]


def rotate_docs(text: str, table: str) -> str:
    """``text`` with ``table`` between the current markers and the table it replaces
    (if any) moved to the top of the history, so no earlier table is lost."""
    for marker in (CURRENT_START, CURRENT_END, HISTORY_START, HISTORY_END):
        if text.count(marker) != 1:
            raise ValueError(f"{marker} must appear exactly once in the docs")
    head, rest = text.split(CURRENT_START)
    previous, rest = rest.split(CURRENT_END)
    middle, rest = rest.split(HISTORY_START)
    history, tail = rest.split(HISTORY_END)
    kept = "\n\n".join(part for part in (previous.strip(), history.strip()) if part)
    return (
        f"{head}{CURRENT_START}\n{table.strip()}\n{CURRENT_END}{middle}"
        f"{HISTORY_START}\n{kept + chr(10) if kept else ''}{HISTORY_END}{tail}"
    )


# --- measuring ----------------------------------------------------------------------


def run_json(script: str, args: Sequence[str]) -> dict[str, Any]:
    """Run ``bench/<script> <args> --json``; the JSON object it prints last."""
    env = {**os.environ, "WORLDLINE_EMBEDDER": "hashing"}  # the built-in embedder
    cmd = [sys.executable, str(BENCH / script), *args, "--json"]
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=900, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"guard: {' '.join(cmd[1:])} failed ({done.returncode})")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def stretch(cpu_seconds: float = 0.05) -> float:
    """Wall time over CPU time of a busy loop in this thread: about 1 when a core is
    free, about n / cores when n processes want to run."""
    start, cpu = time.perf_counter(), time.thread_time()
    while time.thread_time() - cpu < cpu_seconds:
        pass
    return (time.perf_counter() - start) / (time.thread_time() - cpu)


def raw_lmdb_cpu() -> float:
    """Raw LMDB batched puts per CPU second of this thread (best of three). Without
    fsync: a commit's fsync charges the thread kernel time that follows the disk's
    state, not the code (with it, this rate varied 1.6x between runs under load;
    without, 1.1x); in the cores' apply it is under 1 us of an op's tens."""
    value = os.urandom(LMDB_VALUE)
    rates = []
    with tempfile.TemporaryDirectory(prefix="wl-guard-") as tmp:
        for attempt in range(3):
            path = str(Path(tmp) / f"raw{attempt}")
            env = lmdb.open(path, map_size=1 << 30, sync=False)
            start = time.thread_time()
            for chunk in range(0, LMDB_PUTS, LMDB_BATCH):
                with env.begin(write=True) as txn:
                    for i in range(chunk, min(LMDB_PUTS, chunk + LMDB_BATCH)):
                        txn.put(f"k{i:09d}".encode(), value)
            rates.append(LMDB_PUTS / (time.thread_time() - start))
            env.close()
    return max(rates)


def pipeline_readings(r: Mapping[str, Any], lmdb_rate: float) -> dict[str, Reading]:
    out = {"pipeline.e2e/lean": reading(r["e2e"], r["raw_pipeline_lean"])}
    if r.get("cpu") and r.get("raw_cpu"):  # from /proc: Linux only
        per_op = sum(r["cpu"].values()) / r["ops"] * 1e6
        per_msg = sum(r["raw_cpu"].values()) / r["ops"] * 1e6
        out["pipeline.cpu/raw"] = reading(per_op, per_msg)
    for actor in ("fusion", "materializer", "projector"):
        if actor in r.get("apply_cpu", {}):
            out[f"pipeline.{actor}/lmdb"] = reading(r["apply_cpu"][actor], lmdb_rate)
    return out


def worldview_readings(r: Mapping[str, Any]) -> dict[str, Reading]:
    size = max(r["sizes"], key=lambda s: s["n"])
    out = {}
    for name, h in size["handlers"].items():
        raw = size["raw_us"]
        out[f"worldview.{name}.cpu/get"] = reading(h["cpu_p50_ms"], raw, 1000)
        out[f"worldview.{name}.p95/get"] = reading(h["p95_ms"], raw, 1000)
    return out


def simulator_readings(r: Mapping[str, Any]) -> dict[str, Reading]:
    size = max(r["sizes"], key=lambda s: s["n"])
    return {
        "simulator.p50/embed": reading(size["p50_ms"], size["raw_ms"]),
        "simulator.p95/embed": reading(size["p95_ms"], size["raw_ms"]),
    }


@dataclass
class Run:
    """Every round's readings, by metric."""

    rounds: int  # the rounds every bench ran
    readings: dict[str, list[Reading]] = field(default_factory=dict)
    stretches: dict[str, list[float]] = field(default_factory=dict)  # by bench
    retried: list[str] = field(default_factory=list)  # benches run once more
    seconds: float = 0.0
    load: tuple[float, float, float] | None = None

    def add(self, found: Mapping[str, Reading]) -> None:
        for name, value in found.items():
            self.readings.setdefault(name, []).append(value)

    def best(self) -> dict[str, Reading]:
        return {
            name: best(BY_NAME[name].better, values)
            for name, values in self.readings.items()
        }

    def describe(self) -> str:
        """The rounds each bench ran: "best of 3 rounds (4 of simulator, retried)"."""
        more = [
            f"{self.rounds + self.retried.count(b)} of {b}"
            for b in dict.fromkeys(self.retried)
        ]
        extra = f" ({', '.join(more)}, retried)" if more else ""
        rounds = "round" if self.rounds == 1 else "rounds"
        return f"best of {self.rounds} {rounds}{extra}"


def one_bench(run: Run, bench: str) -> None:
    """Run ``bench`` once, between two busy-loop probes; add its readings."""
    before = stretch()
    if bench == "pipeline":
        lmdb_rate = raw_lmdb_cpu()
        found = pipeline_readings(run_json("pipeline.py", PIPELINE_ARGS), lmdb_rate)
    elif bench == "worldview":
        found = worldview_readings(run_json("worldview.py", WORLDVIEW_ARGS))
    else:
        found = simulator_readings(run_json("simulator.py", SIMULATOR_ARGS))
    worst = max(before, stretch())
    run.stretches.setdefault(bench, []).append(worst)
    busy = worst > BUSY
    run.add(
        {
            name: Reading(r.ratio, r.figure, r.raw, busy and BY_NAME[name].wall)
            for name, r in found.items()
        }
    )


def measure(
    run: Run, rounds: int, benches: Sequence[str], say: Callable[[str], None]
) -> None:
    """``rounds`` rounds of ``benches``, interleaved (a passing burst of load then
    spoils one round of each, not every round of one)."""
    for n in range(1, rounds + 1):
        start = time.perf_counter()
        for bench in benches:
            one_bench(run, bench)
        run.seconds += time.perf_counter() - start
        probes = ", ".join(f"{b} {run.stretches[b][-1]:.1f}" for b in benches)
        say(f"round {n}/{rounds}: {run.seconds:.0f} s so far (busy loop x {probes})")


def judged(
    run: Run, held: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, Reading], list[Row]]:
    found = run.best()
    ratios = {name: r.ratio for name, r in found.items()}
    busy = {name for name, r in found.items() if r.busy}
    return found, compare(held, ratios, busy)


# --- reporting ----------------------------------------------------------------------


def commit() -> str:
    """HEAD, with "-dirty" if the measured code (``worldline/``, the benches) differs
    from it; the guard's own files do not count."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "--short=10", "HEAD")
        changed = git(
            "status", "--porcelain", "--untracked-files=no", "--", "worldline",
            "bench", ":!bench/guard.py", ":!bench/baseline.json",
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}-dirty" if changed else head


def number(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if value >= 0.01 else f"{value:.2g}"


def limit_text(row: Row) -> str:
    if row.limit is None:
        return "-"
    return (">= " if row.better == "higher" else "<= ") + number(row.limit)


def table(rows: Sequence[Row]) -> str:
    lines = [f"{'metric':<28}{'better':>7}{'baseline':>10}{'now':>10}{'limit':>12}"]
    lines += [
        f"{row.metric:<28}{row.better:>7}{number(row.baseline):>10}"
        f"{number(row.now):>10}{limit_text(row):>12}  {row.status}"
        for row in rows
    ]
    return "\n".join(lines)


def docs_table(
    rows: Sequence[Row], found: Mapping[str, Reading], run: Run, command: str
) -> str:
    load = "" if run.load is None else f", load average {run.load[0]:.1f} at the end"
    head = (
        f"{datetime.now(UTC):%Y-%m-%d}, commit `{commit()}`, `{command}`: "
        f"{run.describe()}, {run.seconds:.0f} s{load}; "
        f"{platform.machine()}, {os.cpu_count()} cores.\n\n"
        "| metric | figure | raw baseline (same run) | ratio | committed | limit | |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |\n"
    )
    body = []
    for row in rows:
        metric = BY_NAME.get(row.metric)
        got = found.get(row.metric)
        units = (metric.figure_unit, metric.raw_unit) if metric else ("", "")
        figure = f"{number(got.figure)} {units[0]}" if got else "-"
        raw = f"{number(got.raw)} {units[1]}" if got else "-"
        note = " (busy)" if got and got.busy else ""
        body.append(
            f"| `{row.metric}` | {figure} | {raw} | {number(row.now)}{note} | "
            f"{number(row.baseline)} | {limit_text(row)} | {row.status} |"
        )
    return head + "\n".join(body) + "\n"


def load_baseline(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"metrics": {}}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def new_baseline(
    old: Mapping[str, Any], found: Mapping[str, Reading], run: Run
) -> dict[str, Any]:
    """The baseline file from this run (each ratio the median of its rounds), margins
    as they were."""
    before = old.get("metrics", {})
    metrics = {}
    for metric in METRICS:
        kept = before.get(metric.name, {})
        if metric.name not in found:  # a bench not run this time: as it was
            if kept:
                metrics[metric.name] = kept
            continue
        metrics[metric.name] = {
            "ratio": round(typical(run.readings[metric.name]), 6),
            "margin": kept.get("margin", metric.margin),
            "better": metric.better,
            "what": metric.what,
        }
    return {
        "command": UPDATE_COMMAND,
        "check": COMMAND,
        "date": f"{datetime.now(UTC):%Y-%m-%d}",
        "commit": commit(),
        "rounds": run.rounds,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "metrics": metrics,
    }


def as_json(run: Run, rows: Sequence[Row], found: Mapping[str, Reading]) -> str:
    out = {
        "commit": commit(),
        "rounds": run.rounds,
        "retried": run.retried,
        "seconds": run.seconds,
        "load": run.load,
        "stretches": run.stretches,
        "metrics": {
            row.metric: {
                "better": row.better,
                "baseline": row.baseline,
                "now": row.now,
                "limit": row.limit,
                "margin": row.margin,
                "status": row.status,
                "figure": found[row.metric].figure if row.metric in found else None,
                "raw": found[row.metric].raw if row.metric in found else None,
                "rounds": [  # each round's ratio, figure, raw, busy
                    [r.ratio, r.figure, r.raw, r.busy]
                    for r in run.readings.get(row.metric, [])
                ],
            }
            for row in rows
        },
        "regressed": regressed(rows),
    }
    return json.dumps(out, indent=2, ensure_ascii=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each bench")
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        help="extra rounds of a bench whose metric is past its limit, before failing",
    )
    parser.add_argument(
        "--benches",
        nargs="+",
        choices=BENCHES,
        default=list(BENCHES),
        help="run only these (their metrics alone are compared)",
    )
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--docs", type=Path, default=DOCS)
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument(
        "--update-baseline",
        action="store_true",
        help="rewrite the baseline file from this run, keeping its margins",
    )
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="rewrite the current table in the docs, keeping the old one as history",
    )
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    command = " ".join([COMMAND, *given])
    if args.rounds < 1 or args.retries < 0:
        parser.error("--rounds must be at least 1, --retries at least 0")

    def say(line: str) -> None:
        print(f"guard: {line}", file=sys.stderr, flush=True)

    old = load_baseline(args.baseline)

    def held(metrics: Mapping[str, Any]) -> dict[str, Any]:
        """The metrics of the benches this run runs."""
        return {k: v for k, v in metrics.items() if k.split(".")[0] in args.benches}

    run = Run(args.rounds)
    measure(run, args.rounds, args.benches, say)
    found, rows = judged(run, held(old["metrics"]))
    for attempt in range(1, args.retries + 1):
        if args.update_baseline:  # a baseline wants a round that was not busy
            doubtful = [name for name, r in found.items() if r.busy]
        else:
            doubtful = [r.metric for r in rows if r.failed or r.status == "busy"]
        if not doubtful:
            break
        again = [
            b for b in args.benches if any(m.startswith(f"{b}.") for m in doubtful)
        ]
        say(f"retry {attempt} ({', '.join(doubtful)}): {', '.join(again)}")
        start = time.perf_counter()
        for bench in again:
            one_bench(run, bench)
        run.seconds += time.perf_counter() - start
        run.retried += again
        found, rows = judged(run, held(old["metrics"]))
    if hasattr(os, "getloadavg"):
        run.load = os.getloadavg()
    if args.update_baseline:
        if busy := [name for name, r in found.items() if r.busy]:
            names = ", ".join(busy)
            say(f"every round was busy for {names}: their new baseline comes from a "
                "loaded machine (a quieter run would make it tighter)")  # fmt: skip
        new = new_baseline(old, found, run)
        args.baseline.write_text(json.dumps(new, indent=2, ensure_ascii=False) + "\n")
        say(f"wrote {args.baseline} (margins kept)")
        found, rows = judged(run, held(new["metrics"]))
    if args.write_docs:
        args.docs.write_text(
            rotate_docs(args.docs.read_text(), docs_table(rows, found, run, command))
        )
        say(f"wrote the current table in {args.docs}")
    failed = regressed(rows)
    if args.json:
        print(as_json(run, rows, found))
    else:
        print(table(rows))
        print(
            f"{len(rows)} metrics, {run.describe()}, {run.seconds:.0f} s: "
            + (f"REGRESSED: {', '.join(failed)}" if failed else "no regression")
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

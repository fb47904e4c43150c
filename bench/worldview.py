"""Worldview benchmark: ``before()`` latency at 1k, 10k and 100k beliefs, against a raw
LMDB read of one belief in the same store, measured in the same run.

Run: ``python bench/worldview.py [--sizes 1000 10000 100000] [--samples 20]``.
It builds a projector store per size (beliefs with evidence, a few dependency edges)
and times the projector core answering ``Before`` from its LMDB replica.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from worldline.actors.projector import beliefs, core
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.spec import Context, Input, Reader, Step
from worldline.actors.runtime.store import Store
from worldline.protocols.beliefs import BeliefEdge, Evidence
from worldline.protocols.messages import (
    PROJECTOR_INBOX,
    Before,
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    ProjectorInbox,
    encode,
)
from worldline.protocols.subjects import projector_in, state

WORLD = "bench"
AT = datetime(2026, 6, 1, tzinfo=UTC)
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


def _replica_only(reader: Reader, change: ProjectorInbox, ctx: Context) -> Step:
    """Fill the replica without refreshing views (no world is declared here)."""
    if isinstance(change, BeliefChanged):
        return Step(writes=beliefs.apply_belief(reader, change, ctx))
    if isinstance(change, BeliefEdgeChanged):
        return Step(writes=beliefs.apply_edge(reader, change, ctx))
    return Step()


def build(store: Store, n: int) -> None:
    fill = Input(projector_in("bench"), PROJECTOR_INBOX, _replica_only)
    subject = state(WORLD, "belief")
    batch: list[Delivery] = []
    seq = 0  # one increasing stream sequence, as the change feed would number them
    for i in range(n):
        text = f"{WORDS[i % 10]} {WORDS[(i * 7) % 10]} statement {i}"
        belief = Belief(
            id=f"b{i}",
            text=text,
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
        if len(batch) >= 2000:
            store.apply_batch(fill, batch, AT)
            batch = []
    store.apply_batch(fill, batch, AT)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(n: int, samples: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "projector", actor="projector")
        build(store, n)
        with store.reader() as reader:
            held = sum(1 for _ in reader.scan(f"belief/{WORLD}/".encode()))
        if held != n:
            raise SystemExit(f"the replica holds {held} beliefs, not {n}")
        request = Before(agent="ada", query="audit the export auth path", at=AT)
        timings, raw = [], []
        for _ in range(samples):
            with store.reader() as reader:
                start = time.perf_counter()
                core.serve(reader, request, WORLD)
                timings.append(time.perf_counter() - start)
                start = time.perf_counter()
                reader.get(f"belief/{WORLD}/b{n // 2}".encode())
                raw.append(time.perf_counter() - start)
        store.close()
    return pct(timings, 0.5), pct(timings, 0.95), pct(raw, 0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    results = {}
    for n in args.sizes:
        samples = args.samples if n <= 10_000 else max(3, args.samples // 4)
        p50, p95, raw = measure(n, samples)
        results[n] = p95
        print(
            f"{n:>7} beliefs  before p50 {p50 * 1e3:9.2f} ms  p95 {p95 * 1e3:9.2f} ms"
            f"  raw LMDB get {raw * 1e6:6.1f} us  ({p50 / raw:,.0f}x)"
        )
    small, large = min(results), max(results)
    if small != large:
        ratio = results[large] / results[small]
        print(f"p95 ratio {large}/{small}: {ratio:.1f} (target: under 2)")
        print(f"p95 at {large}: {results[large] * 1e3:.1f} ms (target: under 5 ms)")


if __name__ == "__main__":
    main()

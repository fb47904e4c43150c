"""Simulator index benchmark: build time and ``retrieve()`` latency at 1k, 10k and
100k real transitions, beside the cost of embedding one query alone (the raw
baseline, measured in the same run).

Run: ``python bench/simulator.py [--sizes 1000 10000 100000] [--samples 50]``.
Transitions are synthetic but deterministic (a seeded ``random.Random``): about ten
per lineage, a fifth of the lineages held out. Each query is a perturbed copy of a
stored transition's task, context and action, and excludes that transition's own
lineage, as an evaluated episode would; it is answered from the fit partition.
"""

from __future__ import annotations

import argparse
import random
import time

from worldline.actors.belief_model.embedding import embed
from worldline.actors.simulator.index import (
    TransitionIndex,
    build,
    query_text,
    retrieve,
)
from worldline.protocols.messages import Transition

VERBS = ["search", "book", "refund", "cancel", "lookup", "update", "send", "list"]
NOUNS = [f"{s}{i}" for s in ("order", "flight", "user", "file") for i in range(250)]
FILLER = [f"w{i}" for i in range(2000)]


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(FILLER) for _ in range(words))


def transitions(n: int, seed: int = 7) -> list[Transition]:
    rng = random.Random(seed)
    found = []
    for i in range(n):
        lineage = f"conv-{i // 10:06d}"
        verb, noun = rng.choice(VERBS), rng.choice(NOUNS)
        found.append(
            Transition(
                id=f"t{i:07d}",
                lineage=lineage,
                task=f"{verb} the {noun} {sentence(rng, 6)}",
                context=sentence(rng, 24),
                action=f"{verb}_{noun.rstrip('0123456789')} {noun} {sentence(rng, 4)}",
                observation=sentence(rng, 12),
                source=f"bench.traj#{i}",
            )
        )
    return found


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def queries(index: TransitionIndex, samples: int) -> list[tuple[str, str, str, str]]:
    rng = random.Random(11)
    found = []
    for _ in range(samples):
        t = rng.choice(index.transitions)
        context = " ".join(w for w in t.context.split() if rng.random() > 0.3)
        found.append((t.task, context, t.action, t.lineage))
    return found


def measure(n: int, samples: int) -> tuple[float, float, float, float]:
    items = transitions(n)
    start = time.perf_counter()
    index = build(items, sources=["bench.traj"])
    built = time.perf_counter() - start
    if index.manifest.transitions != n:
        raise SystemExit(f"the index holds {index.manifest.transitions}, not {n}")
    timings, raw = [], []
    for task, context, action, lineage in queries(index, samples):
        start = time.perf_counter()
        found = retrieve(
            index, task=task, context=context, action=action, exclude_lineages=[lineage]
        )
        timings.append(time.perf_counter() - start)
        if any(t.lineage == lineage for t, _ in found):
            raise SystemExit(f"retrieved from the excluded lineage {lineage}")
        start = time.perf_counter()
        embed(query_text(task, context, action))
        raw.append(time.perf_counter() - start)
    return built, pct(timings, 0.5), pct(timings, 0.95), pct(raw, 0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    for n in args.sizes:
        built, p50, p95, raw = measure(n, args.samples)
        print(
            f"{n:>7} transitions  build {built:7.2f} s"
            f"  retrieve p50 {p50 * 1e3:7.2f} ms  p95 {p95 * 1e3:7.2f} ms"
            f"  raw embed {raw * 1e6:6.1f} us  ({p50 / raw:,.1f}x)"
        )


if __name__ == "__main__":
    main()

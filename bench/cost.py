"""Instructions per op of each actor's in-core apply, counted by valgrind's callgrind:
a cost that does not move with whatever else the machine runs (these machines are
shared: wall and CPU times of the same code vary by a third between runs).

Run: ``python bench/cost.py [--ops 2000] [--json]`` (needs ``valgrind``; about a
minute a stage under load, the stages two at a time). Compare two checkouts with
``PYTHONPATH=OTHER python bench/cost.py``.

Each stage is one process under callgrind that builds the bench ops of
``bench/pipeline.py`` (an ``AddBelief`` then three ``AddEvidence`` per belief) and
applies them as the live actors would receive them: fusion's ops in batches of 256,
the materializer's ops and then fusion's posteriors as fusion publishes them (in
``Wl-Batch`` batches), the projector's state changes as the materializer publishes
them. A stage's cost is its process's instruction count minus that of the stage
before it (the same process stopped one stage earlier), divided by the ops: Python's
start-up, the imports and the op building cancel out.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STAGES = ("none", "fusion", "materializer", "projector")


def run_stages(n: int, last: str) -> dict[str, int]:
    """Apply ``n`` ops through every stage up to ``last`` ("none": build them only);
    returns the items each stage handed on (fusion's posteriors, the changes)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import pipeline as bench

    from worldline.actors.registry import build
    from worldline.actors.runtime.deliveries import Delivery
    from worldline.actors.runtime.publish import batched
    from worldline.actors.runtime.store import Store
    from worldline.protocols.messages import encode
    from worldline.protocols.subjects import channel_of
    from worldline.protocols.subjects import ops as ops_subject

    subject = ops_subject("cost", bench.AGENT)
    (fusion_in,) = build("fusion").inputs
    ops_in, posteriors_in = build("materializer").inputs
    (projector_in,) = build("projector").inputs
    ops = [Delivery(i + 1, subject, encode(bench.make_op("cost", i))) for i in range(n)]
    now = datetime(2026, 6, 1, tzinfo=UTC)
    tmp = Path(tempfile.mkdtemp(prefix="wl-cost-"))

    def feed(store: Store, inp: Any, batch: list[Delivery]) -> list[Delivery]:
        out: list[Delivery] = []
        for start in range(0, len(batch), bench.FETCH):
            result = store.apply_batch(inp, batch[start : start + bench.FETCH], now)
            store.clear_outbox([item.key for item in result.outbox])
            # What the next stage consumes: fusion's posteriors, the change feed.
            wanted = "derived" if store.actor == "fusion" else "state"
            items = [i for i in result.outbox if channel_of(i.subject) == wanted]
            for message in batched(items):
                seq = len(out) + 1
                out.append(
                    Delivery(seq, message.subject, message.payload, message.count > 0)
                )
        return out

    handed: dict[str, int] = {}
    try:
        if last == "none":
            return handed
        posteriors = feed(Store(tmp / "f", actor="fusion"), fusion_in, ops)
        handed["fusion"] = sum(_items(d) for d in posteriors)
        if last == "fusion":
            return handed
        materializer = Store(tmp / "m", actor="materializer")
        changes = feed(materializer, ops_in, ops)
        changes += feed(materializer, posteriors_in, posteriors)
        handed["materializer"] = sum(_items(d) for d in changes)
        if last == "materializer":
            return handed
        feed(Store(tmp / "p", actor="projector"), projector_in, changes)
        return handed
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _items(d: Any) -> int:
    from worldline.actors.runtime.deliveries import unbatched

    return len(unbatched(d)) if d.batch else 1


def counted(n: int, stage: str) -> int:
    """Instructions callgrind counts for a process running the stages to ``stage``."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    cmd += [sys.executable, __file__, "--stage", stage, "--ops", str(n)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def measure(n: int) -> dict[str, float]:
    if shutil.which("valgrind") is None:
        raise SystemExit("bench/cost.py needs valgrind (apt-get install valgrind)")
    with ThreadPoolExecutor(2) as pool:
        totals = dict(
            zip(STAGES, pool.map(lambda s: counted(n, s), STAGES), strict=True)
        )
    return {
        stage: (totals[stage] - totals[before]) / n
        for before, stage in itertools.pairwise(STAGES)
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=2000, help="ops per stage")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stage is not None:  # one process under callgrind
        run_stages(args.ops, args.stage)
        return {}
    per_op = measure(args.ops)
    if args.json:
        print(json.dumps({"ops": args.ops, "instructions_per_op": per_op}))
    else:
        print(f"ops per stage                       {args.ops:,}")
        for stage, cost in per_op.items():
            print(f"{stage:<14} instructions per op {cost:>12,.0f}")
    return per_op


if __name__ == "__main__":
    main()

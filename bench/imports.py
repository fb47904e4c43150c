"""Import time of what an agent loads: ``import worldline`` and ``worldline --help``,
each in a fresh Python, best and median of ``--runs`` (a shared machine only ever makes
a run slower, so the best is the figure to compare). Also the floor: a bare Python and
the client's own dependencies (nats-py, msgspec, anyio).

Run: ``python bench/imports.py [--runs 15] [--src DIR]`` (``--src``: the source tree to
time, default this checkout; point it at an older checkout to compare). Results:
docs/benchmarks.md, "Import time".
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
DEPENDENCIES = "import nats, nats.js, msgspec, anyio"
EVERY_NAME = (
    "import worldline, worldline.sync, worldline.hooks\n"
    "for name in worldline.__all__: getattr(worldline, name)"
)
CASES = {
    "python -c pass": ["-c", "pass"],
    "the client's dependencies": ["-c", DEPENDENCIES],
    "import worldline": ["-c", "import worldline"],
    "every name worldline exports": ["-c", EVERY_NAME],
    "worldline --help": ["-m", "worldline.cli", "--help"],
}


def _once(args: list[str], src: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, *args], env=env, cwd=src, check=True, capture_output=True
    )
    return time.perf_counter() - start


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--runs", type=int, default=15)
    cli.add_argument("--src", type=Path, default=ROOT)
    args = cli.parse_args()
    floor = 0.0
    print(f"{'case':40} {'best s':>8} {'median s':>9} {'best - python s':>16}")
    for name, case in CASES.items():
        times = sorted(_once(case, args.src) for _ in range(args.runs))
        floor = floor or times[0]
        print(
            f"{name:40} {times[0]:8.3f} {statistics.median(times):9.3f} "
            f"{times[0] - floor:16.3f}"
        )


if __name__ == "__main__":
    main()

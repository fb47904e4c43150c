"""Smoke test of the batch-write benchmark (``bench/load.py``): a tiny run through its
real entry point measures every mode, and every item of the batch came back applied.
Nothing is timed against a threshold; the machine is shared."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

# bench/ holds scripts, not a package: import the script as its own module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import load

pytestmark = pytest.mark.nats


@pytest.mark.timeout(180)
def test_small_run_measures_every_mode(capsys: pytest.CaptureFixture[str]) -> None:
    results = load.main(["--beliefs", "120", "--single", "10", "--chunk", "50"])
    assert results.batch_failed == 0
    rates = [
        results.single_rate,
        results.in_flight_rate,
        results.batch_rate,
        results.raw_publish,
        results.ceiling,
    ]
    assert all(math.isfinite(r) and r > 0 for r in rates)
    printed = capsys.readouterr().out
    assert "load, chunks of 50 (120 beliefs)" in printed

"""Smoke test of the catch-up benchmark (``bench/catchup.py``): a tiny run through its
real entry point measures every actor end to end and in core. Nothing is timed
against a threshold; the machine is shared."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

# bench/ holds scripts, not a package: import the script as its own module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import catchup

pytestmark = pytest.mark.nats


@pytest.mark.timeout(120)
def test_quick_run_measures_each_actor(capsys: pytest.CaptureFixture[str]) -> None:
    results = catchup.main(["--quick", "--beliefs", "300", "--core-beliefs", "200"])
    assert (results.beliefs, results.core_beliefs) == (300, 200)
    assert list(results.done) == ["fusion", "materializer", "projector"]
    # Pipeline order: each actor is done no earlier than the one feeding it.
    assert results.done["fusion"] <= results.done["materializer"]
    assert results.done["materializer"] <= results.done["projector"]
    rates = [*results.rates.values(), *results.core_rates.values(), results.publish]
    assert all(math.isfinite(r) and r > 0 for r in rates)
    assert results.vocabulary > 300  # varied text, not one sentence repeated
    assert "projector / fusion" in capsys.readouterr().out


def test_texts_are_varied_and_reproducible() -> None:
    first = list(catchup.sentences(200, seed=3))
    assert first == list(catchup.sentences(200, seed=3))
    assert len(set(first)) == 200
    words = {w for text in first for w in text.lower().split()}
    assert len(words) > 300

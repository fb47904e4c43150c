"""Smoke test of the end-to-end throughput benchmark (``bench/pipeline.py``): a tiny
run through its real entry point returns sane, structured results. Nothing here is
timed against a threshold; the machine is shared."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

# bench/ holds scripts, not a package: import the script as its own module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import pipeline

pytestmark = pytest.mark.nats

RATES = (
    "raw_publish",
    "raw_consume",
    "raw_pipeline",
    "raw_pipeline_lean",
    "e2e_publish",
    "e2e",
    "replay_publish",
    "replay_export",
    "replay_rebuild",
    "replay_total",
    "fusion_apply",
    "materializer_apply",
    "projector_apply",
)


def test_quick_run_measures_every_part(capsys: pytest.CaptureFixture[str]) -> None:
    results = pipeline.main(
        ["--quick", "--ops", "120", "--replay-ops", "300", "--apply-ops", "200"]
    )
    assert (results.ops, results.replay_ops, results.apply_ops) == (120, 300, 200)
    assert results.actors == "process"
    for name in RATES:
        value = getattr(results, name)
        assert math.isfinite(value), name
        assert value > 0, name
    # The ratio is computed from the two measured throughputs, not fixed.
    assert results.ratio == results.e2e / results.raw_pipeline
    # Each op's effect reached the state feed after it reached the derived feed.
    for derived, changed in (
        (results.load_derived, results.load_state),
        (results.single_derived, results.single_state),
    ):
        assert 0 < derived[0] <= derived[1]
        assert 0 < changed[0] <= changed[1]
    assert results.single_derived[0] < results.single_state[1]
    assert results.op_bytes > 100  # a real encoded op, not an empty payload
    assert set(results.apply_cpu) == {"fusion", "materializer", "projector"}
    table = capsys.readouterr().out
    assert f"{results.ratio:.3f}" in table
    assert "(c) replay log size" in table


def test_counts_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        pipeline.parse(["--ops", "0"])
    assert exc.value.code == 2
    assert "--ops must be at least 1" in capsys.readouterr().err

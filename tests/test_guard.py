"""The regression guard's comparison (``bench/guard.py``): which metrics regress given a
baseline and a run's ratios, in which direction, and how the docs table rotates into
history. Pure functions on made-up numbers: nothing here is timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# bench/ holds scripts, not a package: import the script as its own module.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import guard

BASELINE = {
    "pipeline.e2e/lean": {"ratio": 0.4, "margin": 0.5, "better": "higher"},
    "pipeline.cpu/raw": {"ratio": 4.0, "margin": 0.2, "better": "lower"},
}


def statuses(now: dict[str, float]) -> dict[str, str]:
    return {row.metric: row.status for row in guard.compare(BASELINE, now)}


def test_within_the_margin_passes() -> None:
    rows = guard.compare(BASELINE, {"pipeline.e2e/lean": 0.21, "pipeline.cpu/raw": 4.9})
    assert guard.regressed(rows) == []
    assert [row.status for row in rows] == ["ok", "ok"]


def test_a_throughput_ratio_below_its_floor_regresses() -> None:
    now = {"pipeline.e2e/lean": 0.19, "pipeline.cpu/raw": 4.0}
    assert guard.regressed(guard.compare(BASELINE, now)) == ["pipeline.e2e/lean"]


def test_a_cost_ratio_above_its_ceiling_regresses() -> None:
    # lower is better: the ceiling is baseline / (1 - margin) = 5.0
    assert statuses({"pipeline.e2e/lean": 0.4, "pipeline.cpu/raw": 5.01}) == {
        "pipeline.e2e/lean": "ok",
        "pipeline.cpu/raw": "REGRESSED",
    }
    assert statuses({"pipeline.e2e/lean": 0.4, "pipeline.cpu/raw": 5.0}) == {
        "pipeline.e2e/lean": "ok",
        "pipeline.cpu/raw": "ok",
    }


def test_faster_never_fails() -> None:
    # far better than the baseline in the good direction of each metric
    now = {"pipeline.e2e/lean": 40.0, "pipeline.cpu/raw": 0.001}
    assert guard.regressed(guard.compare(BASELINE, now)) == []


def test_the_limits_mean_the_same_slowdown_either_way() -> None:
    assert guard.limit_of("higher", 0.4, 0.5) == pytest.approx(0.2)
    assert guard.limit_of("lower", 4.0, 0.5) == pytest.approx(8.0)
    with pytest.raises(ValueError, match="margin"):
        guard.limit_of("higher", 1.0, 1.0)


def test_a_metric_the_run_could_not_read_fails() -> None:
    rows = guard.compare(BASELINE, {"pipeline.e2e/lean": 0.4})
    assert guard.regressed(rows) == ["pipeline.cpu/raw"]
    assert rows[1].status == "MISSING"


def test_a_metric_not_in_the_baseline_is_new_not_compared() -> None:
    now = {"pipeline.e2e/lean": 0.4, "pipeline.cpu/raw": 4.0, "simulator.p95/embed": 9}
    rows = guard.compare(BASELINE, now)
    assert guard.regressed(rows) == []
    assert rows[-1].metric == "simulator.p95/embed"
    assert rows[-1].status == "new"
    assert rows[-1].better == "lower"  # from the guard's own list


def test_a_ratio_is_of_one_unit() -> None:
    assert guard.reading(2.0, 4.0).ratio == 0.5
    assert guard.reading(2.0, 4.0, 1000).ratio == 500  # ms over µs


def test_the_best_round_counts_in_each_direction() -> None:
    readings = [guard.reading(1.0, 4.0), guard.reading(3.0, 4.0)]
    assert guard.best("higher", readings).ratio == 0.75
    assert guard.best("lower", readings).ratio == 0.25


def test_a_baseline_is_the_median_round_of_those_not_busy() -> None:
    rounds = [guard.reading(r, 1.0) for r in (3.0, 1.0, 2.0)]
    assert guard.typical(rounds) == 2.0
    busy = guard.Reading(9.0, 9.0, 1.0, busy=True)
    assert guard.typical([*rounds, busy, busy, busy]) == 2.0
    assert guard.typical([busy, guard.Reading(7.0, 7.0, 1.0, busy=True)]) == 8.0


def test_the_best_round_is_busy_only_when_every_round_was() -> None:
    quiet = guard.Reading(0.3, 3.0, 10.0)
    busy = guard.Reading(0.5, 5.0, 10.0, busy=True)
    assert guard.best("higher", [busy, quiet]) == guard.Reading(0.5, 5.0, 10.0)
    assert guard.best("lower", [busy, quiet]) == quiet
    assert guard.best("higher", [busy, busy]) == busy


def test_a_wall_clock_metric_past_its_limit_on_busy_rounds_only_is_not_judged() -> None:
    now = {"pipeline.e2e/lean": 0.1, "pipeline.cpu/raw": 9.0}
    rows = guard.compare(BASELINE, now, busy={"pipeline.e2e/lean"})
    assert [row.status for row in rows] == ["busy", "REGRESSED"]
    assert guard.regressed(rows) == ["pipeline.cpu/raw"]
    # within its limit, a busy reading is simply ok
    rows = guard.compare(BASELINE, {**now, "pipeline.e2e/lean": 0.3}, busy=now)
    assert rows[0].status == "ok"


def test_every_metric_has_a_sane_default_margin() -> None:
    names = [m.name for m in guard.METRICS]
    assert len(names) == len(set(names))
    for metric in guard.METRICS:
        assert 0 < metric.margin < 1, metric.name
        assert metric.name.split(".")[0] in guard.BENCHES
    # CPU-time ratios are judged under load too
    assert not guard.BY_NAME["pipeline.fusion/lmdb"].wall
    assert guard.BY_NAME["pipeline.e2e/lean"].wall


def test_the_committed_baseline_holds_every_metric() -> None:
    data = json.loads(guard.BASELINE.read_text())
    assert set(data["metrics"]) == {m.name for m in guard.METRICS}
    for name, base in data["metrics"].items():
        assert base["better"] == guard.BY_NAME[name].better, name
        assert base["ratio"] > 0, name
        guard.limit_of(base["better"], base["ratio"], base["margin"])
    assert data["command"] == guard.UPDATE_COMMAND


def test_a_new_baseline_keeps_margins_and_the_benches_not_run() -> None:
    old = {
        "metrics": {
            "pipeline.e2e/lean": {"ratio": 0.4, "margin": 0.45, "better": "higher"},
            "simulator.p50/embed": {"ratio": 2.0, "margin": 0.3, "better": "lower"},
            "gone.metric": {"ratio": 1.0, "margin": 0.1, "better": "lower"},
        }
    }
    run = guard.Run(3)
    run.add({"pipeline.e2e/lean": guard.reading(1.0, 4.0)})
    run.add({"pipeline.e2e/lean": guard.reading(3.0, 4.0)})
    run.add({"pipeline.e2e/lean": guard.reading(2.0, 4.0)})
    new = guard.new_baseline(old, run.best(), run)
    assert new["metrics"]["pipeline.e2e/lean"]["ratio"] == 0.5  # the median round
    assert new["metrics"]["pipeline.e2e/lean"]["margin"] == 0.45  # kept
    assert (
        new["metrics"]["simulator.p50/embed"] == old["metrics"]["simulator.p50/embed"]
    )
    assert "gone.metric" not in new["metrics"]  # no longer one of the guard's
    assert new["command"] == guard.UPDATE_COMMAND


DOC = f"""# Benchmarks

intro

{guard.CURRENT_START}
old table
{guard.CURRENT_END}

### History

{guard.HISTORY_START}
older table
{guard.HISTORY_END}

## Next section
"""


def test_writing_the_docs_keeps_the_replaced_table_as_history() -> None:
    once = guard.rotate_docs(DOC, "new table\n")
    current = once.split(guard.CURRENT_START)[1].split(guard.CURRENT_END)[0]
    history = once.split(guard.HISTORY_START)[1].split(guard.HISTORY_END)[0]
    assert current.strip() == "new table"
    assert history.split() == ["old", "table", "older", "table"]  # newest first
    assert once.startswith("# Benchmarks\n\nintro\n\n")
    assert once.endswith("\n\n## Next section\n")
    twice = guard.rotate_docs(once, "newer table")
    history = twice.split(guard.HISTORY_START)[1].split(guard.HISTORY_END)[0]
    assert history.split("\n\n")[0].strip() == "new table"
    assert "old table" in history
    assert "older table" in history


def test_writing_the_docs_needs_each_marker_once() -> None:
    with pytest.raises(ValueError, match="exactly once"):
        guard.rotate_docs(DOC.replace(guard.HISTORY_END, ""), "t")
    with pytest.raises(ValueError, match="exactly once"):
        guard.rotate_docs(DOC + guard.CURRENT_START, "t")


def test_an_empty_current_block_adds_nothing_to_history() -> None:
    empty = DOC.replace("old table\n", "")
    history = guard.rotate_docs(empty, "t").split(guard.HISTORY_START)[1]
    assert history.split(guard.HISTORY_END)[0].strip() == "older table"


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("pipeline.py", guard.PIPELINE_ARGS),
        ("worldview.py", guard.WORLDVIEW_ARGS),
        ("simulator.py", guard.SIMULATOR_ARGS),
    ],
)
def test_each_bench_takes_the_options_the_guard_passes(
    script: str, args: tuple[str, ...]
) -> None:
    shown = subprocess.run(
        [sys.executable, str(guard.BENCH / script), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for option in (*[a for a in args if a.startswith("--")], "--json"):
        assert option in shown, f"{script} has no {option} (bench/guard.py runs it)"

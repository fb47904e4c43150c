"""Smoke test of the scale run (``bench/scale.py``): a tiny run through its real entry
point measures every checkpoint, and the rebuilt state matches the live one where the
live actors stopped. Nothing is timed against a threshold; the machine is shared. The
full run (1M beliefs, 10M ops) is an explicit command, never part of the suite."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# bench/ holds scripts, not a package: import the script as its own module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import scale

from worldline.protocols.messages import AddBelief

pytestmark = [pytest.mark.nats, pytest.mark.scale, pytest.mark.timeout(180)]


def test_tiny_run_measures_every_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = scale.main(
        ["--ops", "1200", "--beliefs", "200", "--samples", "3", "--raw-msgs", "300",
         "--text", "synthetic", "--dir", str(tmp_path), "--json"]
    )  # fmt: skip
    # a tenth of the early beliefs (a tenth of all), the early beliefs, their
    # evidence (a tenth as many: the end of the ingest through the actors), every
    # belief, the whole log
    assert [c.ops for c in results.checkpoints] == [2, 20, 22, 202, 1200]
    assert [c.live for c in results.checkpoints] == [True, True, True, False, False]
    assert results.ingest_ops == 22
    assert [c.beliefs for c in results.checkpoints] == [2, 20, 20, 200, 200]
    for c in results.checkpoints:
        assert (c.export > 0) == (c.ops <= 200), c  # export: as many as beliefs
        assert c.rebuild > 0, c
        assert c.stream_bytes > 0, c
        if c.live:
            assert c.ingest > 0, c
            assert set(c.stores) == {"fusion", "materializer", "projector-0"}
            assert 0 < c.before[0] <= c.before[1]
            assert 0 < c.raw_get[0] <= c.raw_get[1]
            assert 0 < c.before_bus[0] <= c.before_bus[1]
            assert 0 < c.rtt[0] <= c.rtt[1]
            assert c.live_hash
        else:
            assert c.publish > 0, c
    last = results.checkpoints[-1]
    assert last.rebuilt
    assert set(last.stores) == {"fusion", "materializer"}
    assert last.rebuild_seconds > 0
    # The rebuild, at the op where the live actors stopped, is the live world.
    assert results.rebuild_matches_live is True
    assert results.rebuild_hash
    for rate in (results.raw_publish, results.raw_consume, results.raw_lmdb_put):
        assert rate > 0
    assert results.export_ops == 200  # as many as beliefs
    assert set(results.replay_cpu) == {
        "bench (bus read + materializer)",
        "fusion's process",
    }
    assert list(tmp_path.iterdir()) == []  # everything it wrote is gone
    printed = json.loads(capsys.readouterr().out)
    assert [c["ops"] for c in printed["checkpoints"]] == [2, 20, 22, 202, 1200]
    assert printed["checkpoints"][-1]["store_per_belief"] > 0


def test_a_spent_replay_budget_ends_the_replay_where_it_is(tmp_path: Path) -> None:
    results = scale.main(
        ["--ops", "1500", "--beliefs", "100", "--samples", "1", "--raw-msgs", "100",
         "--text", "synthetic", "--no-bus", "--replay-budget", "0",
         "--dir", str(tmp_path / "run"), "--json-file", str(tmp_path / "out.json")]
    )  # fmt: skip
    # The budget is checked after each 1,000 records handed over.
    assert results.replayed_ops == 1000
    cut = next(c for c in results.checkpoints if c.ops == 1000)
    assert cut.rebuilt
    assert cut.rebuild > 0
    assert cut.beliefs == 100
    assert results.checkpoints[-1].ops == 1500
    assert results.checkpoints[-1].rebuild == 0
    assert results.rebuild_matches_live is True  # the live part was replayed
    written = json.loads((tmp_path / "out.json").read_text())
    assert written["replayed_ops"] == 1000


def test_every_belief_ends_with_the_same_evidence() -> None:
    config = scale.Config(ops=1200, beliefs=200, text="synthetic")
    made = scale.Ops(config)
    beliefs: list[str] = []
    evidence: dict[str, int] = {}
    for i in range(config.ops):
        op = made.op(i)
        if isinstance(op, AddBelief):
            beliefs.append(op.belief_id)
            assert config.beliefs_at(i + 1) == len(beliefs)
        else:
            belief = op.evidence.belief_id
            assert belief in beliefs  # made before its evidence
            evidence[belief] = evidence.get(belief, 0) + 1
    assert len(beliefs) == len(set(beliefs)) == 200
    assert set(evidence.values()) == {5}  # (1200 - 200) / 200


def test_beliefs_cannot_exceed_ops(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        scale.parse(["--ops", "10", "--beliefs", "20"])
    assert exc.value.code == 2
    assert "--beliefs cannot exceed --ops" in capsys.readouterr().err

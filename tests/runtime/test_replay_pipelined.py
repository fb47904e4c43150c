"""A rebuild with fusion in a process of its own (``replay(..., pipelined=True)``, what
a long log gets) is the one-process rebuild byte for byte: the same hash, the same
last op, the same state at ``at``, the same dead letters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from worldline.ops import replay as replay_module
from worldline.ops.replay import replay
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import AddBelief, AddEvidence, encode
from worldline.protocols.subjects import ops
from worldline.sdk.export import ExportRecord, RawRecord, export_record

if TYPE_CHECKING:
    from pathlib import Path

WORLD = "pipelined"
BASE = datetime(2026, 1, 1, tzinfo=UTC)


def op(i: int) -> AddBelief | AddEvidence:
    """Op ``i``: a belief every fifth op, evidence on the beliefs made so far."""
    at = BASE + timedelta(seconds=i)
    if i % 5 == 0:
        return AddBelief(
            op_id=f"op-{i}", author="ada", at=at, belief_id=f"b{i // 5}",
            text=f"claim {i // 5} about the rollout", confidence=0.3 + (i % 7) / 10,
        )  # fmt: skip
    evidence = Evidence(
        id=f"ev-{i}",
        belief_id=f"b{(i * 7) % (i // 5 + 1)}",
        direction=("supports", "refutes", "neutral")[i % 3],
        kind="measurement",
        source=f"sensor-{i % 4}",
        observed_at=at,
        text="seen",
        author="ada",
    )
    return AddEvidence(op_id=f"op-{i}", author="ada", at=at, evidence=evidence)


def log(n: int) -> list[ExportRecord | RawRecord]:
    """``n`` records: ops, with junk and an op under a batch header among them."""
    subject = ops(WORLD, "ada")
    records = []
    for i in range(n):
        seq = i + 1
        if i % 997 == 500:
            records.append(export_record(seq, subject, b"\xc1 not an op"))
        elif i % 1499 == 700:
            records.append(export_record(seq, subject, encode(op(i)), "2"))
        else:
            records.append(export_record(seq, subject, encode(op(i))))
    return records


@pytest.mark.timeout(120)
def test_pipelined_rebuild_is_the_one_process_rebuild(tmp_path: Path) -> None:
    records = log(4500)
    assert any(isinstance(r, RawRecord) for r in records)
    at = 2345  # not on a batch boundary
    alone = replay(records, tmp_path / "alone", WORLD, at=at, pipelined=False)
    piped = replay(iter(records), tmp_path / "piped", WORLD, at=at, pipelined=True)
    assert piped == alone
    assert alone.raw >= 4
    assert alone.applied_at == at
    assert alone.hash != alone.hash_at


@pytest.mark.timeout(120)
def test_a_long_log_is_pipelined_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = []
    real = replay_module._Pipelined.__init__

    def spy(self: replay_module._Pipelined, *args: object) -> None:
        started.append(True)
        real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(replay_module._Pipelined, "__init__", spy)
    monkeypatch.setattr(replay_module, "PIPELINE_FROM", 1500)
    records = log(1600)
    short = replay(records[:1499], tmp_path / "short", WORLD)
    assert not started
    long = replay((r for r in records), tmp_path / "long", WORLD)
    assert started == [True]
    assert long == replay(records, tmp_path / "check", WORLD, pipelined=False)
    assert (short.ops, long.ops) == (1499, 1600)

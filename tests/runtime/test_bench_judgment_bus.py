"""Smoke test of the bus judgment benchmark (``bench/judgment_bus.py``) on a small
synthetic set written here: its real entry point loads every scenario through the bus,
and learned reliability beats the vote that copies of a bad source fool. Nothing is
timed against a threshold."""

from __future__ import annotations

import gzip
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import judgment_bus

pytestmark = pytest.mark.nats


def write_set(folder: Path) -> None:
    """60 questions, 4 answers each; six stores right 85% of the time on the half of
    the questions each lists; a bad store, wrong on every one of its 15."""
    rng = random.Random(11)
    rows, gold = [], []
    for q in range(60):
        gold.append(f"q{q}\ta0")
        for s in range(6):
            if rng.random() < 0.5:
                answer = "a0" if rng.random() < 0.85 else f"a{rng.randint(1, 3)}"
                rows.append(f"q{q}\t{answer}\tstore-{s}")
        if q % 4 == 0:
            rows.append(f"q{q}\ta{1 + q % 3}\tbad")
            rows.append(f"q{q}\ta0\tstore-{q % 6}")  # the bad store's gold is countable
    folder.mkdir()
    with gzip.open(folder / "claims.tsv.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(rows) + "\n")
    (folder / "gold.tsv").write_text("\n".join(gold) + "\n", encoding="utf-8")


@pytest.mark.timeout(240)
def test_small_run_through_the_bus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_set(tmp_path / "set")
    scenarios = judgment_bus.main(
        [
            "--data",
            str(tmp_path / "set"),
            "--copies",
            "6",
            "--chunk",
            "200",
            "--timeout",
            "60",
        ]
    )
    assert [s.failed for s in scenarios] == [0, 0, 0]
    published, exact, partial = scenarios
    assert exact.vote < published.vote  # the copies fool the vote
    assert exact.learned > exact.vote
    assert partial.learned > partial.vote
    printed = capsys.readouterr().out
    assert "worldline, learned reliability" in printed

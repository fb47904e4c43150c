"""How well the rule extractor types statements (claim, risk, gap, assumption), on a
small labelled set written for this project (tests/data/typing/README.md). Prints
the accuracy per split and pins a floor under it."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Final

import pytest

from worldline.actors.extractor.text import classify

SET: Final = Path(__file__).parent.parent / "data" / "typing" / "sentences.tsv"
LABELS: Final = ("claim", "risk", "gap", "assumption")


def rows() -> list[dict[str, str]]:
    with SET.open(newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def accuracy(split: str | None) -> float:
    chosen = [r for r in rows() if split is None or r["split"] == split]
    right = sum(classify(r["sentence"]).type == r["label"] for r in chosen)
    return right / len(chosen)


def test_the_set_is_small_labelled_and_balanced() -> None:
    found = rows()
    assert 60 <= len(found) <= 100
    assert {r["label"] for r in found} == set(LABELS)
    assert all(sum(r["label"] == label for r in found) >= 15 for label in LABELS)
    assert {r["split"] for r in found} == {"dev", "test"}
    assert len({r["sentence"] for r in found}) == len(found)


@pytest.mark.parametrize(("split", "floor"), [("dev", 0.95), ("test", 0.85),
                                              (None, 0.9)])  # fmt: skip
def test_typing_accuracy_stays_above_its_floor(split: str | None, floor: float) -> None:
    value = accuracy(split)
    sys.stdout.write(f"typing accuracy ({split or 'all'}): {value:.3f}\n")
    assert value >= floor, f"typing accuracy {value:.3f} under its floor {floor}"


@pytest.mark.parametrize(
    ("sentence", "kind"),
    [
        ("The market for stop loss is growing fast.", "claim"),  # a product
        ("The training loss dropped below 0.3 after ten epochs.", "claim"),  # metric
        ("Customer churn was 2.1 percent last month.", "claim"),  # a report
        ("The threat model document was updated in May.", "claim"),  # the month
        ("Churn may rise after the price change.", "risk"),
        ("A single expired certificate could take down every region.", "risk"),
        ("It is unclear who approved the firewall change.", "gap"),
        ("Our working assumption is that usage grows linearly.", "assumption"),
    ],
)
def test_risk_words_count_in_context(sentence: str, kind: str) -> None:
    assert classify(sentence).type == kind

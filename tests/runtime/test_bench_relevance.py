"""Smoke test of the relevance benchmark (``bench/relevance.py``): its quality part on
a tiny dev set, through its real entry point and a real stack (nats-server and every
actor). Nothing is held to a threshold but what a correct bench must find."""

from __future__ import annotations

import gzip
import json
import math
import sys
from itertools import islice
from pathlib import Path

import pytest

# bench/ holds scripts, not a package: import the script as its own module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import relevance

pytestmark = pytest.mark.nats

# An article of our own: the question's words occur in its answering sentence only.
PLANTED = [
    "Quokkas nap beneath eucalyptus canopies on Rottnest island every afternoon.",
    "The ferry to the island leaves the harbour twice a day in summer.",
    "Visitors may not feed the animals or touch them.",
]
QUESTION = "quokkas nap beneath eucalyptus canopies"


def _write(path: Path, rows: list[dict[str, object]]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows)


def _tiny_dev_set(folder: Path) -> None:
    """The planted article, then the first sentences of the real dev set (and their
    questions) when it is there."""
    sentences: list[dict[str, object]] = [
        {"id": f"x0-p0-s{i}", "article": "Planted", "text": text}
        for i, text in enumerate(PLANTED)
    ]
    questions: list[dict[str, object]] = [
        {"id": "planted", "question": QUESTION, "answers": ["x0-p0-s0"]},
        # Two hops: the quokkas' sentence and the ferry's, each a fact of its own.
        {"id": "two-hops", "question": f"{QUESTION} ferry harbour",
         "answers": ["x0-p0-s0", "x0-p0-s1"],
         "facts": [["x0-p0-s0"], ["x0-p0-s1"]]},
    ]  # fmt: skip
    real = relevance.DATA / "dev-sentences.jsonl.gz"
    if real.exists():
        with gzip.open(real, "rt", encoding="utf-8") as lines:
            slice_ = [json.loads(line) for line in islice(lines, 40)]
        held = {row["id"] for row in slice_}
        sentences += [{**row, "article": "Real"} for row in slice_]
        with gzip.open(relevance.DATA / "dev-questions.jsonl.gz", "rt") as lines:
            asked = (json.loads(line) for line in lines)
            questions += [q for q in asked if set(q["answers"]) <= held][:10]
    _write(folder / "dev-sentences.jsonl.gz", sentences)
    _write(folder / "dev-questions.jsonl.gz", questions)


@pytest.mark.timeout(60)
def test_quality_run_reports_rates_and_bm25_finds_a_unique_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tiny_dev_set(tmp_path)
    results = relevance.main(["--data", str(tmp_path), "--questions", "20", "--sizes"])
    out = capsys.readouterr().out
    for line in ("worldview hit rate", "BM25 same budget hit rate", "difference"):
        assert line in out
    assert results.latency == []  # no sizes asked
    assert results.sentences >= len(PLANTED)
    assert results.beliefs >= len(PLANTED)  # every sentence read back as a belief
    summary = results.summary()
    for name in ("worldview", "bm25_same_budget", "bm25_k5", "bm25_k10"):
        assert 0.0 <= summary[name] <= 1.0, name
    assert math.isclose(
        summary["difference"], summary["worldview"] - summary["bm25_same_budget"]
    )
    assert summary["mean_tokens"] > 0
    assert not math.isnan(summary["search_same_budget"]) or results.search_note
    by_id = {q.id: q for q in results.questions}
    planted = by_id["planted"]
    # The belief -> sentence map came back through the bus: BM25 over the beliefs
    # finds the one sentence holding the question's words.
    assert planted.bm25_5
    assert planted.bm25_10
    assert planted.budget == 0 or planted.bm25
    # A multi-hop question is judged on every hop too; a single-hop one is not.
    assert planted.worldview_all is None
    assert planted.bm25_all is None
    hops = by_id["two-hops"]
    assert isinstance(hops.worldview_all, bool)
    assert isinstance(hops.bm25_all, bool)
    assert hops.bm25_all <= hops.bm25  # every hop found: one found
    assert not math.isnan(summary["worldview_all_hops"])
    assert "every hop shown: worldview" in out

"""The judgment benchmark's calibration block (``bench/judgment_calibration.py``, issue
25) on a small synthetic set written here, and, where it has been built, on a slice of
the public population set: recalibration by cross-validation lowers the calibration
error without moving a pick, no question is scored by a map fitted on it, and the
targets printed are the ones computed. No bus; nothing is timed."""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

import msgspec
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import judgment
import judgment_calibration as jc

from worldline.actors.belief_model import reliability
from worldline.actors.belief_model.reliability import Claim

# (source, accuracy, share of the questions it answers)
_SOURCES = (
    ("s-good", 0.9, 0.6),
    ("s-fair", 0.75, 0.6),
    ("s-mid", 0.6, 0.5),
    ("s-poor", 0.45, 0.5),
    ("s-worse", 0.35, 0.4),
)


def _synthetic(
    questions: int = 150, seed: int = 7
) -> tuple[list[Claim], dict[str, str]]:
    """Sources of known accuracy answer ``questions`` questions (gold ``a0``); a wrong
    answer is one of three, so wrong sources often agree with each other."""
    rng = random.Random(seed)
    claims, gold = [], {}
    for q in range(questions):
        question = f"q{q:03d}"
        gold[question] = "a0"
        for source, accuracy, share in _SOURCES:
            if rng.random() < share:
                right = rng.random() < accuracy
                answer = "a0" if right else f"a{rng.randint(1, 3)}"
                claims.append(Claim(question, answer, source))
        if not any(c.question == question for c in claims):
            claims.append(Claim(question, "a0", "s-good"))
    return claims, gold


def _block(claims: list[Claim], gold: dict[str, str], record: str) -> jc.Block:
    return jc.block("test", claims, gold, reliability.estimate(claims), record=record)


@pytest.mark.parametrize("record", jc.RECORDS)
def test_recalibration_lowers_the_error_and_keeps_the_picks(record: str) -> None:
    claims, gold = _synthetic()
    result = _block(claims, gold, record)
    methods = [r.method for r in result.rows]
    assert methods == [m for m in dict.fromkeys(methods) for _ in range(2)]
    assert len(methods) == 8
    for raw, fixed in zip(result.rows[::2], result.rows[1::2], strict=True):
        assert (raw.recalibrated, fixed.recalibrated) == (False, True)
        assert fixed.accuracy == raw.accuracy  # a monotone map moves no pick
        assert fixed.questions == raw.questions == len(gold)
        assert len(fixed.calibrators) == jc.FOLDS
    # Every uncalibrated posterior here is off; the maps learned out of fold fix it.
    before = {r.method: r for r in result.rows if not r.recalibrated}
    after = {r.method: r for r in result.rows if r.recalibrated}
    assert before["worldline, before assessment"].ece > 0.1
    for method in ("worldline, before assessment", "worldline, after assessment"):
        assert after[method].ece < before[method].ece
        assert after[method].brier < before[method].brier


def test_the_targets_are_the_numbers_against_the_thresholds() -> None:
    claims, gold = _synthetic()
    result = _block(claims, gold, jc.RECORD)
    assert [t.method for t in result.targets] == [r.method for r in result.rows[::2]]
    for t, raw, fixed in zip(
        result.targets, result.rows[::2], result.rows[1::2], strict=True
    ):
        assert (t.ece, t.brier, t.accuracy) == (fixed.ece, fixed.brier, fixed.accuracy)
        assert t.accuracy_before == raw.accuracy
        assert t.brier_floor == raw.brier_floor
        assert t.ece_met == (fixed.ece <= jc.TARGET_ECE)
        assert t.brier_met == (fixed.brier <= jc.TARGET_BRIER)
        assert t.accuracy_met
        # No monotone map of the raw confidences beats the floor on them.
        assert raw.brier_floor <= raw.brier
        # The ECE a calibrated posterior would show on this many questions.
        assert 0.0 < raw.ece_noise <= raw.ece_noise_p90 < 1.0


def test_the_vote_confidence_is_the_winners_share() -> None:
    claims = [
        Claim("q", "x", "s1"),
        Claim("q", "x", "s2"),
        Claim("q", "y", "s3"),
        Claim("q", "x", "s1"),  # a repeat counts once
        Claim("other", "z", "s1"),
    ]
    answers = jc.vote_answers(claims, {"q"})
    assert answers == {"q": {"x": 2 / 3, "y": 1 / 3}}
    got = jc.row("majority vote", answers, {"q": "y", "unanswered": "w"})
    assert got.accuracy == 0.0
    assert got.mean_confidence == pytest.approx((2 / 3 + 0.0) / 2)
    assert got.brier == pytest.approx(((2 / 3) ** 2 + 0.0) / 2)


def test_no_question_is_scored_by_a_map_fitted_on_it() -> None:
    claims, gold = _synthetic()
    answers = jc.rival_answers(claims, set(gold), {})
    fixed, _ = jc.recalibrated(answers, gold)
    questions = sorted(gold)
    # Flip the outcome of one question's pick: its own recalibrated confidence stays,
    # the other folds' (whose maps were fitted on it) move.
    flipped = questions[0]
    winner = min(answers[flipped].items(), key=lambda kv: (-kv[1], kv[0]))[0]
    other = dict(gold)
    other[flipped] = "a0" if winner != "a0" else "nobody"
    moved, _ = jc.recalibrated(answers, other)
    assert moved[flipped] == fixed[flipped]
    same_fold = [q for i, q in enumerate(questions) if i % jc.FOLDS == 0]
    assert all(moved[q] == fixed[q] for q in same_fold)
    assert any(moved[q] != fixed[q] for q in questions if q not in same_fold)


def test_main_prints_the_table_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claims, gold = _synthetic(questions=80)
    claims += [Claim(q, "a9", "s-bad") for q in sorted(gold)[:6]]
    folder = tmp_path / "set"
    folder.mkdir()
    with gzip.open(folder / "claims.tsv.gz", "wt", encoding="utf-8") as f:
        f.writelines(f"{c.question}\t{c.answer}\t{c.source}\n" for c in claims)
    (folder / "gold.tsv").write_text(
        "".join(f"{q}\t{a}\n" for q, a in gold.items()), encoding="utf-8"
    )
    blocks = judgment.main(["--data", str(folder), "--copies", "3", "--json"])
    out, err = capsys.readouterr()
    decoded = msgspec.json.decode(out, type=list[jc.Block])
    assert decoded == blocks
    assert [b.title for b in blocks] == [
        "as published",
        "+ 3 exact copies of the bad source",
        "+ 3 partial copies of the bad source",
    ]
    assert "targets, worldline, after assessment, recalibrated" in err
    assert json.loads(out)[0]["targets"][0]["method"] == "majority vote"
    judgment.main(["--data", str(folder), "--copies", "3"])
    printed = capsys.readouterr().out
    for t in blocks[0].targets:
        verdict = "met" if t.ece_met else "NOT met"
        assert f"{t.method}, recalibrated: ECE {t.ece:.3f} <= 0.05 {verdict}" in printed


@pytest.mark.timeout(60)
def test_on_a_slice_of_the_population_set() -> None:
    data = judgment.DATA
    if not (data / "claims.tsv.gz").exists():
        pytest.skip(f"not built: {judgment.BUILD}")
    claims, gold = judgment.load(data)
    kept = dict(sorted(gold.items())[:150])
    sliced = [c for c in claims if c.question in kept]
    result = _block(sliced, kept, jc.RECORD)
    for raw, fixed in zip(result.rows[::2], result.rows[1::2], strict=True):
        assert fixed.accuracy == raw.accuracy
    by = {(r.method, r.recalibrated): r for r in result.rows}
    for method in ("worldline, before assessment", "worldline, after assessment"):
        assert by[method, True].ece < by[method, False].ece

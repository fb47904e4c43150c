"""The judgment benchmark's calibration block (issue 25): for each way of picking an
answer, the winning answer's exact accuracy, mean confidence, Brier score and expected
calibration error (``worldline.actors.belief_model.calibration``) on the gold questions,
uncalibrated and recalibrated, in the same run as ``bench/judgment.py``'s accuracies.

Four ways of picking, each giving every answer of a gold question a confidence; the
pick is the highest (ties: the smallest answer):

- ``majority vote``: an answer's share of the distinct sources that answer the question;
- ``worldline, before assessment``: the posterior fusion gives a slot answer
  (``rivals.read``: one belief per (question, answer) in the question's slot, one
  ``citation`` per claim from its source, one clock, default trust), as
  ``bench/judgment_bus.py`` reads it back before ``assess_sources``;
- ``worldline, after assessment``: the same with every source's learned factor as its
  trust (``fusion.assess.factor`` of the reliability core's estimate with copy
  detection, as an ``AssessSources`` op sets it);
- ``reliability core``: the core's own confidence in each answer.

Recalibrated: the gold questions sorted and dealt into ``FOLDS`` folds (question
``i`` in fold ``i % FOLDS``); for each fold a map is fitted (``calibration.fit``: the
identity below ``MIN_RECORDS`` records, else the lowest cross-validated Brier among
identity, Platt and isotonic) on the record of the other folds' questions, and applied
to the fold's winning answers: no question is scored by a map fitted on it. The record
is, by default, one resolved belief per question, its winning answer (right or not);
``record="answers"`` fits on every answer of the question instead (the gold one true),
which is what a world holds when it resolves whole slots. The map is monotone, so the
picks, and their accuracy, stay what they were; only the confidence moves.

Beside each row, the ECE noise: the mean and 90th percentile ECE of outcomes drawn true
with exactly the row's confidences (seeded), what a perfectly calibrated posterior would
show on this many questions. And its Brier floor (``calibration.brier_floor``): the
Brier of the least-squares monotone fit of its own confidences to its own outcomes, in
sample. No monotone recalibration of those confidences, however learned, scores below
it: a target under the floor needs confidences that tell right picks from wrong ones
better, not a map.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.belief_model import calibration, rivals
from worldline.actors.belief_model.calibration import Record
from worldline.actors.fusion import assess
from worldline.protocols.beliefs import Evidence

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from worldline.actors.belief_model.reliability import Claim, Estimate

__all__ = [
    "FOLDS",
    "NOISE_DRAWS",
    "RECORD",
    "RECORDS",
    "TARGET_BRIER",
    "TARGET_ECE",
    "Block",
    "Row",
    "Target",
    "block",
    "core_answers",
    "learned_trust",
    "print_block",
    "recalibrated",
    "rival_answers",
    "row",
    "target",
    "vote_answers",
]

FOLDS: Final = 5
NOISE_DRAWS: Final = 200
TARGET_ECE: Final = 0.05
TARGET_BRIER: Final = 0.10
RECORDS: Final = ("winners", "answers")
RECORD: Final = "winners"
_NOW = datetime(2026, 1, 1, tzinfo=UTC)

# question -> answer -> confidence
Answers = dict[str, dict[str, float]]


class Row(msgspec.Struct, frozen=True, kw_only=True):
    """The winning answers of one way of picking, scored on the gold questions."""

    method: str
    recalibrated: bool
    questions: int
    accuracy: float
    mean_confidence: float
    brier: float
    ece: float
    brier_floor: float  # the lowest Brier any monotone map of these confidences gets
    # ECE of outcomes drawn true with exactly these confidences (a perfectly calibrated
    # posterior), mean and 90th percentile over NOISE_DRAWS seeded draws
    ece_noise: float
    ece_noise_p90: float
    calibrators: tuple[str, ...] = ()  # the method each fold's map chose


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """One way of picking, recalibrated, against the issue's targets."""

    method: str
    ece: float  # recalibrated
    brier: float  # recalibrated
    brier_floor: float  # of the uncalibrated confidences (see the module)
    accuracy: float  # recalibrated
    accuracy_before: float  # uncalibrated
    ece_met: bool  # ece <= TARGET_ECE
    brier_met: bool  # brier <= TARGET_BRIER
    accuracy_met: bool  # accuracy >= accuracy_before


class Block(msgspec.Struct, frozen=True, kw_only=True):
    """Every row of one scenario (as published, or with copies of a bad source)."""

    title: str
    record: str  # what each fold's map was fitted on: "winners" or "answers"
    rows: tuple[Row, ...]  # per method: uncalibrated, then recalibrated
    targets: tuple[Target, ...]  # per method


def vote_answers(claims: Sequence[Claim], questions: set[str]) -> Answers:
    """Each answer's share of the distinct sources answering its question."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for c in sorted(set(claims)):
        if c.question in questions:
            counts[c.question][c.answer] += 1
    out: Answers = {}
    for question, by_answer in sorted(counts.items()):
        total = sum(by_answer.values())
        out[question] = {a: n / total for a, n in sorted(by_answer.items())}
    return out


def rival_answers(
    claims: Sequence[Claim], questions: set[str], trust: Mapping[str, float]
) -> Answers:
    """Each answer's slot posterior (``rivals.read``) under ``trust``."""
    evidence: dict[str, dict[str, list[Evidence]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for i, c in enumerate(sorted(set(claims))):
        if c.question in questions:
            evidence[c.question][c.answer].append(
                Evidence(
                    id=f"e{i:07d}",
                    belief_id=c.answer,
                    direction="supports",
                    kind="citation",
                    source=c.source,
                    observed_at=_NOW,
                    author="bench",
                )
            )
    out: Answers = {}
    for question, by_answer in sorted(evidence.items()):
        members = [rivals.Member(a, a, items) for a, items in sorted(by_answer.items())]
        out[question] = {
            m.id: rivals.read(m.id, None, members, trust, _NOW, question).confidence
            or 0.0
            for m in members
        }
    return out


def learned_trust(result: Estimate) -> dict[str, float]:
    """The trust an assessment gives each source: its learned factor."""
    return {s.source: assess.factor(s.accuracy, s.independence) for s in result.sources}


def core_answers(result: Estimate, questions: set[str]) -> Answers:
    """The reliability core's confidence in each answer."""
    out: Answers = defaultdict(dict)
    for a in result.answers:
        if a.question in questions:
            out[a.question][a.answer] = a.confidence
    return dict(out)


def _winners(answers: Answers) -> dict[str, tuple[str, float]]:
    return {
        q: min(by.items(), key=lambda kv: (-kv[1], kv[0]))
        for q, by in sorted(answers.items())
    }


def _record(
    picks: Mapping[str, tuple[str, float]], gold: Mapping[str, str], q: str
) -> Record:
    answer, conf = picks.get(q, ("", 0.0))
    return Record(confidence=conf, outcome=q in picks and answer == gold[q])


def recalibrated(
    answers: Answers,
    gold: Mapping[str, str],
    folds: int = FOLDS,
    *,
    record: str = RECORD,
) -> tuple[dict[str, float], tuple[str, ...]]:
    """Each gold question's winning confidence through the map fitted on the other
    folds' record, and the method each fold's map chose. ``record``: ``"winners"``,
    one record per question (its winning answer, right or not); ``"answers"``, every
    answer of the question (true for the gold one)."""
    if record not in RECORDS:
        raise ValueError(f"record must be one of {RECORDS}, got {record!r}")
    picks = _winners(answers)
    questions = sorted(q for q in answers if q in gold)
    fold_of = {q: i % folds for i, q in enumerate(questions)}
    out: dict[str, float] = {}
    chosen = []
    for k in range(folds):
        train = [q for q in questions if fold_of[q] != k]
        if record == "winners":
            fitted = [_record(picks, gold, q) for q in train]
        else:
            fitted = [
                Record(confidence=conf, outcome=answer == gold[q])
                for q in train
                for answer, conf in sorted(answers[q].items())
            ]
        cal = calibration.fit(fitted)
        chosen.append(cal.method)
        for q in questions:
            if fold_of[q] == k:
                out[q] = calibration.apply(cal, picks[q][1])
    return out, tuple(chosen)


def _noise(records: Sequence[Record]) -> list[float]:
    """Sorted ECEs of NOISE_DRAWS records at these confidences whose outcomes come
    true with exactly that probability (seeded: the same every run)."""
    rng = random.Random(0)
    return sorted(
        calibration.ece(
            [
                Record(confidence=r.confidence, outcome=rng.random() < r.confidence)
                for r in records
            ]
        )
        for _ in range(NOISE_DRAWS)
    )


def row(
    method: str,
    answers: Answers,
    gold: Mapping[str, str],
    *,
    confidences: Mapping[str, float] | None = None,
    calibrators: tuple[str, ...] = (),
) -> Row:
    """Score the winning answers of ``answers`` against ``gold``, at their own
    confidence or, recalibrated, at ``confidences`` (by question). A gold question
    nobody answered counts as a wrong pick at confidence 0."""
    picks = _winners(answers)
    records = [_record(picks, gold, q) for q in sorted(gold)]
    if confidences is not None:
        records = [
            msgspec.structs.replace(r, confidence=confidences.get(q, r.confidence))
            for q, r in zip(sorted(gold), records, strict=True)
        ]
    noise = _noise(records)
    return Row(
        method=method,
        recalibrated=confidences is not None,
        questions=len(records),
        accuracy=sum(r.outcome for r in records) / len(records),
        mean_confidence=math.fsum(r.confidence for r in records) / len(records),
        brier=calibration.brier(records),
        ece=calibration.ece(records),
        brier_floor=calibration.brier_floor(records),
        ece_noise=math.fsum(noise) / len(noise),
        ece_noise_p90=noise[(len(noise) * 9) // 10],
        calibrators=calibrators,
    )


def block(
    title: str,
    claims: Sequence[Claim],
    gold: Mapping[str, str],
    result: Estimate,
    *,
    record: str = RECORD,
) -> Block:
    """Every row of one scenario; ``result`` is the core's estimate with copy
    detection over ``claims`` (the one an assessment computes)."""
    questions = set(gold)
    methods = {
        "majority vote": vote_answers(claims, questions),
        "worldline, before assessment": rival_answers(claims, questions, {}),
        "worldline, after assessment": rival_answers(
            claims, questions, learned_trust(result)
        ),
        "reliability core": core_answers(result, questions),
    }
    rows: list[Row] = []
    targets: list[Target] = []
    for method, answers in methods.items():
        raw = row(method, answers, gold)
        fixed, chosen = recalibrated(answers, gold, record=record)
        cal = row(method, answers, gold, confidences=fixed, calibrators=chosen)
        rows += [raw, cal]
        targets.append(target(raw, cal))
    return Block(title=title, record=record, rows=tuple(rows), targets=tuple(targets))


def target(raw: Row, fixed: Row) -> Target:
    """``fixed`` (recalibrated) against the targets, beside ``raw`` (uncalibrated)."""
    return Target(
        method=fixed.method,
        ece=fixed.ece,
        brier=fixed.brier,
        brier_floor=raw.brier_floor,
        accuracy=fixed.accuracy,
        accuracy_before=raw.accuracy,
        ece_met=fixed.ece <= TARGET_ECE,
        brier_met=fixed.brier <= TARGET_BRIER,
        accuracy_met=fixed.accuracy >= raw.accuracy,
    )


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def print_block(result: Block) -> None:
    """The table of one scenario, then each recalibrated row against the targets."""
    print(
        f"calibration, {result.title}: the winning answer of each of "
        f"{result.rows[0].questions} gold questions; recalibrated by {FOLDS}-fold "
        f"cross-validation over questions, maps fitted on {result.record}"
    )
    print(
        f"  {'method':<30} {'calibration':<12} {'acc':>6} {'conf':>6} "
        f"{'Brier':>6} {'floor':>6} {'ECE':>6} {'noise':>11}  maps"
    )
    for r in result.rows:
        maps = ",".join(sorted(set(r.calibrators)))
        print(
            f"  {r.method:<30} {'recalibrated' if r.recalibrated else 'none':<12} "
            f"{r.accuracy:>6.3f} {r.mean_confidence:>6.3f} {r.brier:>6.3f} "
            f"{r.brier_floor:>6.3f} {r.ece:>6.3f} "
            f"{r.ece_noise:>5.3f}/{r.ece_noise_p90:<5.3f}  {maps}"
        )
    for t in result.targets:
        print(
            f"  targets, {t.method}, recalibrated: "
            f"ECE {t.ece:.3f} <= {TARGET_ECE} {_met(t.ece_met)}; "
            f"Brier {t.brier:.3f} <= {TARGET_BRIER} {_met(t.brier_met)} "
            f"(floor {t.brier_floor:.3f}); "
            f"accuracy {t.accuracy:.3f} >= {t.accuracy_before:.3f} "
            f"{_met(t.accuracy_met)}"
        )
    print(flush=True)

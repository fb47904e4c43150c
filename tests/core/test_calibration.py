"""Calibration math (issue 25): Brier, ECE, the reliability curve, and the recalibration
map learned from the record; pinned property by property (docs/belief-math.md,
"Calibration")."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model.calibration import (
    MIN_RECORDS,
    Bin,
    Calibrator,
    Method,
    Record,
    Report,
    apply,
    brier,
    brier_floor,
    curve,
    cv_brier,
    ece,
    fit,
    fit_method,
    report,
)

_prob = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
_records = st.lists(
    st.builds(Record, confidence=_prob, outcome=st.booleans()), max_size=60
)
_methods: tuple[Method, ...] = ("identity", "platt", "isotonic")


def _r(confidence: float, outcome: bool) -> Record:
    return Record(confidence=confidence, outcome=outcome)


def _drawn(n: int, seed: int, truth: float = 0.4) -> list[Record]:
    """``n`` records whose posterior over-states its evidence: the chance of coming true
    is ``0.5 + truth * (c - 0.5)``, so with ``truth`` below 1 high confidences are
    right too rarely and low ones too often."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        c = rng.random()
        out.append(_r(c, rng.random() < 0.5 + truth * (c - 0.5)))
    return out


def _applied(cal: Calibrator, records: list[Record]) -> list[Record]:
    return [_r(apply(cal, r.confidence), r.outcome) for r in records]


def test_brier_known_values() -> None:
    assert brier([]) == 0.0
    assert brier([_r(0.8, True), _r(0.3, False)]) == pytest.approx((0.04 + 0.09) / 2)
    assert brier([_r(1.0, True), _r(0.0, False)]) == 0.0
    assert brier([_r(0.5, True), _r(0.5, False)]) == pytest.approx(0.25)


def test_ece_and_curve_known_values() -> None:
    records = [_r(0.15, True), _r(0.15, False)] + [_r(0.85, True)] * 3
    records.append(_r(0.85, False))
    assert curve(records) == (
        Bin(lo=0.1, hi=0.2, count=2, mean_confidence=0.15, frequency=0.5),
        Bin(lo=0.8, hi=0.9, count=4, mean_confidence=0.85, frequency=0.75),
    )
    assert ece(records) == pytest.approx((2 * 0.35 + 4 * 0.10) / 6)
    # One bin: the gap of the means, not the mean of the gaps.
    assert ece(records, bins=1) == pytest.approx(abs((0.3 + 3.4) / 6 - 4 / 6))


def test_curve_puts_certainty_in_the_last_bin_and_leaves_empty_bins_out() -> None:
    table = curve([_r(1.0, True), _r(0.0, False), _r(0.0, True)], bins=4)
    assert [(b.lo, b.hi, b.count) for b in table] == [(0.0, 0.25, 2), (0.75, 1.0, 1)]
    with pytest.raises(ValueError, match="bins"):
        curve([], bins=0)


def test_report_of_an_empty_record() -> None:
    assert report([]) == Report(count=0, brier=0.0, ece=0.0, bins=())


def test_report_gathers_the_three() -> None:
    records = _drawn(200, seed=3)
    got = report(records, bins=5)
    assert got == Report(
        count=200, brier=brier(records), ece=ece(records, 5), bins=curve(records, 5)
    )


def test_a_perfectly_calibrated_record_has_no_calibration_error() -> None:
    records = [
        _r((i + 0.5) / 10, j < 10 * i + 5) for i in range(10) for j in range(100)
    ]
    assert ece(records) == pytest.approx(0.0, abs=1e-12)
    # ...and the fitted map leaves it (nearly) as it is.
    cal = fit(records)
    assert ece(_applied(cal, records)) <= 0.01


def test_an_over_confident_record_is_fixed_by_fit() -> None:
    train, test = _drawn(2000, seed=1), _drawn(2000, seed=2)
    assert ece(test) > 0.1  # the posterior is far off before
    cal = fit(train)
    assert cal.method != "identity"
    assert cal.records == 2000
    fixed = _applied(cal, test)  # scored on records it never saw
    assert ece(fixed) <= 0.05
    assert brier(fixed) < brier(test) - 0.02


def test_an_under_confident_record_is_spread_out() -> None:
    rng = random.Random(5)
    records = []
    for _ in range(1000):
        c = 0.3 + 0.4 * rng.random()  # says 0.3..0.7, is right 0..1 of the time
        records.append(_r(c, rng.random() < (c - 0.3) / 0.4))
    cal = fit(records)
    assert apply(cal, 0.68) > 0.8
    assert apply(cal, 0.32) < 0.2


def test_platt_recovers_a_known_map() -> None:
    records = []
    for i in range(1, 20):
        p = i / 20
        q = 1 / (1 + math.exp(-(2 * math.log(p / (1 - p)) + 0.5)))
        records += [_r(p, j < round(q * 400)) for j in range(400)]
    cal = fit_method(records, "platt")
    assert cal.a == pytest.approx(2.0, abs=0.05)
    assert cal.b == pytest.approx(0.5, abs=0.05)


def test_fit_chooses_isotonic_for_a_step_and_platt_for_a_sigmoid() -> None:
    step = [_r(i / 300, i > 150) for i in range(300)]
    assert fit(step).method == "isotonic"
    rng = random.Random(9)
    smooth = []
    for _ in range(600):
        c = rng.random()
        z = 3 * (math.log(max(c, 1e-6)) - math.log1p(-min(c, 1 - 1e-6)))
        smooth.append(_r(c, rng.random() < 1 / (1 + math.exp(-z))))
    assert fit(smooth).method == "platt"


def test_the_choice_is_the_lowest_cross_validated_brier() -> None:
    records = _drawn(300, seed=4)
    scores = {m: cv_brier(records, m) for m in _methods}
    assert fit(records).method == min(scores, key=lambda m: scores[m])
    with pytest.raises(ValueError, match="folds"):
        cv_brier(records, "platt", folds=1)


def test_fit_stays_identity_below_the_record_it_needs() -> None:
    records = _drawn(MIN_RECORDS - 1, seed=6, truth=0.0)
    assert fit(records) == Calibrator(method="identity", records=MIN_RECORDS - 1)
    assert fit(records, min_records=10).method != "identity"
    assert apply(fit([]), 0.37) == 0.37


def test_a_record_where_confidence_misleads_gets_a_flat_map() -> None:
    records = [_r(i / 100, i < 50) for i in range(100)]  # higher posteriors are wrong
    for method in ("platt", "isotonic"):
        cal = fit_method(records, method)
        assert cal.a >= 0
        assert apply(cal, 0.0) == pytest.approx(apply(cal, 1.0), abs=1e-9)


def test_isotonic_never_claims_certainty() -> None:
    cal = fit_method([_r(0.1, False)] * 20 + [_r(0.9, True)] * 20, "isotonic")
    assert 0 < apply(cal, 0.0) < 0.01
    assert 0.99 < apply(cal, 1.0) < 1


def test_the_brier_floor_known_values() -> None:
    assert brier_floor([]) == 0.0
    # Higher confidence came true less often: the best monotone map is flat, 0.5.
    assert brier_floor([_r(0.2, True), _r(0.8, False)]) == pytest.approx(0.25)
    # Confidence that separates true from false can be mapped to certainty.
    assert brier_floor([_r(0.4, False), _r(0.6, True)]) == 0.0
    # Ties cannot be split: two records at 0.7, one true, floor 0.25 each.
    assert brier_floor([_r(0.7, True), _r(0.7, False)]) == pytest.approx(0.25)
    # A tie is pooled whole before any pooling across confidences: 0.0 stays apart.
    tied = [_r(0.0, False), _r(0.5, False), _r(0.5, True)]
    assert brier_floor(tied) == pytest.approx(1 / 6)
    assert apply(fit_method(tied, "isotonic"), 0.0) < 0.01


@settings(max_examples=60, deadline=None)
@given(_records, st.sampled_from(_methods))
def test_no_fitted_map_beats_the_brier_floor_in_sample(
    records: list[Record], method: Method
) -> None:
    floor = brier_floor(records)
    assert floor <= brier(records) + 1e-12
    assert floor <= brier(_applied(fit_method(records, method), records)) + 1e-12


def test_nan_is_refused() -> None:
    with pytest.raises(ValueError, match="NaN"):
        apply(Calibrator(method="identity"), math.nan)


@settings(max_examples=60, deadline=None)
@given(_records, st.sampled_from(_methods), _prob, _prob)
def test_apply_is_monotone_and_bounded(
    records: list[Record], method: Method, x: float, y: float
) -> None:
    for cal in (fit_method(records, method), fit(records, min_records=5)):
        lo, hi = sorted((x, y))
        assert 0.0 <= apply(cal, lo) <= apply(cal, hi) <= 1.0
        assert list(cal.xs) == sorted(set(cal.xs))
        assert list(cal.ys) == sorted(cal.ys)


@settings(max_examples=60, deadline=None)
@given(_records, st.randoms(use_true_random=False))
def test_fit_and_scores_ignore_the_order_of_the_record(
    records: list[Record], rng: random.Random
) -> None:
    shuffled = list(records)
    rng.shuffle(shuffled)
    assert fit(shuffled, min_records=5) == fit(records, min_records=5)
    assert report(shuffled) == report(records)


@settings(max_examples=60, deadline=None)
@given(_records)
def test_scores_are_bounded(records: list[Record]) -> None:
    got = report(records)
    assert 0.0 <= got.brier <= 1.0
    assert 0.0 <= got.ece <= 1.0
    assert sum(b.count for b in got.bins) == len(records)
    # Up to rounding: a bin's mean lies within its bounds.
    assert all(b.lo - 1e-12 <= b.mean_confidence <= b.hi + 1e-12 for b in got.bins)

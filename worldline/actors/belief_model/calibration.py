"""Calibration of posteriors against their own record (issue 25). Pure, deterministic,
stdlib only: resolved beliefs in, scores and a recalibration map out.

A record is ``(confidence, outcome)``: the posterior a belief had just before its
outcome was known, and whether it turned out true. docs/belief-math.md, "Calibration",
has the formulas and the reasons for each default.

- :func:`brier`: the mean squared gap between confidence and outcome (0 is perfect; a
  constant 0.5 scores 0.25).
- :func:`curve`: the reliability curve over ``bins`` equal-width bins of confidence
  (empty bins left out): each bin's mean confidence beside how often its records came
  true.
- :func:`ece`: expected calibration error, the record-weighted mean gap between a bin's
  mean confidence and its frequency.
- :func:`fit`: a monotone map from posterior to recalibrated posterior, learned from the
  record: the identity below ``MIN_RECORDS`` records; above, whichever of the identity,
  Platt scaling on log-odds and isotonic regression has the lowest ``FOLDS``-fold
  cross-validated Brier score (ties to the simpler, in that order).
- :func:`apply`: the map, monotone non-decreasing and bounded in [0, 1].
- :func:`brier_floor`: the lowest Brier any monotone map of the confidences can reach on
  the record itself (how much a recalibration could ever help).

Records are sorted by ``(confidence, outcome)`` before any sum or split, so any
permutation of the same record gives byte-identical results.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, Final, Literal

import msgspec

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "FOLDS",
    "MIN_RECORDS",
    "Bin",
    "Calibrator",
    "Method",
    "Record",
    "Report",
    "apply",
    "brier",
    "brier_floor",
    "curve",
    "cv_brier",
    "ece",
    "fit",
    "fit_method",
    "report",
]

# Below this many resolved beliefs the record is too thin to learn a map from: with 30,
# each of the 5 folds scores 6 held-out records and the choice is not mostly noise.
MIN_RECORDS: Final = 30
FOLDS: Final = 5  # cross-validation folds that choose the method
# Confidences are clipped to [_EPS, 1 - _EPS] before a logit, so 0 and 1 stay finite.
_EPS: Final = 1e-6
# Isotonic values are kept off 0 and 1: a finite record never proves a certainty.
_ISO_EPS: Final = 1e-3
_NEWTON_ROUNDS: Final = 100
_NEWTON_TOL: Final = 1e-10
_RIDGE: Final = 1e-9  # keeps Platt's Newton step solvable when every record is alike

Method = Literal["identity", "platt", "isotonic"]
_METHODS: Final[tuple[Method, ...]] = ("identity", "platt", "isotonic")


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """One resolved belief: its posterior before the outcome, and the outcome."""

    confidence: float  # the posterior just before the outcome was known, 0..1
    outcome: bool  # True: the belief turned out true


class Bin(msgspec.Struct, frozen=True, kw_only=True):
    """One bin of the reliability curve: confidences in [lo, hi) ([lo, hi] for the
    last)."""

    lo: float
    hi: float
    count: int
    mean_confidence: float
    frequency: float  # share of the bin's records that came true


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """Brier, ECE and the reliability curve of one record."""

    count: int
    brier: float
    ece: float
    bins: tuple[Bin, ...]


class Calibrator(msgspec.Struct, frozen=True, kw_only=True):
    """A monotone map from posterior to recalibrated posterior (:func:`apply`)."""

    method: Method
    records: int = 0  # resolved beliefs it was fitted on
    a: float = 1.0  # Platt on log-odds: p' = sigmoid(a * logit(p) + b)
    b: float = 0.0
    # Isotonic: knots of a non-decreasing piecewise-linear map, flat outside them.
    xs: tuple[float, ...] = ()
    ys: tuple[float, ...] = ()


def _clip(confidence: float, eps: float = 0.0) -> float:
    if math.isnan(confidence):
        raise ValueError("a confidence is NaN; pass a probability in [0, 1]")
    return min(max(confidence, eps), 1.0 - eps)


def _sorted(records: Sequence[Record]) -> list[tuple[float, bool]]:
    return sorted((_clip(r.confidence), r.outcome) for r in records)


def _logit(p: float) -> float:
    p = _clip(p, _EPS)
    return math.log(p) - math.log1p(-p)


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def _brier(pairs: Sequence[tuple[float, bool]]) -> float:
    if not pairs:
        return 0.0
    return math.fsum((c - o) ** 2 for c, o in pairs) / len(pairs)


def brier(records: Sequence[Record]) -> float:
    """Mean of ``(confidence - outcome)**2``; 0.0 for an empty record."""
    return _brier(_sorted(records))


def curve(records: Sequence[Record], bins: int = 10) -> tuple[Bin, ...]:
    """The reliability curve: ``bins`` equal-width bins over [0, 1], empty ones left
    out, in order of confidence.

    Raises:
        ValueError: if ``bins`` is below 1.
    """
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    grouped: dict[int, list[tuple[float, bool]]] = {}
    for c, o in _sorted(records):
        grouped.setdefault(min(int(c * bins), bins - 1), []).append((c, o))
    return tuple(
        Bin(
            lo=i / bins,
            hi=(i + 1) / bins,
            count=len(items),
            mean_confidence=math.fsum(c for c, _ in items) / len(items),
            frequency=sum(o for _, o in items) / len(items),
        )
        for i, items in sorted(grouped.items())
    )


def ece(records: Sequence[Record], bins: int = 10) -> float:
    """Expected calibration error: sum over bins of ``count / n * |mean confidence -
    frequency|``; 0.0 for an empty record."""
    table = curve(records, bins)
    total = sum(b.count for b in table)
    if not total:
        return 0.0
    return math.fsum(b.count * abs(b.mean_confidence - b.frequency) for b in table) / (
        total
    )


def report(records: Sequence[Record], bins: int = 10) -> Report:
    """Brier, ECE and the curve of ``records`` in one value."""
    return Report(
        count=len(records),
        brier=brier(records),
        ece=ece(records, bins),
        bins=curve(records, bins),
    )


def _platt(pairs: Sequence[tuple[float, bool]]) -> tuple[float, float]:
    """Logistic regression of the outcome on logit(confidence), by Newton's method with
    step halving, on Platt's smoothed targets ((N+ + 1) / (N+ + 2) for a true outcome,
    1 / (N- + 2) for a false one) so that a separable record still has a finite fit."""
    positives = sum(o for _, o in pairs)
    negatives = len(pairs) - positives
    hit, miss = (positives + 1) / (positives + 2), 1 / (negatives + 2)
    data = [(_logit(c), hit if o else miss) for c, o in pairs]

    def loss(a: float, b: float) -> float:
        total = []
        for x, t in data:
            p = _clip(_sigmoid(a * x + b), 1e-15)
            total.append(t * math.log(p) + (1 - t) * math.log1p(-p))
        return -math.fsum(total)

    a, b = 1.0, 0.0
    current = loss(a, b)
    for _ in range(_NEWTON_ROUNDS):
        ga = gb = haa = hab = hbb = 0.0
        for x, t in data:
            p = _sigmoid(a * x + b)
            w = p * (1 - p)
            ga += (p - t) * x
            gb += p - t
            haa += w * x * x
            hab += w * x
            hbb += w
        haa, hbb = haa + _RIDGE, hbb + _RIDGE
        det = haa * hbb - hab * hab
        if det <= 0:
            break
        da = (hbb * ga - hab * gb) / det
        db = (haa * gb - hab * ga) / det
        step = 1.0
        while step > 1e-8:
            na, nb = a - step * da, b - step * db
            candidate = loss(na, nb)
            if candidate <= current:
                break
            step /= 2
        else:
            break
        moved = max(abs(na - a), abs(nb - b))
        a, b, current = na, nb, candidate
        if moved < _NEWTON_TOL:
            break
    if a < 0:
        # A record where higher posteriors come true less often: no monotone map uses
        # that; the best non-decreasing one is the constant base rate.
        a, b = 0.0, _logit((positives + 1) / (len(pairs) + 2))
    return a, b


def _isotonic(
    pairs: Sequence[tuple[float, bool]], eps: float = _ISO_EPS
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Pool-adjacent-violators over the distinct confidences (integer sums, so the
    comparisons are exact); each pooled block contributes its lowest and highest
    confidence as knots at the block's frequency."""
    groups: list[tuple[float, int, int]] = []  # (confidence, trues, count)
    for c, o in pairs:
        if groups and groups[-1][0] == c:
            groups[-1] = (c, groups[-1][1] + o, groups[-1][2] + 1)
        else:
            groups.append((c, int(o), 1))
    blocks: list[tuple[float, float, int, int]] = []  # (lo, hi, trues, count)
    for c, trues, count in groups:
        blocks.append((c, c, trues, count))
        while len(blocks) > 1 and blocks[-2][2] * blocks[-1][3] >= (
            blocks[-1][2] * blocks[-2][3]
        ):
            lo, _, trues, count = blocks.pop(-2)
            _, hi, more, extra = blocks[-1]
            blocks[-1] = (lo, hi, trues + more, count + extra)
    xs: list[float] = []
    ys: list[float] = []
    for lo, hi, trues, count in blocks:
        y = _clip(trues / count, eps)
        for x in (lo, hi) if hi > lo else (lo,):
            xs.append(float(x))
            ys.append(y)
    return tuple(xs), tuple(ys)


def brier_floor(records: Sequence[Record]) -> float:
    """The lowest Brier score any monotone non-decreasing map of the confidences gets
    on ``records`` themselves: that of the least-squares isotonic fit (pool adjacent
    violators), unclipped, in sample. A Brier target below it needs confidences that
    tell true from false better, not a recalibration. 0.0 for an empty record."""
    pairs = _sorted(records)
    if not pairs:
        return 0.0
    xs, ys = _isotonic(pairs, 0.0)
    cal = Calibrator(method="isotonic", records=len(pairs), xs=xs, ys=ys)
    return _brier([(apply(cal, c), o) for c, o in pairs])


def fit_method(records: Sequence[Record], method: Method) -> Calibrator:
    """Fit one method on all of ``records``, whatever their number."""
    pairs = _sorted(records)
    if method == "identity" or not pairs:
        return Calibrator(method="identity", records=len(pairs))
    if method == "platt":
        a, b = _platt(pairs)
        return Calibrator(method="platt", records=len(pairs), a=a, b=b)
    xs, ys = _isotonic(pairs)
    return Calibrator(method="isotonic", records=len(pairs), xs=xs, ys=ys)


def cv_brier(records: Sequence[Record], method: Method, folds: int = FOLDS) -> float:
    """Brier of ``method`` under ``folds``-fold cross-validation: the records sorted by
    ``(confidence, outcome)``, record ``i`` held out in fold ``i % folds`` (so each fold
    spans the whole range of confidence), each scored by a map fitted on the others.

    Raises:
        ValueError: if ``folds`` is below 2.
    """
    if folds < 2:
        raise ValueError(f"folds must be at least 2, got {folds}")
    pairs = _sorted(records)
    if not pairs:
        return 0.0
    squares: list[float] = []
    for k in range(folds):
        train = [
            Record(confidence=c, outcome=o)
            for i, (c, o) in enumerate(pairs)
            if i % folds != k
        ]
        cal = fit_method(train, method)
        squares.extend(
            (apply(cal, c) - o) ** 2 for i, (c, o) in enumerate(pairs) if i % folds == k
        )
    return math.fsum(squares) / len(squares)


def fit(records: Sequence[Record], *, min_records: int = MIN_RECORDS) -> Calibrator:
    """The recalibration map the record supports.

    Below ``min_records`` records: the identity (the record is too thin). Otherwise the
    method among identity, Platt and isotonic with the lowest :func:`cv_brier`, ties to
    the simpler in that order, fitted on every record.
    """
    n = len(records)
    if n < max(min_records, FOLDS):
        return Calibrator(method="identity", records=n)
    scores = [(cv_brier(records, m), rank, m) for rank, m in enumerate(_METHODS)]
    return fit_method(records, min(scores)[2])


def apply(cal: Calibrator, confidence: float) -> float:
    """The recalibrated posterior: monotone non-decreasing in ``confidence``, in [0, 1].

    Raises:
        ValueError: if ``confidence`` is NaN.
    """
    p = _clip(confidence)
    if cal.method == "platt":
        return _sigmoid(max(cal.a, 0.0) * _logit(p) + cal.b)
    if cal.method == "isotonic" and cal.xs:
        xs, ys = cal.xs, cal.ys
        i = bisect.bisect_right(xs, p)
        if i == 0:
            return ys[0]
        if i == len(xs):
            return ys[-1]
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        # Clamped to the segment so rounding never lifts a point above the next knot.
        return min(max(y0 + (y1 - y0) * ((p - x0) / (x1 - x0)), y0), y1)
    return p

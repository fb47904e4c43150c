"""One round of the reliability fixed point's accuracy update (issue 25): each
source's own equation solved to first order, damped, in log-odds. Pure.

The plain update ``A(s) <- U_s(A)`` (the mean confidence of ``s``'s answers shrunk
toward the prior, :mod:`.reliability`) converges slowly, or drifts, when a source's
confidences rest on its own vote: on a question it alone answers, ``C = A`` exactly,
so a source with ``m`` such questions among ``m + c`` moves only ``c / (m + c)`` of
the way each round; where it stands against others, its vote lifts its own answers.
So each round:

- questions one source alone answers, with one answer (``alone``), are not iterated:
  at any fixed point they hold ``C = A`` (``C = 1 / (n + 1)`` where the vote is floored
  at 0, ``C = CEIL`` above it), so ``A`` solves the equation over its other
  ``contested`` claims and these enter only where that solution falls outside
  ``[1 / (n + 1), CEIL]``. Same fixed point as iterating them, without the slow mode;
- the equation over the contested claims, ``A = U_s(A)`` with every other source held,
  takes one Newton step: ``A + (U_s - A) / (1 - U_s')``, ``U_s'`` the derivative of
  ``s``'s update in its own accuracy (its vote's share in its answers' confidences),
  the denominator at least ``MIN_SLOPE`` (where ``U_s' >= 1`` the source's own vote
  would carry it to a bound: it moves toward it at a bounded pace);
- the step is multiplied by ``DAMPING`` and capped at ``MAX_STEP`` in log-odds; a
  source whose step changes sign from one round to the next without halving (it is
  not settling) halves its pace, down to ``MIN_PACE``, and doubles it back (up to 1)
  each round its step keeps its sign, so no source alternates for ever.

A fixed point of this update is a fixed point of the plain one, and conversely.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Final

import msgspec

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CEIL",
    "DAMPING",
    "FLOOR",
    "MAX_STEP",
    "MIN_PACE",
    "MIN_SLOPE",
    "Moves",
    "Shrink",
    "update",
]

FLOOR: Final = 1e-3  # accuracies are clamped to [FLOOR, CEIL]
CEIL: Final = 1.0 - 1e-3
DAMPING: Final = 0.7  # share of the Newton step taken each round
MAX_STEP: Final = 1.0  # largest change of one accuracy's log-odds in a round
MIN_SLOPE: Final = 0.1  # the Newton denominator's floor: a step is at most 10x plain
MIN_PACE: Final = 1.0 / 64  # the least share of its step an overshooting source takes

# A question's table: answer -> ((source, weight), ...) with sources sorted.
_Table = dict[str, tuple[tuple[str, float], ...]]


class Shrink(msgspec.Struct, frozen=True, kw_only=True):
    """The prior an accuracy is shrunk toward and the update's knobs."""

    accuracy: float  # the prior accuracy
    claims: float  # its weight, in pseudo-claims
    false_values: int
    damping: float = DAMPING
    max_step: float = MAX_STEP


class Moves(msgspec.Struct, frozen=True, kw_only=True):
    """The accuracies after a round, each one's move, and each one's pace."""

    accuracy: dict[str, float]
    step: dict[str, float] = msgspec.field(default_factory=dict)  # new - old
    pace: dict[str, float] = msgspec.field(default_factory=dict)  # absent: 1.0


def _slope(accuracy: float, n: int) -> float:
    """d vote / d accuracy: 0 where the vote is clamped or floored at 0."""
    if accuracy <= FLOOR or accuracy >= CEIL or n * accuracy <= 1.0 - accuracy:
        return 0.0
    return 1.0 / (accuracy * (1.0 - accuracy))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def update(
    contested: Mapping[str, _Table],
    conf: Mapping[str, Mapping[str, float]],
    accuracy: Mapping[str, float],
    counts: Mapping[str, int],
    alone: Mapping[str, int],
    shrink: Shrink,
    last: Moves,
) -> Moves:
    """Every source's next accuracy, from the confidences ``conf`` of the
    ``contested`` questions at ``accuracy`` (``counts``: questions per source;
    ``alone``: those it alone answers, with one answer; ``last``: the previous round's
    moves)."""
    n = shrink.false_values
    mass: dict[str, list[float]] = defaultdict(list)
    slope: dict[str, list[float]] = defaultdict(list)
    for question, table in contested.items():
        c = conf[question]
        # source -> (answer, weight) for each answer it gives
        mine: dict[str, list[tuple[str, float]]] = defaultdict(list)
        for answer, providers in table.items():
            for source, weight in providers:
                mass[source].append(weight * c[answer])
                mine[source].append((answer, weight))
        for source, given in mine.items():
            t = _slope(accuracy[source], n)
            if t == 0.0:
                continue
            # d C(v) / d A(s) = C(v) (w_v - sum_u C(u) w_u) d vote / d A, independence
            # left out: two sources giving the same answers move alike (an ordering
            # of providers by accuracy that flipped each round would not converge).
            cross = math.fsum(c[u] * w for u, w in given)
            for answer, w in given:
                slope[source].append(w * c[answer] * (w - cross) * t)
    out: dict[str, float] = {}
    pace = dict(last.pace)
    k, prior = shrink.claims, shrink.accuracy
    low = 1.0 / (n + 1)
    for source in counts:
        a = accuracy[source]
        m = alone.get(source, 0)
        rest = counts[source] - m
        if k + rest <= 0:  # no prior and nothing but lone answers: nothing to learn
            out[source] = a
            continue
        held = k * prior + math.fsum(mass[source])
        target = held / (k + rest)
        derivative = math.fsum(slope[source]) / (k + rest)
        step = (target - a) / max(1.0 - derivative, MIN_SLOPE)
        step *= shrink.damping * pace.get(source, 1.0)
        before = last.step.get(source, 0.0)
        if step * before < 0.0 and abs(step) > abs(before) / 2:  # not settling
            pace[source] = max(pace.get(source, 1.0) / 2.0, MIN_PACE)
            step /= 2.0
        elif step * before > 0.0 and source in pace:  # on its way again
            pace[source] = min(pace[source] * 2.0, 1.0)
            if pace[source] == 1.0:
                del pace[source]
        x = _logit(a)
        moved = min(max(a + step, FLOOR), CEIL)
        x = min(max(_logit(moved), x - shrink.max_step), x + shrink.max_step)
        new = min(max(1.0 / (1.0 + math.exp(-x)), FLOOR), CEIL)
        if m and target < low:  # its lone answers sit at the floored vote's 1/(n+1)
            new = max((held + m * low) / (k + rest + m), FLOOR)
        elif m and target > CEIL:  # ... or at the clamped accuracy's confidence
            new = min((held + m * CEIL) / (k + rest + m), CEIL)
        out[source] = new
    return Moves(
        accuracy=out,
        step={s: out[s] - accuracy[s] for s in counts},
        pace=dict(sorted(pace.items())),
    )

"""Expected information gain of a move: how much checking one belief is expected to
settle the goals that rest on it. Pure and deterministic (no clock, no randomness);
the projector ranks its moves by :func:`gains`. docs/worldview.md explains it for a
user.

The model, for a candidate move "check belief X":

- X's posterior is a Beta(alpha, beta). Read from a belief as the projector holds it
  (its confidence and its sd), :func:`beta_parameters` recovers the pair by moments:
  the concentration is the *net* evidence (disagreement widens the sd in
  :func:`worldline.actors.belief_model.posterior.spread`, so a disputed belief counts
  as less settled, and one more piece of evidence moves it further).
- One more piece of evidence of weight ``w`` (default :data:`PROBE`, a measurement's
  weight: what a check produces) either supports X, with the predictive probability
  ``p = alpha / (alpha + beta)``, giving Beta(alpha + w, beta), or refutes it, giving
  Beta(alpha, beta + w) (:func:`preposterior`). The posterior mean is a martingale:
  ``p * mean_support + (1 - p) * mean_refute`` is the mean now, for any ``w``.
- X's own gain is the Bernoulli entropy of its mean now less the expected entropy
  after the evidence, weighted by the predictive probabilities (:func:`own_gain`).
  It is never negative (entropy is concave and the mean a martingale).
- The goals rest on X along ``depends_on`` and ``derived_from`` edges (the dependent
  rests on what it points at) and ``supports`` edges (the supported rests on its
  support), each with its edge's confidence as strength (:func:`premise_edges`). A
  goal's outlook is its effective confidence with a stated confidence of 1 (it holds
  if what it rests on holds): :func:`worldline.actors.belief_model.posterior.
  effective_confidence` over the goal's premises, which scales a dependent by
  ``1 - strength * (1 - premise)`` along every path. The gain toward goal G is the
  entropy of G's outlook now less its expected entropy after the evidence on X, each
  outcome read through the same function (:func:`gains`). Effective confidence is
  multilinear in each premise on an acyclic graph, so this gain is never negative
  either; it is zero when G does not rest on X, and small when G is settled by
  another premise whatever X turns out to be.
- A move's total is the sum of its gains toward goals plus :data:`OWN_SHARE` of its
  own gain weighted by its load (how much rests on it, e.g. its local influence,
  relative to the most load-bearing candidate): a move that serves no goal still
  informs its own belief and what rests on it, but ranks below one that serves a
  goal about as much.

Entropies are in bits.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from worldline.actors.belief_model.posterior import (
    KIND_WEIGHT,
    PRIOR_STRENGTH,
    effective_confidence,
)
from worldline.protocols.beliefs import BeliefEdge

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "OPEN",
    "OWN_SHARE",
    "PROBE",
    "SETTLED",
    "Gain",
    "beta_parameters",
    "entropy",
    "expected_entropy",
    "gains",
    "own_gain",
    "pair_of",
    "premise_edges",
    "premises",
    "preposterior",
]

PROBE: Final = KIND_WEIGHT["measurement"]  # the weight of the evidence a check yields
OWN_SHARE: Final = 0.1  # what a move's own gain counts beside its gains toward goals
# An open question (a gap): no evidence either way, as a claim stated at 0.5.
OPEN: Final = (0.5 * PRIOR_STRENGTH, 0.5 * PRIOR_STRENGTH)
_MIN_CONCENTRATION: Final = 1e-6
SETTLED: Final = 1e9  # the most pseudo-observations a belief is read as holding
_EDGE: Final = 1e-9  # a mean this close to 0 or 1 counts as settled
_PREMISE_TYPES: Final = frozenset({"depends_on", "derived_from", "supports"})


def entropy(p: float) -> float:
    """The Bernoulli entropy of ``p`` in bits (0 at 0 and 1, 1 at 0.5).

    Raises:
        ValueError: ``p`` is not a probability.
    """
    if not 0.0 <= p <= 1.0 or math.isnan(p):
        raise ValueError(f"entropy of {p!r}: a probability in [0, 1] is needed")
    if p in (0.0, 1.0):
        return 0.0
    return -(p * math.log2(p) + (1.0 - p) * math.log2(1.0 - p))


def beta_parameters(confidence: float, sd: float) -> tuple[float, float]:
    """The Beta(alpha, beta) with mean ``confidence`` and standard deviation ``sd``
    (moments: concentration ``m (1 - m) / sd^2 - 1``). An sd at or beyond the widest
    a Beta with that mean can have gives the least concentrated pair.

    Raises:
        ValueError: ``confidence`` outside (0, 1) or a negative ``sd``.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(
            f"confidence {confidence!r}: a Beta needs a mean strictly inside (0, 1)"
        )
    if sd < 0.0 or math.isnan(sd):
        raise ValueError(f"sd {sd!r}: a standard deviation is at least 0")
    spread = confidence * (1.0 - confidence)
    concentration = spread / (sd * sd) - 1.0 if sd > 0.0 else math.inf
    if math.isinf(concentration):
        raise ValueError(
            "sd 0: a Beta with no spread holds infinite evidence; pass the belief's "
            "posterior sd"
        )
    concentration = max(concentration, _MIN_CONCENTRATION)
    return confidence * concentration, (1.0 - confidence) * concentration


def _check(alpha: float, beta: float, weight: float) -> None:
    if not (alpha > 0.0 and beta > 0.0):
        raise ValueError(f"Beta({alpha!r}, {beta!r}): both parameters must be positive")
    if not weight > 0.0:
        raise ValueError(f"evidence weight {weight!r}: must be positive")


def preposterior(
    alpha: float, beta: float, weight: float = PROBE
) -> tuple[tuple[float, float], tuple[float, float]]:
    """The two outcomes of one more piece of evidence of ``weight``, each as
    (predictive probability, posterior mean): supporting, then refuting.

    Raises:
        ValueError: a parameter is not positive.
    """
    _check(alpha, beta, weight)
    total = alpha + beta
    p = alpha / total
    return (p, (alpha + weight) / (total + weight)), (1.0 - p, alpha / (total + weight))


def expected_entropy(alpha: float, beta: float, weight: float = PROBE) -> float:
    """The belief's entropy after one more piece of evidence, in expectation over
    the predictive probability of each outcome."""
    (p_s, m_s), (p_r, m_r) = preposterior(alpha, beta, weight)
    return p_s * entropy(m_s) + p_r * entropy(m_r)


def own_gain(alpha: float, beta: float, weight: float = PROBE) -> float:
    """The expected entropy reduction of the belief itself (never negative)."""
    _check(alpha, beta, weight)
    now = entropy(alpha / (alpha + beta))
    return max(0.0, now - expected_entropy(alpha, beta, weight))


def premise_edges(edges: Iterable[BeliefEdge]) -> list[BeliefEdge]:
    """The edges along which one belief rests on another, each as a ``depends_on``
    from the dependent to its premise with the edge's confidence as strength:
    ``depends_on`` and ``derived_from`` as they are, ``supports`` reversed (the
    supported rests on its support). Removed edges and edges believed absent
    (confidence 0) carry nothing; other types (``contradicts``...) are not premises.
    Sorted by id."""
    found = []
    for e in sorted(edges, key=lambda e: e.id):
        if e.removed or e.confidence <= 0.0 or e.type not in _PREMISE_TYPES:
            continue
        dependent, premise = (
            (e.target, e.source) if e.type == "supports" else (e.source, e.target)
        )
        if dependent == premise:
            continue
        found.append(
            BeliefEdge(
                id=e.id,
                type="depends_on",
                source=dependent,
                target=premise,
                confidence=e.confidence,
            )
        )
    return found


def premises(start: str, rest: Sequence[BeliefEdge]) -> set[str]:
    """Every belief ``start`` rests on, directly or through others, along the
    :func:`premise_edges` ``rest`` (without ``start`` itself)."""
    onward: dict[str, list[str]] = {}
    for e in rest:
        onward.setdefault(e.source, []).append(e.target)
    seen: set[str] = set()
    queue = deque([start])
    while queue:
        for premise in onward.get(queue.popleft(), ()):
            if premise not in seen and premise != start:
                seen.add(premise)
                queue.append(premise)
    return seen


@dataclass(frozen=True, slots=True)
class Gain:
    """What checking one belief is expected to settle, in bits: its own entropy
    reduction and the reduction of each goal's outlook that rests on it."""

    belief: str
    own: float
    goals: dict[str, float] = field(default_factory=dict)
    # How much the world rests on it, relative to the most load-bearing candidate
    # (0-1): what its own gain is weighted by.
    load: float = 1.0

    @property
    def toward_goals(self) -> float:
        return sum(self.goals[g] for g in sorted(self.goals))

    @property
    def total(self) -> float:
        """The move's value: its gains toward goals plus a share of its own,
        weighted by how much rests on it."""
        return self.toward_goals + OWN_SHARE * self.load * self.own

    def served(self) -> list[tuple[str, float]]:
        """The goals it serves (a positive gain), the most served first."""
        return sorted(
            ((g, v) for g, v in self.goals.items() if v > 0.0),
            key=lambda item: (-item[1], item[0]),
        )


def gains(
    beliefs: Mapping[str, tuple[float, float]],
    goals: Iterable[str],
    edges: Iterable[BeliefEdge],
    weight: float = PROBE,
    load: Mapping[str, float] | None = None,
) -> dict[str, Gain]:
    """The expected information gain of checking each belief of ``beliefs``.

    Args:
        beliefs: the candidates (and every belief a goal may rest on) by id, each as
            its posterior's (alpha, beta); :func:`beta_parameters` reads them from a
            belief's confidence and sd, :data:`OPEN` stands for an open question.
        goals: the goal beliefs' ids (a goal carries no probability: its outlook is
            its effective confidence with a stated confidence of 1).
        edges: the belief edges (any type; :func:`premise_edges` keeps the premises).
        weight: the weight of the one more piece of evidence a check yields.
        load: how much rests on each belief (its influence, any positive scale;
            default: the same for all), divided by the largest among the
            candidates: what a move's own gain is weighted by.

    Returns:
        A :class:`Gain` per belief of ``beliefs`` that is not a goal.

    Raises:
        ValueError: a parameter is not positive.
    """
    goal_ids = sorted(set(goals))
    goal_set = set(goal_ids)
    ids = [bid for bid in sorted(beliefs) if bid not in goal_set]
    loads = {bid: max(0.0, (load or {}).get(bid, 1.0)) for bid in ids}
    heaviest = max(loads.values(), default=0.0)
    found = {
        bid: Gain(
            bid,
            own_gain(*beliefs[bid], weight),
            load=loads[bid] / heaviest if heaviest > 0 else 0.0,
        )
        for bid in ids
    }
    rest = premise_edges(edges)
    for goal in goal_ids:
        under = premises(goal, rest)
        if not under & found.keys():
            continue
        scope = under | {goal}
        local = [e for e in rest if e.source in scope and e.target in scope]
        # A goal holds if what it rests on holds; a belief the caller does not hold
        # (outside a bounded scene) counts as holding: the path through it still
        # carries its edges' strengths.
        base = {
            b: _mean(beliefs[b]) if b in beliefs and b not in goal_set else 1.0
            for b in sorted(scope)
        }
        now = entropy(_clamped(effective_confidence(base, local)[goal]))
        for candidate in sorted(under & found.keys()):
            expected = 0.0
            for p, mean in preposterior(*beliefs[candidate], weight):
                after = effective_confidence({**base, candidate: mean}, local)[goal]
                expected += p * entropy(_clamped(after))
            found[candidate].goals[goal] = max(0.0, now - expected)
    return found


def pair_of(confidence: float | None, sd: float | None) -> tuple[float, float]:
    """A belief's (alpha, beta) from what the projector holds: its confidence and
    posterior sd (:func:`beta_parameters`); :data:`OPEN` for an open question (no
    confidence); a belief with no spread, or stated at 0 or 1, as nearly settled
    (:data:`SETTLED` pseudo-observations)."""
    if confidence is None or sd is None:
        return OPEN
    mean = min(max(confidence, _EDGE), 1.0 - _EDGE)
    if sd <= 0.0 or mean != confidence:
        return mean * SETTLED, (1.0 - mean) * SETTLED
    alpha, beta = beta_parameters(mean, sd)
    if alpha + beta > SETTLED:
        return mean * SETTLED, (1.0 - mean) * SETTLED
    return alpha, beta


def _mean(pair: tuple[float, float]) -> float:
    alpha, beta = pair
    return alpha / (alpha + beta)


def _clamped(p: float) -> float:
    return min(1.0, max(0.0, p))

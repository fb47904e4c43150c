"""The belief math, defined once. Pure, deterministic, vectorized with numpy; the clock
is an argument. Fusion and the projector import these functions; nothing
re-implements them.

Model (docs/belief-math.md has the formulas and the reasons for each default):

- A stated confidence c is a weak Beta prior: alpha0 = c * PRIOR_STRENGTH,
  beta0 = (1 - c) * PRIOR_STRENGTH.
- Each evidence item contributes w = KIND_WEIGHT[kind] * decay * trust, where
  decay = 0.5 ** (age / HALF_LIFE[kind]) at the clock ``now``, and trust multiplies the
  trust set for its source and for its reporting agent (default 1).
- Corroboration is a likelihood, not a vote: per (voice, direction) only the strongest
  item counts. Ten paraphrases from one source weigh as one; ten sources as ten when
  they are ten voices (a voice is an independent source, :func:`voice_of`: twenty
  names one agent invented are one voice, that agent's).
- alpha = alpha0 + sum(supporting groups), beta = beta0 + sum(refuting groups);
  neutral groups add to the evidence weight only. confidence = alpha / (alpha + beta);
  uncertainty = the Beta standard deviation, with the weight on which the two sides
  disagree counted once on neither side: disagreement widens it (see :func:`spread`).
- ``stable`` needs STABLE_WEIGHT of support plus refutation (neutral settles nothing)
  and is never on a disputed claim: one whose minority side carries at least
  CONTRADICTION_MIN and DISPUTE_RATIO of the majority's weight.
- Inputs are sorted by evidence id before any sum, so every permutation of the same
  evidence gives byte-identical floats (what lets fusion shard).
"""

from __future__ import annotations

import math
import operator
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

import msgspec
import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from datetime import datetime

    from worldline.protocols.beliefs import BeliefEdge, Evidence

__all__ = [
    "CONTRADICTION_RATIO",
    "DISPUTE_RATIO",
    "HALF_LIFE_DAYS",
    "KIND_WEIGHT",
    "NO_PROBABILITY",
    "PRIOR_STRENGTH",
    "STALE_FLOOR",
    "Reading",
    "beta_sd",
    "decay",
    "disputed",
    "effective_confidence",
    "influence",
    "local_influence",
    "read",
    "sides",
    "spread",
    "trajectory",
    "voice_of",
]

# Belief types that carry no probability: a goal is pursued, a gap is an open question.
NO_PROBABILITY: Final = frozenset({"goal", "gap"})
PRIOR_STRENGTH: Final = 2.0  # pseudo-observations a stated confidence is worth
DEFAULT_CONFIDENCE: Final = 0.5

KIND_WEIGHT: Final[Mapping[str, float]] = {
    "measurement": 4.0,
    "citation": 2.0,
    "expert-judgment": 1.5,
    "user-assertion": 1.0,
    "inference": 0.5,
    "assumption": 0.25,
}
HALF_LIFE_DAYS: Final[Mapping[str, float]] = {
    "measurement": 180.0,
    "citation": 365.0,
    "expert-judgment": 180.0,
    "user-assertion": 90.0,
    "inference": 30.0,
    "assumption": 30.0,
}
STALE_FLOOR: Final = 0.25  # stale when under a quarter of the evidence weight remains
CONTRADICTION_RATIO: Final = 0.5  # split when the minority side is half the majority
CONTRADICTION_MIN: Final = 1.0  # ... and carries at least one unit of weight
UNCERTAIN_SD: Final = 0.15  # uncertain when the posterior sd is at least this
STABLE_SHIFT: Final = 0.1  # stable when no single source moves it more than this
STABLE_WEIGHT: Final = 2.0  # ... and S + R (not neutral) is at least this much
DISPUTE_RATIO: Final = 0.1  # disputed (never stable) when the minority side is a tenth
DAY: Final = 86_400.0
_WHOLE: Final[Mapping[str, float]] = MappingProxyType({})  # every item at full weight


def decay(age_seconds: float, kind: str) -> float:
    """Weight left after ``age_seconds``: one half-life in, exactly one half."""
    return float(0.5 ** (max(age_seconds, 0.0) / (HALF_LIFE_DAYS[kind] * DAY)))


def beta_sd(alpha: float, beta: float) -> float:
    total = alpha + beta
    return math.sqrt(alpha * beta / (total * total * (total + 1.0)))


def spread(alpha: float, beta: float, support: float, refute: float) -> float:
    """The posterior sd, widened by disagreement: a Beta with the posterior's mean
    ``alpha / (alpha + beta)`` whose concentration counts only the net evidence,
    ``alpha + beta - 2 * min(support, refute)``. Weight on which sources disagree
    moves the mean toward the split but adds no precision, so evidence against the
    leading side never narrows the sd, and an even split is as wide as the prior.
    One-sided evidence gives exactly :func:`beta_sd`."""
    conflict = min(support, refute)
    if conflict <= 0.0:
        return beta_sd(alpha, beta)
    total = alpha + beta
    mean = alpha / total
    concentration = total - 2.0 * conflict
    return math.sqrt(mean * (1.0 - mean) / (concentration + 1.0))


def disputed(support: float, refute: float) -> bool:
    """Evidence on both sides worth a dispute: the minority side carries at least
    ``CONTRADICTION_MIN`` and ``DISPUTE_RATIO`` of the majority's weight. A disputed
    belief is never ``stable``; ``contradicted`` (an even-ish split) implies it."""
    minority = min(support, refute)
    return minority >= CONTRADICTION_MIN and minority >= DISPUTE_RATIO * max(
        support, refute
    )


class Reading(msgspec.Struct, frozen=True, gc=False):
    """Everything the math says about one belief at one clock (a struct: built for
    every posterior, at a fraction of a frozen dataclass's cost)."""

    confidence: float | None
    alpha: float
    beta: float
    evidence_weight: float  # decayed, grouped, trusted weight of all evidence
    uncertainty: float | None
    fragility: float  # the most any single source moves the confidence
    support: float
    refute: float
    flags: tuple[str, ...]


def voice_of(item: Evidence) -> str:
    """Whose independent voice ``item`` is: the voice fusion stamped on it (the source
    when the world's declaration lets its reporter report it, else
    ``agent:<reporter>``), or its source when it carries none (hand-built evidence,
    and evidence recorded before voices existed)."""
    return item.voice or item.source


def _trust_of(item: Evidence, trust: Mapping[str, float]) -> float:
    """The source's trust times the reporting agent's, counted once when the agent
    is itself the source (``agent:<name>`` reporting its own output)."""
    agent = f"agent:{item.author}"
    factor = trust.get(item.source, 1.0)
    return factor if item.source == agent else factor * trust.get(agent, 1.0)


def _contributions(
    evidence: Sequence[Evidence],
    trust: Mapping[str, float],
    now: datetime,
    scale: Mapping[str, float] = _WHOLE,
) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """Per (source, direction) group, in a fixed order: grouped contribution, the raw
    (undecayed) grouped contribution, the group's source, and its direction sign."""
    items = sorted(evidence, key=lambda e: e.id)
    weights = np.array([KIND_WEIGHT[e.kind] for e in items], dtype=np.float64)
    ages = np.array([(now - e.observed_at).total_seconds() for e in items])
    halves = np.array([HALF_LIFE_DAYS[e.kind] * DAY for e in items])
    trusted = np.array([_trust_of(e, trust) * scale.get(e.id, 1.0) for e in items])
    decayed = weights * np.power(0.5, np.maximum(ages, 0.0) / halves) * trusted
    raw = weights * trusted
    keys = sorted({(voice_of(e), e.direction) for e in items})
    index = {key: i for i, key in enumerate(keys)}
    group = np.array([index[(voice_of(e), e.direction)] for e in items], dtype=np.int64)
    grouped = np.zeros(len(keys))
    grouped_raw = np.zeros(len(keys))
    np.maximum.at(grouped, group, decayed)
    np.maximum.at(grouped_raw, group, raw)
    sign = np.array(
        [{"supports": 1, "refutes": -1, "neutral": 0}[d] for _, d in keys], dtype=int
    )
    return grouped, grouped_raw, [s for s, _ in keys], sign


def read(
    confidence: float | None,
    evidence: Sequence[Evidence],
    trust: Mapping[str, float],
    now: datetime,
    *,
    probabilistic: bool = True,
    scale: Mapping[str, float] | None = None,
) -> Reading:
    """The belief's reading at clock ``now``.

    Args:
        confidence: the stated prior (None: an open question, 0.5).
        evidence: every item recorded for the belief, in any order.
        trust: multipliers by source name and by ``agent:<name>`` (default 1).
        now: the clock the decay is evaluated at.
        probabilistic: False for goals and gaps, which carry no probability (P6).
        scale: multipliers by evidence id (default 1): a rival answer's evidence
            weighed against this belief (:mod:`worldline.actors.belief_model.rivals`).
    """
    scale = _WHOLE if scale is None else scale
    prior = DEFAULT_CONFIDENCE if confidence is None else confidence
    alpha0, beta0 = prior * PRIOR_STRENGTH, (1.0 - prior) * PRIOR_STRENGTH
    if not evidence:
        support = refute = weight = fragility = 0.0
        raw_total = 0.0
        alpha, beta = alpha0, beta0
    elif len({(e.voice or e.source, e.direction) for e in evidence}) < _SMALL:
        support, refute, weight, raw_total, fragility = _small(
            evidence, trust, now, alpha0, beta0, scale
        )
        alpha, beta = alpha0 + support, beta0 + refute
    else:
        grouped, grouped_raw, sources, sign = _contributions(
            evidence, trust, now, scale
        )
        support = float(grouped[sign > 0].sum())
        refute = float(grouped[sign < 0].sum())
        weight = float(grouped.sum())
        raw_total = float(grouped_raw.sum())
        alpha, beta = alpha0 + support, beta0 + refute
        fragility = _fragility(alpha, beta, grouped, sources, sign)
    if not probabilistic:
        stale = ("stale",) if _stale(weight, raw_total) else ()
        return Reading(None, 0.0, 0.0, weight, None, 0.0, support, refute, stale)
    conf = alpha / (alpha + beta)
    sd = spread(alpha, beta, support, refute)
    flags: list[str] = []
    if _stale(weight, raw_total):
        flags.append("stale")
    contradicted = min(support, refute) >= CONTRADICTION_MIN and min(
        support, refute
    ) >= CONTRADICTION_RATIO * max(support, refute)
    if (
        support + refute >= STABLE_WEIGHT  # neutral weight settles nothing (P3)
        and fragility < STABLE_SHIFT
        and not disputed(support, refute)
    ):
        flags.append("stable")
    if contradicted:
        flags.append("contradicted")
    if sd >= UNCERTAIN_SD:
        flags.append("uncertain")
    return Reading(
        conf, alpha, beta, weight, sd, fragility, support, refute, tuple(flags)
    )


_BY_ID: Final = operator.attrgetter("id")

# Below this many (source, direction) groups, :func:`_small` computes the reading in
# plain Python: the same operations in the same order as the numpy path (numpy sums
# fewer than 8 numbers left to right), so the same bits, without numpy's per-call cost
# on a handful of items. ``tests/core/test_belief_math.py`` checks the two agree.
_SMALL: Final = 8


def _small(
    evidence: Sequence[Evidence],
    trust: Mapping[str, float],
    now: datetime,
    alpha0: float,
    beta0: float,
    scale: Mapping[str, float] = _WHOLE,
) -> tuple[float, float, float, float, float]:
    """(support, refute, weight, raw total, fragility) of a belief with few groups."""
    grouped, grouped_raw = _grouped(evidence, trust, now, scale)
    keys = sorted(grouped)
    support, refute = _sides(grouped, keys)
    total = raw_total = 0.0
    for key in keys:
        total += grouped[key]
        raw_total += grouped_raw[key]
    alpha, beta = alpha0 + support, beta0 + refute
    by_source: dict[str, list[float]] = {}
    for source, direction in keys:
        s_r = by_source.setdefault(source, [0.0, 0.0])
        value = grouped[(source, direction)]
        s_r[0] += value if direction == "supports" else 0.0
        s_r[1] += value if direction == "refutes" else 0.0
    conf = alpha / (alpha + beta)
    fragility = max(
        [
            abs(conf - (alpha - s) / max(alpha + beta - s - r, 1e-12))
            for s, r in (by_source[name] for name in sorted(by_source))
        ]
    )
    return support, refute, total, raw_total, fragility


_Groups = dict[tuple[str, str], float]


def _grouped(
    evidence: Sequence[Evidence],
    trust: Mapping[str, float],
    now: datetime,
    scale: Mapping[str, float],
) -> tuple[_Groups, _Groups]:
    """Per (voice, direction): the largest decayed and the largest undecayed trusted
    weight among its items."""
    grouped: _Groups = {}
    grouped_raw: _Groups = {}
    items = sorted(evidence, key=_BY_ID)
    # One numpy call for the decay: its pow is not always the C library's to the bit.
    halves = [
        max((now - e.observed_at).total_seconds(), 0.0) / (HALF_LIFE_DAYS[e.kind] * DAY)
        for e in items
    ]
    decays: list[float] = np.power(0.5, np.array(halves)).tolist()
    # No trust set and no scale: every multiplier is 1.0 (the same bits).
    plain = not trust and not scale
    for e, decay in zip(items, decays, strict=True):
        weight = KIND_WEIGHT[e.kind]
        trusted = 1.0 if plain else _trust_of(e, trust) * scale.get(e.id, 1.0)
        decayed = weight * decay * trusted
        group = (e.voice or e.source, e.direction)  # voice_of
        grouped[group] = max(grouped.get(group, 0.0), decayed)
        grouped_raw[group] = max(grouped_raw.get(group, 0.0), weight * trusted)
    return grouped, grouped_raw


def _sides(grouped: _Groups, keys: list[tuple[str, str]]) -> tuple[float, float]:
    """(support, refute): the groups summed in ``keys``' order."""
    support = refute = 0.0
    for key in keys:
        if key[1] == "supports":
            support += grouped[key]
        elif key[1] == "refutes":
            refute += grouped[key]
    return support, refute


def sides(
    evidence: Sequence[Evidence], trust: Mapping[str, float], now: datetime
) -> tuple[float, float]:
    """(support, refute) of :func:`read` with this evidence, trust and clock (the
    same bits), without the rest of the reading: what a contradiction's strength
    needs."""
    if not evidence:
        return 0.0, 0.0
    if len({(e.voice or e.source, e.direction) for e in evidence}) < _SMALL:
        grouped, _ = _grouped(evidence, trust, now, _WHOLE)
        return _sides(grouped, sorted(grouped))
    reading = read(None, evidence, trust, now)
    return reading.support, reading.refute


def _stale(weight: float, raw_total: float) -> bool:
    return raw_total > 0.0 and weight < STALE_FLOOR * raw_total


def _fragility(
    alpha: float,
    beta: float,
    grouped: np.ndarray,
    sources: list[str],
    sign: np.ndarray,
) -> float:
    """Leave-one-source-out: the largest confidence shift from dropping one source."""
    names = sorted(set(sources))
    position = {name: i for i, name in enumerate(names)}
    owner = np.array([position[s] for s in sources], dtype=np.int64)
    s_by = np.zeros(len(names))
    r_by = np.zeros(len(names))
    np.add.at(s_by, owner, np.where(sign > 0, grouped, 0.0))
    np.add.at(r_by, owner, np.where(sign < 0, grouped, 0.0))
    without = (alpha - s_by) / np.maximum(alpha + beta - s_by - r_by, 1e-12)
    return float(np.max(np.abs(alpha / (alpha + beta) - without)))


def trajectory(
    confidence: float | None,
    evidence: Sequence[Evidence],
    trust: Mapping[str, float],
    *,
    probabilistic: bool = True,
) -> list[tuple[Evidence, float | None, float | None]]:
    """How confidence moved as each item arrived (by observed time, then id): before
    and after each step, each evaluated at that item's own observed time."""
    ordered = sorted(evidence, key=lambda e: (e.observed_at, e.id))
    steps = []
    for i, item in enumerate(ordered):
        before = read(confidence, ordered[:i], trust, item.observed_at,
                      probabilistic=probabilistic).confidence  # fmt: skip
        after = read(confidence, ordered[: i + 1], trust, item.observed_at,
                     probabilistic=probabilistic).confidence  # fmt: skip
        steps.append((item, before, after))
    return steps


def effective_confidence(
    confidence: Mapping[str, float], edges: Iterable[BeliefEdge], *, rounds: int = 32
) -> dict[str, float]:
    """Confidence after dependencies (P9): a claim that ``depends_on`` an assumption
    is scaled by (1 - strength * (1 - effective(assumption))), strength being the
    edge's own confidence (stated when the edge is written; not fused from
    evidence). Evaluated by fixed-point iteration (cycles converge or stop after
    ``rounds``); beliefs without dependencies keep their confidence."""
    ids = sorted(confidence)
    if not ids:
        return {}
    index = {bid: i for i, bid in enumerate(ids)}
    base = np.array([confidence[b] for b in ids])
    deps = [
        (index[e.source], index[e.target], e.confidence)
        for e in sorted(edges, key=lambda e: e.id)
        if e.type == "depends_on"
        and not e.removed
        and e.source in index
        and e.target in index
    ]
    if not deps:
        return dict(zip(ids, base.tolist(), strict=True))
    dependent = np.array([d[0] for d in deps])
    assumption = np.array([d[1] for d in deps])
    strength = np.array([d[2] for d in deps])
    current = base.copy()
    for _ in range(rounds):
        factor = 1.0 - strength * (1.0 - current[assumption])
        log_scale = np.zeros(len(ids))
        np.add.at(log_scale, dependent, np.log(np.maximum(factor, 1e-12)))
        updated = base * np.exp(log_scale)
        if np.array_equal(updated, current):
            break
        current = updated
    return dict(zip(ids, current.tolist(), strict=True))


def influence(
    ids: Sequence[str], edges: Iterable[BeliefEdge], *, damping: float = 0.85
) -> dict[str, float]:
    """Load-bearing influence by sparse power iteration, PageRank style: a belief
    collects weight from the beliefs that rest on it (``depends_on``,
    ``derived_from``) and from those it backs (``supports``), so what much else
    stands on ranks highest. Scores sum to 1."""
    ordered = sorted(set(ids))
    n = len(ordered)
    if n == 0:
        return {}
    index = {bid: i for i, bid in enumerate(ordered)}
    links = []
    for e in sorted(edges, key=lambda e: e.id):
        if (
            e.removed
            or e.confidence <= 0.0  # a link believed absent carries nothing
            or e.source not in index
            or e.target not in index
        ):
            continue
        if e.type in ("depends_on", "derived_from"):
            links.append((index[e.source], index[e.target], e.confidence))
        elif e.type == "supports":
            links.append((index[e.target], index[e.source], e.confidence))
    score = np.full(n, 1.0 / n)
    if not links:
        return dict(zip(ordered, score.tolist(), strict=True))
    frm = np.array([link[0] for link in links])
    to = np.array([link[1] for link in links])
    weight = np.array([link[2] for link in links])
    out = np.zeros(n)
    np.add.at(out, frm, weight)
    for _ in range(100):
        flow = np.zeros(n)
        np.add.at(flow, to, score[frm] * weight / out[frm])
        dangling = score[out == 0].sum()
        updated = (1 - damping) / n + damping * (flow + dangling / n)
        if np.abs(updated - score).sum() < 1e-12:
            score = updated
            break
        score = updated
    return dict(zip(ordered, (score / score.sum()).tolist(), strict=True))


def local_influence(belief_id: str, edges: Iterable[BeliefEdge]) -> float:
    """Influence a replica can keep current edge by edge: 1 plus the confidence of
    every edge that rests on ``belief_id`` (``depends_on`` and ``derived_from``
    pointing at it, ``supports`` leaving it). Same direction as :func:`influence`,
    one hop deep; what decision views rank by."""
    weight = 1.0
    for e in edges:
        if e.removed:
            continue
        if (e.type in ("depends_on", "derived_from") and e.target == belief_id) or (
            e.type == "supports" and e.source == belief_id
        ):
            weight += e.confidence
    return weight

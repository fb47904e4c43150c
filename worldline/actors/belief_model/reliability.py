"""Source reliability learned from agreement: an Accu-family fixed point with copy
detection (issue 18). Pure: no I/O, no clock; claims in, estimates out.

A claim is ``(question, answer, source)``: the source says ``answer`` answers
``question``. Rival answers to one question are exclusive (at most one is true), so
evidence for one is evidence against the others.

Model (docs/belief-math.md, "Source reliability and copying", has the formulas and the
reasons for each default):

- Each source ``s`` has an accuracy ``A(s)``, the probability that an answer it gives is
  true. Its vote is ``tau(s) = ln(n * A / (1 - A))`` (``n`` false values per question,
  ``FALSE_VALUES``), floored at 0 so no witness counts against what it says.
- An answer's score is the sum of its providers' votes, each multiplied by its
  independence (below). Confidences over one question's rivals are a softmax over the
  scores, with the ``n + 1 - observed`` unseen answers at score 0 in the denominator.
- ``A(s)`` is the mean confidence of the answers ``s`` gives, shrunk toward
  ``PRIOR_ACCURACY`` by ``PRIOR_CLAIMS`` pseudo-claims, so a one-claim source cannot
  bootstrap itself to certainty. Each round moves it toward that fixed point by a
  damped Newton step in log-odds (:mod:`.accuracy`).
- Copy detection (ACCUCOPY): for each pair of sources that answer common questions,
  the shared answers (split into expected-true and expected-false mass by the current
  confidences) and the differing answers give a posterior probability that one copies
  the other. Sharing false answers is strong evidence of copying; sharing true ones is
  weak (accurate sources agree anyway); differing is evidence against. The prior that
  a pair copies is learned from the data (:func:`copy_prior`). The providers of
  one answer are ordered by (questions answered desc, source), and each later
  provider's vote is multiplied by ``prod (1 - dep(s, earlier) * agree(s, earlier))``,
  ``agree`` being the share of co-answered questions the two answer alike (the copy
  rate as observed).
- The steps alternate until no accuracy and no pair's discount moves by more than
  ``tolerance`` in a round (converged) or ``max_rounds`` pass. Inputs are
  deduplicated and sorted before any sum, so any permutation (or repetition) of the
  same claims gives byte-identical output.
- A source giving ``k`` different answers to one question gives each weight ``1/k``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.belief_model import accuracy as update
from worldline.actors.belief_model.accuracy import CEIL as _ACCURACY_CEIL
from worldline.actors.belief_model.accuracy import FLOOR as _ACCURACY_FLOOR

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "COPY_PRIOR_CAP",
    "COPY_RATE",
    "FALSE_VALUES",
    "PRIOR_ACCURACY",
    "PRIOR_CLAIMS",
    "AnswerScore",
    "Claim",
    "Dependence",
    "Estimate",
    "Params",
    "SourceScore",
    "best_answers",
    "copy_prior",
    "estimate",
    "majority",
    "vote",
]

FALSE_VALUES: Final = 10  # n: false answers a question is assumed to admit
PRIOR_ACCURACY: Final = 0.8  # a source's accuracy before any agreement is seen
PRIOR_CLAIMS: Final = 2.0  # pseudo-claims at PRIOR_ACCURACY in each accuracy's mean
# The prior that one given source copies another is learned (copy_prior), at most this.
COPY_PRIOR_CAP: Final = 0.1
COPY_RATE: Final = 0.8  # c: share of its answers a copier copies
# A copier's copy rate as observed, kept below 1 so no vote vanishes entirely.
_COPY_CEIL: Final = 0.99


class Claim(msgspec.Struct, frozen=True, order=True):
    """``source`` says ``answer`` answers ``question``."""

    question: str
    answer: str
    source: str


class Params(msgspec.Struct, frozen=True, kw_only=True):
    """The model's knobs; every default is a module constant (docs/belief-math.md)."""

    false_values: int = FALSE_VALUES
    prior_accuracy: float = PRIOR_ACCURACY
    prior_claims: float = PRIOR_CLAIMS
    detect_copies: bool = True
    copy_prior: float | None = None  # None: learned from the data (copy_prior)
    copy_rate: float = COPY_RATE
    damping: float = update.DAMPING
    max_step: float = update.MAX_STEP  # in log-odds, per round
    max_rounds: int = 200
    tolerance: float = 1e-6


class AnswerScore(msgspec.Struct, frozen=True):
    """One answer to one question: its confidence and its (discounted) witnesses."""

    question: str
    answer: str
    confidence: float
    witnesses: float  # sum of the providers' independence factors (<= providers)
    providers: int


class SourceScore(msgspec.Struct, frozen=True):
    source: str
    accuracy: float
    claims: int
    # The mean, over its claims, of the share of its vote left after copy detection
    # (1.0: every answer it gives counts as an independent witness's).
    independence: float = 1.0


class Dependence(msgspec.Struct, frozen=True):
    """Posterior probability that ``a`` and ``b`` (a < b) are not independent."""

    a: str
    b: str
    probability: float
    shared: int  # questions both answered with a common answer
    differing: int  # questions both answered, with no common answer


class Estimate(msgspec.Struct, frozen=True):
    answers: tuple[AnswerScore, ...]  # sorted by (question, answer)
    sources: tuple[SourceScore, ...]  # sorted by source
    dependence: tuple[Dependence, ...]  # pairs above 0.5, sorted by (a, b)
    rounds: int
    converged: bool
    change: float = 0.0  # the largest move of an accuracy or discount in the last round
    copy_prior: float = 0.0  # the prior that a given source copies another, used


# A question's table: answer -> ((source, weight), ...) with sources sorted.
_Table = dict[str, tuple[tuple[str, float], ...]]


def _tables(claims: Iterable[Claim]) -> tuple[dict[str, _Table], dict[str, int]]:
    """Deduplicate and index: question -> answer -> providers; claims per source."""
    unique = sorted(set(claims))
    by_qs: dict[tuple[str, str], list[str]] = defaultdict(list)
    for c in unique:
        by_qs[(c.question, c.source)].append(c.answer)
    grouped: dict[str, dict[str, list[tuple[str, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    counts: dict[str, int] = defaultdict(int)
    for (question, source), answers in sorted(by_qs.items()):
        counts[source] += 1
        for answer in answers:
            grouped[question][answer].append((source, 1.0 / len(answers)))
    tables = {
        q: {a: tuple(sorted(ps)) for a, ps in sorted(rows.items())}
        for q, rows in sorted(grouped.items())
    }
    return tables, dict(sorted(counts.items()))


def vote(accuracy: float, n: int = FALSE_VALUES) -> float:
    """A source's vote at ``accuracy``: ``max(ln(n A / (1 - A)), 0)``."""
    return _vote(accuracy, n)


def _vote(accuracy: float, n: int) -> float:
    a = min(max(accuracy, _ACCURACY_FLOOR), _ACCURACY_CEIL)
    return max(math.log(n * a / (1.0 - a)), 0.0)


def _softmax(scores: Mapping[str, float], n: int) -> dict[str, float]:
    unseen = max(n + 1 - len(scores), 0)
    top = max(max(scores.values()), 0.0 if unseen else -math.inf)
    exps = {a: math.exp(s - top) for a, s in scores.items()}
    total = math.fsum(exps.values()) + unseen * math.exp(-top)
    return {a: e / total for a, e in exps.items()}


def _pairs(
    tables: Mapping[str, _Table],
) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Pairs of sources answering a common question with a common answer, and for each
    the questions both answered: ``(question, shared answer or "")``."""
    co: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for question, table in tables.items():
        answers_of: dict[str, set[str]] = defaultdict(set)
        for answer, providers in table.items():
            for source, _ in providers:
                answers_of[source].add(answer)
        sources = sorted(answers_of)
        for i, a in enumerate(sources):
            for b in sources[i + 1 :]:
                shared = sorted(answers_of[a] & answers_of[b])
                co[(a, b)].append((question, shared[0] if shared else ""))
    return {k: v for k, v in sorted(co.items()) if any(s for _, s in v)}


class _Round(msgspec.Struct):
    """One evaluation of the confidences at fixed accuracies and dependences."""

    conf: dict[str, dict[str, float]]
    scores: dict[str, dict[str, float]]
    votes: dict[tuple[str, str, str], float]  # (question, answer, source) -> its share
    witnesses: dict[tuple[str, str], float]
    # (question, answer, source) -> the independence factor its vote was given
    independence: dict[tuple[str, str, str], float] = msgspec.field(
        default_factory=dict
    )


def _outside(
    run: _Round, question: str, answer: str, pair: tuple[str, str], n: int
) -> float:
    """The answer's confidence from every source but the pair (leave-pair-out), so a
    pair cannot make the answers it shares look true by agreeing with itself."""
    scores = dict(run.scores[question])
    for source in pair:
        scores[answer] -= run.votes.get((question, answer, source), 0.0)
    return _softmax(scores, n)[answer]


def _dependence(
    pair: tuple[str, str],
    rows: list[tuple[str, str]],
    accuracy: Mapping[str, float],
    run: _Round,
    counts: Mapping[str, int],
    params: Params,
    prior: float,
    total: int,
) -> tuple[float, int, int, float]:
    """Posterior probability that the pair is dependent; its shared, differing counts;
    and the posterior from its answers alone, coverage left out (:func:`copy_prior`).

    For a shared answer whose outside confidence is ``p``, with ``f = (1 - a) / n``,
    independent sources both give it with probability ``p a1 a2 + (1 - p) f1 f2``; if
    the first copies the second at rate ``c``, with
    ``p a2 (c + (1 - c) a1) + (1 - p) f2 (c + (1 - c) f1)`` (and symmetrically). A
    differing answer is ``1 - c`` times as likely under copying. Coverage: see below.
    """
    a1 = min(max(accuracy[pair[0]], _ACCURACY_FLOOR), _ACCURACY_CEIL)
    a2 = min(max(accuracy[pair[1]], _ACCURACY_FLOOR), _ACCURACY_CEIL)
    n, c = params.false_values, params.copy_rate
    total = max(total, 1)  # questions in the world
    ind = copy_ab = copy_ba = 0.0
    differing = 0
    for question, shared in rows:
        if not shared:
            differing += 1
            continue
        p = _outside(run, question, shared, pair, n)
        f1, f2 = (1.0 - a1) / n, (1.0 - a2) / n
        ind += math.log(p * a1 * a2 + (1.0 - p) * f1 * f2)
        copy_ab += math.log(
            p * a2 * (c + (1 - c) * a1) + (1.0 - p) * f2 * (c + (1 - c) * f1)
        )
        copy_ba += math.log(
            p * a1 * (c + (1 - c) * a2) + (1.0 - p) * f1 * (c + (1 - c) * f2)
        )
    if differing:
        log_rest = differing * math.log(1.0 - c)
        copy_ab += log_rest
        copy_ba += log_rest
    agreeing = _posterior(prior, copy_ab, copy_ba, ind)
    # Coverage: a copier answers the questions its original answers. Over the original's
    # questions, the copier answers each with probability c + (1 - c) r (r: the copier's
    # share of all questions), an independent source with probability r.
    both = len(rows)
    for original, copier, into in ((1, 0, "ab"), (0, 1, "ba")):
        r = min(max(counts[pair[copier]] / total, 1e-12), 1.0 - 1e-12)
        alone = counts[pair[original]] - both
        gain = both * (math.log(c + (1 - c) * r) - math.log(r)) + alone * math.log(
            1 - c
        )
        if into == "ab":
            copy_ab += gain
        else:
            copy_ba += gain
    probability = _posterior(prior, copy_ab, copy_ba, ind)
    return probability, len(rows) - differing, differing, agreeing


def _posterior(alpha: float, copy_ab: float, copy_ba: float, ind: float) -> float:
    """P(a copies b or b copies a), from the log-likelihoods and the prior."""
    terms = (
        math.log(alpha) + copy_ab,
        math.log(alpha) + copy_ba,
        math.log(1 - 2 * alpha) + ind,
    )
    top = max(terms)
    weights = [math.exp(t - top) for t in terms]
    return (weights[0] + weights[1]) / math.fsum(weights)


def _split(tables: Mapping[str, _Table]) -> tuple[dict[str, _Table], dict[str, int]]:
    """The questions more than one source (or answer) bears on, and per source the
    number it alone answers with one answer (their confidence is its accuracy)."""
    contested: dict[str, _Table] = {}
    alone: dict[str, int] = defaultdict(int)
    for question, table in tables.items():
        providers = next(iter(table.values()))
        if len(table) == 1 and len(providers) == 1:
            alone[providers[0][0]] += 1
        else:
            contested[question] = table
    return contested, dict(sorted(alone.items()))


def copy_prior(agreeing: Mapping[tuple[str, str], float], sources: int) -> float:
    """The prior that a given source copies another, from the data (empirical Bayes):
    one copying pair a priori plus the expected number of sources whose answers agree
    with another's more than independent sources of their accuracies would (per
    source, the largest posterior of a pair it is in, from the pair's shared and
    differing answers alone, coverage left out), shared over the two directions of
    every pair of ``sources``, at most ``COPY_PRIOR_CAP``. By source, not by pair: a
    copier copies one source, so twenty clones of one source are some twenty copying
    relations, not the 210 pairs among them. Each round re-estimates it from the last
    (an EM step on the prior)."""
    pairs = max(sources * (sources - 1) // 2, 1)
    most: dict[str, float] = {}
    for (a, b), probability in agreeing.items():
        for source in (a, b):
            most[source] = max(most.get(source, 0.0), probability)
    expected = 1.0 + math.fsum(most.values())  # exact: any order
    return min(expected / (2 * pairs), COPY_PRIOR_CAP)


def estimate(claims: Iterable[Claim], params: Params | None = None) -> Estimate:
    """The fixed point of accuracy <-> confidence over ``claims`` (any order): rounds
    until no accuracy and no pair's discount moves by more than ``tolerance``, at most
    ``max_rounds``."""
    p = params or Params()
    tables, counts = _tables(claims)
    contested, alone = _split(tables)
    accuracy = dict.fromkeys(counts, p.prior_accuracy)
    pairs = _pairs(tables) if p.detect_copies else {}
    learned = p.copy_prior is None
    prior = (
        copy_prior({}, len(counts))
        if p.copy_prior is None
        else min(p.copy_prior, COPY_PRIOR_CAP)
    )
    shrink = update.Shrink(
        accuracy=p.prior_accuracy,
        claims=p.prior_claims,
        false_values=p.false_values,
        damping=p.damping,
        max_step=p.max_step,
    )
    dep: dict[tuple[str, str], float] = {}
    moves = update.Moves(accuracy=accuracy)
    rounds, converged, change = 0, False, 0.0
    while rounds < p.max_rounds:
        rounds += 1
        run = _confidences(contested, accuracy, counts, dep, p)
        moves = update.update(
            contested, run.conf, accuracy, counts, alone, shrink, moves
        )
        change = max((abs(moves.step[s]) for s in counts), default=0.0)
        accuracy = moves.accuracy
        if pairs:
            run = _confidences(contested, accuracy, counts, dep, p)
            found = {
                k: _dependence(k, rows, accuracy, run, counts, p, prior, len(tables))
                for k, rows in pairs.items()
            }
            # Damped as the accuracies are: discounts coupled through the
            # confidences would otherwise alternate between two values.
            moved = {
                k: dep.get(k, 0.0)
                + p.damping
                * (
                    prob * min(shared / (shared + differing), _COPY_CEIL)
                    - dep.get(k, 0.0)
                )
                for k, (prob, shared, differing, _) in found.items()
            }
            change = max(change, *(abs(moved[k] - dep.get(k, 0.0)) for k in moved))
            dep = moved
            if learned:
                agreeing = {k: f[3] for k, f in found.items()}
                prior = copy_prior(agreeing, len(counts))
        if change <= p.tolerance:
            converged = True
            break
    run = _confidences(tables, accuracy, counts, dep, p)
    answers = tuple(
        AnswerScore(q, a, run.conf[q][a], run.witnesses[(q, a)], len(table[a]))
        for q, table in tables.items()
        for a in table
    )
    shares: dict[str, list[float]] = defaultdict(list)
    for (_, _, source), factor in sorted(run.independence.items()):
        shares[source].append(factor)
    sources = tuple(
        SourceScore(
            s,
            accuracy[s],
            counts[s],
            math.fsum(shares[s]) / len(shares[s]) if shares[s] else 1.0,
        )
        for s in counts
    )
    dependence = tuple(
        Dependence(k[0], k[1], prob, shared, differing)
        for k, rows in pairs.items()
        for prob, shared, differing, _ in (
            _dependence(k, rows, accuracy, run, counts, p, prior, len(tables)),
        )
        if prob > 0.5
    )
    return Estimate(
        answers, sources, dependence, rounds, converged, change, prior if pairs else 0.0
    )


def _confidences(
    tables: Mapping[str, _Table],
    accuracy: Mapping[str, float],
    counts: Mapping[str, int],
    dep: Mapping[tuple[str, str], float],
    p: Params,
) -> _Round:
    """Confidences at fixed accuracies and discounts. An answer's providers are
    ordered by (questions answered desc, source), the likely original first: a copier
    answers a subset of its original's questions. (Not by accuracy, which moves each
    round: two sources whose accuracies cross would swap discounts every round.)"""
    run = _Round({}, {}, {}, {})
    for question, table in tables.items():
        scores: dict[str, float] = {}
        for answer, providers in table.items():
            order = sorted(providers, key=lambda sw: (-counts[sw[0]], sw[0]))
            votes: list[float] = []
            factors: list[float] = []
            for i, (source, weight) in enumerate(order):
                independence = 1.0
                for earlier, _ in order[:i]:
                    key = (source, earlier) if source < earlier else (earlier, source)
                    independence *= 1.0 - dep.get(key, 0.0)
                factors.append(independence * weight)
                run.independence[(question, answer, source)] = independence
                vote = _vote(accuracy[source], p.false_values) * independence * weight
                run.votes[(question, answer, source)] = vote
                votes.append(vote)
            scores[answer] = math.fsum(votes)
            run.witnesses[(question, answer)] = math.fsum(factors)
        run.scores[question] = scores
        run.conf[question] = _softmax(scores, p.false_values)
    return run


def best_answers(result: Estimate) -> dict[str, str]:
    """Per question, the answer of highest confidence (ties: the smallest answer)."""
    best: dict[str, tuple[float, str]] = {}
    for row in result.answers:
        held = best.get(row.question)
        if held is None or row.confidence > held[0]:
            best[row.question] = (row.confidence, row.answer)
    return {q: a for q, (_, a) in sorted(best.items())}


def majority(claims: Iterable[Claim]) -> dict[str, str]:
    """Per question, the answer most distinct sources give (ties: smallest answer)."""
    votes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for c in sorted(set(claims)):
        votes[c.question][c.answer] += 1
    return {
        q: min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        for q, counts in sorted(votes.items())
    }

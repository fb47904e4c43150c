"""Can more than the posterior tell a right pick from a wrong one? (issue 25's Brier
target). On the population set (``bench/data/population``), the winning answer of
every gold question before an assessment, scored by 5-fold cross-validated Brier:

- the posterior as it is, and Platt scaling of it (what ``calibration.fit`` may pick);
- a logistic map (L2, Newton steps) on the posterior and the runner-up's posterior;
- the same on the posterior and the vote shares (the winner's and the runner-up's);
- the same on all of those and the logs of the question's source and answer counts.

Folds as in ``bench/judgment_calibration.py`` (question ``i`` of the sorted gold in
fold ``i % 5``). If no map beats Platt, the posterior already holds what these
features know, and a Brier target below the posterior's Brier floor needs other
evidence, not another map.

Run: ``python bench/judgment_features.py`` (a few seconds).
"""

from __future__ import annotations

import math

import judgment
import judgment_calibration as jc
import numpy as np

FOLDS = 5


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


def features() -> tuple[np.ndarray, np.ndarray]:
    """One row per gold question: logit posterior, logit runner-up's, the vote
    shares of the winner and runner-up, log sources, log answers; and whether the
    winner is right."""
    claims, gold = judgment.load(judgment.DATA)
    questions = set(gold)
    vote = jc.vote_answers(claims, questions)
    posterior = jc.rival_answers(claims, questions, {})
    sources: dict[str, set[str]] = {}
    for c in set(claims):
        if c.question in questions:
            sources.setdefault(c.question, set()).add(c.source)
    rows, right = [], []
    for q in sorted(questions & set(posterior)):
        ranked = sorted(posterior[q].items(), key=lambda kv: (-kv[1], kv[0]))
        winner, p = ranked[0]
        shares = sorted(vote[q].values(), reverse=True)
        rows.append(
            [
                _logit(p),
                _logit(ranked[1][1]) if len(ranked) > 1 else _logit(0.0),
                vote[q][winner],
                shares[1] if len(shares) > 1 else 0.0,
                math.log(len(sources[q])),
                math.log(len(ranked)),
            ]
        )
        right.append(float(gold[q] == winner))
    return np.array(rows), np.array(right)


def _fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0) -> np.ndarray:
    xb = np.c_[x, np.ones(len(x))]
    w = np.zeros(xb.shape[1])
    penalty = np.r_[np.ones(len(w) - 1), 0.0]
    for _ in range(50):
        p = 1 / (1 + np.exp(-xb @ w))
        gradient = xb.T @ (p - y) + l2 * penalty * w
        hessian = (xb * (p * (1 - p))[:, None]).T @ xb + l2 * np.diag(penalty)
        w = w - np.linalg.solve(hessian, gradient)
    return w


def cross_validated(x: np.ndarray, y: np.ndarray, columns: list[int]) -> float:
    """Brier of each fold's questions under the map fitted on the other folds."""
    fold = np.arange(len(y)) % FOLDS
    predicted = np.zeros(len(y))
    for f in range(FOLDS):
        test = fold == f
        w = _fit(x[~test][:, columns], y[~test])
        z = np.c_[x[test][:, columns], np.ones(int(test.sum()))] @ w
        predicted[test] = 1 / (1 + np.exp(-z))
    return float(((predicted - y) ** 2).mean())


def main() -> dict[str, float]:
    x, y = features()
    raw = float(((1 / (1 + np.exp(-x[:, 0])) - y) ** 2).mean())
    found = {
        "posterior as it is": raw,
        "Platt on the posterior": cross_validated(x, y, [0]),
        "posterior + runner-up": cross_validated(x, y, [0, 1]),
        "posterior + vote shares": cross_validated(x, y, [0, 2, 3]),
        "all six features": cross_validated(x, y, [0, 1, 2, 3, 4, 5]),
    }
    print(f"{len(y)} gold questions, the winner right for {y.mean():.3f}")
    for name, brier in found.items():
        print(f"  {name:<26} Brier {brier:.4f}")
    return found


if __name__ == "__main__":
    main()

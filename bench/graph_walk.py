"""Offline check of a graph channel (issue 27) before building it: does walking
from the query's best matches to the beliefs that share their rarest terms bring an
answer into the same budget?

Plain BM25 (binary term frequency, k1 1.2, b 0.75, content-word stems of
:func:`worldline.actors.belief_model.text.content_stems`) over the dev sentences of
``bench/data/<corpus>/`` (one document a row: a FriendsQA utterance, a SQuAD
sentence), against the same BM25 plus the walk: from the ``m`` best matches, their
``n`` rarest terms that the question lacks score every document that holds them
with weight ``beta`` (added to its BM25). A question is a hit when one of the top
``k`` (7, about the worldview's budget) answers it. No stack runs; the dev sets have
no belief edges, so the walk is by shared terms only.

Run: ``python bench/graph_walk.py [--corpus squad|friendsqa] [--articles N]``.
Results: docs/benchmarks.md, "The observation's context and a graph channel".
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from worldline.actors.belief_model.text import content_stems

DATA = Path(__file__).resolve().parent / "data"


def _rows(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", choices=("squad", "friendsqa"), default="squad")
    parser.add_argument("--articles", type=int, default=None, help="leading articles")
    parser.add_argument("--k", type=int, default=7)
    args = parser.parse_args()
    rows = _rows(DATA / args.corpus / "dev-sentences.jsonl.gz")
    questions = _rows(DATA / args.corpus / "dev-questions.jsonl.gz")
    if args.articles:
        kept = list(dict.fromkeys(r["article"] for r in rows))[: args.articles]
        rows = [r for r in rows if r["article"] in set(kept)]
        held = {r["id"] for r in rows}
        questions = [q for q in questions if set(q["answers"]) <= held]
    questions = questions[:: max(1, len(questions) // 1000)]
    ids = [r["id"] for r in rows]
    docs = [list(dict.fromkeys(content_stems(r["text"]))) for r in rows]
    lengths = np.array([len(content_stems(r["text"])) for r in rows], dtype=float)
    postings: dict[str, list[int]] = defaultdict(list)
    for i, terms in enumerate(docs):
        for term in terms:
            postings[term].append(i)
    n, mean = len(rows), float(lengths.mean())
    df = {t: len(p) for t, p in postings.items()}
    idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
    norm = 2.2 / (1 + 1.2 * (0.25 + 0.75 * lengths / mean))

    def bm25(terms: dict[str, float]) -> np.ndarray:
        scores = np.zeros(n)
        for term, weight in terms.items():
            if term in postings:
                at = np.asarray(postings[term])
                scores[at] += weight * idf[term] * norm[at]
        return scores

    def rate(beta: float, m: int, rare: int) -> float:
        hits = 0
        for q in questions:
            asked = content_stems(q["question"])
            scores = bm25(dict.fromkeys(asked, 1.0))
            if beta:
                walk: dict[str, float] = {}
                for best in np.argsort(-scores, kind="stable")[:m]:
                    if scores[best] > 0:
                        new = [t for t in docs[best] if t not in asked]
                        for t in sorted(new, key=lambda t: -idf[t])[:rare]:
                            walk[t] = beta
                scores = scores + bm25(walk)
            top = [
                i for i in np.argsort(-scores, kind="stable")[: args.k] if scores[i] > 0
            ]
            hits += any(ids[i] in q["answers"] for i in top)
        return hits / len(questions)

    print(f"{args.corpus}: {n:,} rows, {len(questions):,} questions, top {args.k}")
    print(f"{'BM25':<44}{rate(0.0, 0, 0):.3f}")
    for beta in (0.1, 0.2, 0.3):
        for m, rare in ((1, 2), (2, 3), (3, 3)):
            label = f"BM25 + walk beta {beta} from {m}, {rare} terms"
            print(f"{label:<44}{rate(beta, m, rare):.3f}")


if __name__ == "__main__":
    main()

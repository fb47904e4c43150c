"""What the graph channel (issue 27, ``worldline/actors/projector/graph.py``) costs a
``before``, in the projector's core, without the bus: the dev sentences of
``bench/data/<corpus>/`` (default ``hotpotqa``) applied as beliefs to a projector
core on an LMDB store in a temporary folder (the default hashing embedder), then
each question asked
through ``core.serve(Before)`` twice in turn, the walk on and off
(``graph.SEEDS = 0``: no seed, no read), timed on the thread's CPU clock; and how
many cards each walk read.

Run: ``python bench/graph_channel.py [--corpus hotpotqa] [--sentences N]
[--questions N]``. Results: docs/benchmarks.md, "A graph channel".
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from worldline.actors.projector import core, graph
from worldline.actors.runtime.memory import Overlay
from worldline.actors.runtime.spec import Context, Reader
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import Before, Belief, BeliefChanged
from worldline.protocols.subjects import state

DATA = Path(__file__).resolve().parent / "data"
W = "bench"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _rows(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def load(store: Store, rows: list[dict[str, Any]]) -> None:
    """Each row a belief, as the projector's change feed brings it, 256 a commit."""
    chunks = iter([rows[i : i + 256] for i in range(0, len(rows), 256)])
    seq = 0

    def step(reader: Reader) -> dict[bytes, bytes | None] | None:
        nonlocal seq
        chunk = next(chunks, None)
        if chunk is None:
            return None
        writes: dict[bytes, bytes | None] = {}
        view = Overlay(reader, writes)
        for row in chunk:
            seq += 1
            b = Belief(id=row["id"], text=row["text"], type="claim", confidence=0.6,
                       prior=0.6, uncertainty=0.2, author="bench", created_at=T0,
                       updated_at=T0, version=seq)  # fmt: skip
            ctx = Context(world=W, author="m", subject=state(W, "belief"), seq=seq,
                          now=T0)  # fmt: skip
            writes.update(core.handle(view, BeliefChanged(belief=b), ctx).writes)
        return writes

    store.upgrade(step)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="hotpotqa")
    parser.add_argument("--sentences", type=int, default=None)
    parser.add_argument("--questions", type=int, default=300)
    args = parser.parse_args()
    rows = _rows(DATA / args.corpus / "dev-sentences.jsonl.gz")[: args.sentences]
    held = {row["id"] for row in rows}
    questions = [
        q
        for q in _rows(DATA / args.corpus / "dev-questions.jsonl.gz")
        if set(q["answers"]) <= held
    ][: args.questions]
    start = time.perf_counter()
    tmp = tempfile.TemporaryDirectory(prefix="wl-graph-")
    store = Store(Path(tmp.name) / "projector", actor="projector", durable=False)
    load(store, rows)
    print(f"{len(rows):,} beliefs in {time.perf_counter() - start:.1f}s; "
          f"{len(questions):,} questions")  # fmt: skip
    seeds = graph.SEEDS
    cost: dict[str, list[float]] = {"on": [], "off": []}
    reads: list[int] = []
    walk = graph._Walk

    class Counted(graph._Walk):
        """A walk that counts the cards it reads (only when it walks)."""

        def __init__(self, *a: Any) -> None:
            super().__init__(*a)
            if graph.SEEDS:
                reads.append(0)

        def _card(self, belief_id: str) -> Any:
            found = super()._card(belief_id)
            reads[-1] = self.read
            return found

    setattr(graph, "_Walk", Counted)  # noqa: B010 (a module attribute, patched)

    for q in questions:
        asked = Before(agent="reader", query=q["question"], at=T0)
        for mode in ("on", "off"):
            graph.SEEDS = seeds if mode == "on" else 0  # type: ignore[misc]
            with store.reader() as reader:
                t = time.thread_time()
                core.serve(reader, asked, W)
                cost[mode].append(time.thread_time() - t)
    graph.SEEDS = seeds  # type: ignore[misc]
    setattr(graph, "_Walk", walk)  # noqa: B010
    store.close()
    tmp.cleanup()
    for mode, times in cost.items():
        print(f"before, walk {mode:<3}  p50 {pct(times, 0.5) * 1e3:6.2f} ms  "
              f"p95 {pct(times, 0.95) * 1e3:6.2f} ms  "
              f"mean {statistics.mean(times) * 1e3:6.2f} ms")  # fmt: skip
    extra = [a - b for a, b in zip(cost["on"], cost["off"], strict=True)]
    p50, p95 = pct(extra, 0.5) * 1e3, pct(extra, 0.95) * 1e3
    print(f"the walk's own cost (on - off, same question): p50 {p50:.2f} ms, "
          f"p95 {p95:.2f} ms")  # fmt: skip
    if reads:
        print(f"cards a walk read: mean {statistics.mean(reads):.1f}, p95 "
              f"{pct([float(r) for r in reads], 0.95):.0f}, max {max(reads)} "
              f"(bound {graph.CARDS})")  # fmt: skip


if __name__ == "__main__":
    main()

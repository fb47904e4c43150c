"""Large blocks cut into cells (``partition.py``): rows stored by cell, a query that
probes every cell gets the exact scan's answer, the default probes keep recall@5
high on clustered rows, and the same transitions give the same bytes."""

from __future__ import annotations

import itertools
import random
from typing import TYPE_CHECKING

import numpy as np
import pytest

from worldline.actors.belief_model.embedding import active
from worldline.actors.simulator.builder import IndexBuilder
from worldline.actors.simulator.index import (
    CENTROIDS,
    TransitionIndex,
    build,
    load,
    retrieve,
)
from worldline.actors.simulator.partition import (
    PARTITION_MIN,
    PROBES,
    assign,
    cell_count,
    kmeans,
)
from worldline.actors.simulator.retrieval import query_vector, retrieve_rows
from worldline.actors.simulator.storage import command_of
from worldline.protocols.messages import Transition

if TYPE_CHECKING:
    from pathlib import Path

TOPICS = 60
WORDS = [[f"topic{t}word{j}" for j in range(30)] for t in range(TOPICS)]
COMMANDS = ("ls", "grep", "pytest")


def text(rng: random.Random, topic: int, words: int = 8) -> str:
    return " ".join(rng.choice(WORDS[topic]) for _ in range(words))


def message(rng: random.Random, i: int) -> Transition:
    """A message turn on one of ``TOPICS`` topics (so the rows cluster); one in
    ten issues a command in a code block."""
    topic = rng.randrange(TOPICS)
    action = text(rng, topic)
    if i % 10 == 0:
        action += f"\n```\n{COMMANDS[i % 3]} {rng.choice(WORDS[topic])}\n```"
    return Transition(
        id=f"m{i:05d}",
        lineage=f"lin{i // 4}",
        task="help",
        context=f"user: {text(rng, topic)}",
        action=action,
        observation=f"reply {i}",
        pairing="turn",
    )


def calls(n: int) -> list[Transition]:
    """A few tool results: a block too small to cut."""
    return [
        Transition(
            id=f"c{i:03d}",
            lineage=f"tool-lin{i}",
            task="help",
            context="user: look it up",
            action=f'lookup({{"q": "{i}"}})',
            observation=f"found {i}",
            pairing="id",
        )
        for i in range(n)
    ]


ROWS = PARTITION_MIN + 1904  # 6,000 message turns: one block of 77 cells


@pytest.fixture(scope="module")
def transitions() -> list[Transition]:
    rng = random.Random(7)
    return [*calls(40), *(message(rng, i) for i in range(ROWS))]


@pytest.fixture(scope="module")
def index(transitions: list[Transition]) -> TransitionIndex:
    return build(transitions, held_out=0.2)


def queries(count: int = 120) -> list[tuple[str, str]]:
    """(context, action) pairs drawn like the rows, none of them stored."""
    rng = random.Random(99)
    return [
        (f"user: {text(rng, t)}", text(rng, t))
        for t in (rng.randrange(TOPICS) for _ in range(count))
    ]


def exact(
    index: TransitionIndex, context: str, action: str, excluded: str, k: int = 5
) -> list[int]:
    """The oracle: every eligible message row scored, the same command's first,
    best first, ties by id."""
    start, stop = index._spans["message"]
    query = query_vector(context, action, active())
    scores = index.vectors[start:stop] @ query
    command = command_of(action)
    eligible = [
        i
        for i in range(start, stop)
        if index.split_of(index.rows[i].lineage) == "fit"
        and index.group_of(index.rows[i].lineage) != excluded
    ]

    def best(rows: list[int]) -> list[int]:
        return sorted(rows, key=lambda i: (-scores[i - start], index.rows[i].id))

    same = {
        i for i in eligible if command and command_of(index.rows[i].action) == command
    }
    rest = [i for i in eligible if i not in same]
    return (best(sorted(same)) + best(rest))[:k]


def test_a_large_block_is_cut_into_cells_and_a_small_one_is_not(
    index: TransitionIndex,
) -> None:
    m = index.manifest
    start, stop = index._spans["message"]
    assert index._spans["tool"] == (0, 40)  # 40 tool results: scored whole
    [edges] = m.partitions
    assert (edges[0], edges[-1]) == (start, stop)
    cells = len(edges) - 1
    assert cell_count(ROWS) == 77
    assert 60 < cells <= 77  # empty cells dropped
    assert index.centroids.shape == (cells, m.dimensions)
    # Each cell is a slice of rows sorted by id, every row in its nearest cell.
    nearest = assign(index.vectors[start:stop], index.centroids)
    for c, (a, b) in enumerate(itertools.pairwise(edges)):
        ids = [r.id for r in index.rows[a:b]]
        assert ids == sorted(ids)
        assert (nearest[a - start : b - start] == c).all()


def test_probing_every_cell_is_the_exact_scan(index: TransitionIndex) -> None:
    cells = len(index.centroids)
    for n, (context, action) in enumerate(queries(60)):
        if n % 3 == 0:  # a command: its replies first
            action += f"\n```\n{COMMANDS[n % 3]} x\n```"
        excluded = index.group_of(index.rows[40 + 97 * n].lineage)
        found = retrieve_rows(
            index,
            context=context,
            action=action,
            exclude_groups=[excluded],
            kind="message",
            probes=cells,
        )
        assert [row for row, _ in found] == exact(index, context, action, excluded)


def test_recall_at_5_on_clustered_rows_is_high_at_the_default_probes(
    index: TransitionIndex,
) -> None:
    cells = len(index.centroids)
    assert cells > PROBES  # the default reads a third of the block or less
    recall = {}
    for probes in (1, PROBES):
        hits = 0
        for context, action in queries():
            ask = {"context": context, "action": action, "kind": "message"}
            truth = retrieve_rows(index, **ask, probes=cells)  # type: ignore[arg-type]
            found = retrieve_rows(index, **ask, probes=probes)  # type: ignore[arg-type]
            assert len(found) == len(truth) == 5
            hits += len({r for r, _ in found} & {r for r, _ in truth})
        recall[probes] = hits / (5 * len(queries()))
    assert recall[PROBES] >= 0.95
    assert recall[1] < recall[PROBES]  # fewer cells read, fewer of the exact five


def test_exclusions_that_empty_the_nearest_cells_still_give_k(
    index: TransitionIndex,
) -> None:
    # Exclude every group but a few: the nearest cells hold no eligible row, so the
    # query reads on until it holds k.
    groups = sorted(index.manifest.groups)
    kept = {index.group_of(index.rows[i].lineage) for i in range(40, 40 + 20)}
    context, action = queries(1)[0]
    found = retrieve(
        index,
        task="help",
        context=context,
        action=action,
        kind="message",
        exclude_groups=[g for g in groups if g not in kept],
        split="all",
        probes=1,
    )
    assert len(found) == 5
    assert {index.group_of(t.lineage) for t, _ in found} <= kept


def test_the_index_is_byte_identical_built_twice_in_any_order(
    transitions: list[Transition], tmp_path: Path
) -> None:
    outs = []
    for n, order in enumerate((transitions, transitions[::-1])):
        builder = IndexBuilder(held_out=0.2)
        builder.add_all(order)
        builder.write(tmp_path / str(n))
        outs.append(tmp_path / str(n))
    names = sorted(p.name for p in outs[0].iterdir())
    assert CENTROIDS in names
    for name in names:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    assert load(outs[0]).manifest.partitions


def test_kmeans_is_seeded_and_its_centroids_are_unit_rows() -> None:
    rng = np.random.default_rng(1)
    topics = rng.standard_normal((8, 32)).astype(np.float32)
    rows = topics[rng.integers(8, size=800)] + 0.05 * rng.standard_normal((800, 32))
    rows = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    first, again = kmeans(rows, 8), kmeans(rows, 8)
    assert first.tobytes() == again.tobytes()
    assert np.allclose(np.linalg.norm(first, axis=1), 1, atol=1e-5)
    # The rounds fit: rows are nearer their cells' centroids than to the draw.
    start = kmeans(rows, 8, iterations=0)
    assert (rows @ first.T).max(axis=1).mean() > (rows @ start.T).max(axis=1).mean()

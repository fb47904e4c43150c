"""Coarse partitions (inverted files) of an index's large blocks, so a query reads
a few of a block's rows instead of all of them.

A *block* is what one query scores: one tool's results, or the message turns. A
block of at least :data:`PARTITION_MIN` rows is cut into about ``sqrt(rows)``
*cells* by spherical k-means (:func:`kmeans`: unit centroids, rows assigned by the
largest dot product, :data:`ITERATIONS` rounds of numpy on a bounded sample drawn
with a fixed seed, so the same rows always give the same cells). Rows are stored
sorted by cell (then by id) inside their block, so each cell is a contiguous slice
of the vectors and scoring it copies nothing. A smaller block is not cut: it is
scored whole, exactly as before.

A query scores the block's centroids, then the cells in order of their centroid's
score until it has read :data:`PROBES` cells *and* holds ``k`` eligible rows
(exclusions can empty a cell), then picks the best ``k`` exactly as an exact scan
would among the rows read. Probing every cell reads every row: the exact answer.
What this trades is recall for bytes: the default reads about ``PROBES / sqrt(rows)``
of a large block (``docs/benchmarks.md`` measures recall@5 against the exact scan).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "ITERATIONS",
    "PARTITION_MIN",
    "PROBES",
    "SEED",
    "Cells",
    "assign",
    "cell_count",
    "cells_of",
    "kmeans",
    "probe_order",
    "row_cells",
    "sample_rows",
]

PARTITION_MIN: Final = 4096  # a block with fewer rows is scored whole (exact)
PROBES: Final = 24  # cells a query reads in each partitioned block, at least
ITERATIONS: Final = 10  # k-means rounds
SAMPLE_PER_CELL: Final = 64  # k-means fits on at most this many rows per cell ...
SAMPLE_MAX: Final = 65536  # ... and at most this many rows in all
SEED: Final = 26  # of the sample and the initial centroids
_CHUNK: Final = 8192  # rows assigned at a time

Vectors = npt.NDArray[np.float32]


def cell_count(rows: int) -> int:
    """How many cells a block of ``rows`` rows is cut into (0: scored whole)."""
    return 0 if rows < PARTITION_MIN else round(rows**0.5)


def sample_rows(rows: int, cells: int) -> npt.NDArray[np.intp]:
    """Which of a block's ``rows`` (by position in stored id order) k-means fits
    on: a fixed-seed draw of at most ``SAMPLE_PER_CELL * cells`` and ``SAMPLE_MAX``,
    sorted."""
    size = min(rows, SAMPLE_PER_CELL * cells, SAMPLE_MAX)
    picked = np.random.default_rng(SEED).choice(rows, size=size, replace=False)
    return np.sort(picked)


def assign(vectors: Vectors, centroids: Vectors) -> npt.NDArray[np.int32]:
    """Each row's nearest centroid (largest dot product; ties to the lower cell),
    ``_CHUNK`` rows at a time."""
    out = np.empty(len(vectors), dtype=np.int32)
    for a in range(0, len(vectors), _CHUNK):
        scores = vectors[a : a + _CHUNK] @ centroids.T
        out[a : a + len(scores)] = np.argmax(scores, axis=1)
    return out


def _unit(rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: npt.NDArray[np.float64] = np.divide(
        rows, norms, out=np.zeros_like(rows), where=norms > 0
    )
    return out


def kmeans(sample: Vectors, cells: int, iterations: int = ITERATIONS) -> Vectors:
    """``cells`` unit centroids fitted to ``sample`` (unit rows) by spherical
    k-means, started from a fixed-seed draw of distinct sample rows. A cell left
    empty keeps its centroid (the final assignment drops it)."""
    if not 0 < cells <= len(sample):
        raise ValueError(f"cells {cells}: between 1 and the sample's {len(sample)}")
    rng = np.random.default_rng(SEED)
    centroids = np.ascontiguousarray(
        sample[np.sort(rng.choice(len(sample), size=cells, replace=False))]
    )
    for _ in range(iterations):
        cell = assign(sample, centroids)
        sums = np.zeros((cells, sample.shape[1]), dtype=np.float64)
        _add_rows(sums, cell, sample)
        counts = np.bincount(cell, minlength=cells)
        fitted = _unit(sums).astype(np.float32)
        centroids = np.where((counts > 0)[:, None], fitted, centroids)
    return np.ascontiguousarray(centroids, dtype=np.float32)


def _add_rows(
    sums: npt.NDArray[np.float64], cell: npt.NDArray[np.int32], rows: Vectors
) -> None:
    """``sums[c] += rows[i]`` for each row ``i`` of cell ``c`` (sorted, summed by
    cell, in float64 so the result does not depend on the order)."""
    order = np.argsort(cell, kind="stable")
    ordered = cell[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    totals = np.add.reduceat(rows[order].astype(np.float64), starts, axis=0)
    sums[ordered[starts]] = totals


def cells_of(
    vectors: Callable[[npt.NDArray[np.intp]], Vectors], rows: int
) -> tuple[npt.NDArray[np.int32], Vectors]:
    """The cell of each of a block's ``rows`` (in stored id order) and the cells'
    centroids, empty cells dropped and the rest renumbered in order; ``vectors``
    reads the block's rows at given positions (so a builder streams them from
    disk). No cells (``cell_count`` 0): every row in cell 0, no centroids."""
    cells = cell_count(rows)
    if not cells:
        return np.zeros(rows, dtype=np.int32), np.zeros((0, 0), dtype=np.float32)
    centroids = kmeans(vectors(sample_rows(rows, cells)), cells)
    cell = np.empty(rows, dtype=np.int32)
    for a in range(0, rows, _CHUNK):
        positions = np.arange(a, min(rows, a + _CHUNK), dtype=np.intp)
        cell[a : a + len(positions)] = assign(vectors(positions), centroids)
    used = np.bincount(cell, minlength=cells) > 0
    renumber = np.cumsum(used) - 1
    return renumber[cell].astype(np.int32), centroids[used]


@dataclass(frozen=True)
class Cells:
    """An index's partitions as retrieval reads them: every cell's centroid
    (``centroids``, unit rows) and rows ``[lo[c], hi[c])``, and each partitioned
    block by its first row: ``(stop, first cell, end cell)``."""

    centroids: Vectors
    lo: npt.NDArray[np.int64]
    hi: npt.NDArray[np.int64]
    blocks: dict[int, tuple[int, int, int]]

    @classmethod
    def of(cls, bounds: Sequence[Sequence[int]], centroids: Vectors) -> Cells:
        """From each partitioned block's cell bounds (each cell's first row, then
        the block's stop; blocks in stored order)."""
        lo: list[int] = []
        hi: list[int] = []
        blocks: dict[int, tuple[int, int, int]] = {}
        for edges in bounds:
            first = len(lo)
            lo.extend(edges[:-1])
            hi.extend(edges[1:])
            blocks[edges[0]] = (edges[-1], first, len(lo))
        return cls(
            centroids,
            np.array(lo, dtype=np.int64),
            np.array(hi, dtype=np.int64),
            blocks,
        )


def probe_order(cells: Cells, query: Vectors, first: int, end: int) -> list[int]:
    """Cells ``[first, end)`` best centroid first (ties to the lower cell)."""
    scores = cells.centroids[first:end] @ query
    order: list[int] = (np.argsort(-scores, kind="stable") + first).tolist()
    return order


def row_cells(bounds: Sequence[Sequence[int]], rows: int) -> npt.NDArray[np.int32]:
    """Each of ``rows`` stored rows' cell within its block (0 outside a partitioned
    block), from each partitioned block's bounds. Raises ``ValueError`` for bounds
    that are not increasing, overlap, or run past the rows."""
    cell = np.zeros(rows, dtype=np.int32)
    last = 0
    for edges in bounds:
        at = np.asarray(edges, dtype=np.int64)
        steps = at[1:] - at[:-1]
        if len(edges) < 2 or edges[0] < last or edges[-1] > rows or (steps <= 0).any():
            raise ValueError(
                f"cell bounds starting at row {edges[0] if edges else '?'} are not "
                f"increasing inside the {rows} rows"
            )
        cell[edges[0] : edges[-1]] = np.repeat(
            np.arange(len(steps), dtype=np.int32), steps
        )
        last = edges[-1]
    return cell

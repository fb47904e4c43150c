"""Retrieval from an index, centred on the action (see ``index.py``).

Candidates are of the action's kind only: a tool call is answered from tool results,
the same tool's first (best first), then other tools' when fewer than ``k`` remain;
a message from the replies to messages, those to the same command first when the
message issues one in a code block (a text agent's command: ``storage.command_of``);
never the other kind. A query is scored on
the action and a bounded window of recent context, as every row was
(:func:`~worldline.actors.simulator.storage.recent`). Excluded lineages and groups,
and the rows of the other partition, are removed before any score is computed;
ties (to 5 decimals) are broken by transition id. Rows are stored grouped by kind
and tool, so a query's candidates are one contiguous block; a large block is stored
by cell (``partition.py``) and a query reads only the cells nearest it. Each slice
it reads costs one matrix-vector product on a view of the vectors, never a copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal

import numpy as np
import numpy.typing as npt

from worldline.actors.belief_model.embedding import active
from worldline.actors.simulator.partition import PARTITION_MIN, PROBES, probe_order
from worldline.actors.simulator.sessions import SessionError
from worldline.actors.simulator.storage import (
    MANIFEST,
    call_tool,
    command_of,
    embed_pairs,
    embedder_refused,
)

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from worldline.actors.belief_model.embedding import Embedder
    from worldline.actors.simulator.index import TransitionIndex
    from worldline.actors.simulator.storage import Vectors
    from worldline.protocols.messages import Transition

__all__ = [
    "Kind",
    "UnknownLineage",
    "check_exclusions",
    "query_vector",
    "retrieve",
    "retrieve_rows",
]

Kind = Literal["tool", "message"]
DECIMALS: Final = 5  # of a cosine; closer scores tie, and ties go by id


class UnknownLineage(SessionError):
    """An exclusion names a lineage or group the index does not hold (a session
    refuses it by the name ``unknown_lineage``); ``unknown`` lists them."""

    def __init__(self, index: TransitionIndex, unknown: Sequence[str]) -> None:
        m = index.manifest
        names = ", ".join(repr(n) for n in unknown)
        super().__init__(
            "unknown_lineage",
            f"excluded {names}: no such lineage or group in index {m.id[:12]} "
            f"({len(m.lineages)} lineages in {len(m.groups)} groups); the index's "
            f'{MANIFEST} lists them ("lineages": each lineage and its group, '
            '"groups": each group and its split)',
        )
        self.unknown = tuple(unknown)


def query_vector(context: str, action: str, embedder: Embedder) -> Vectors:
    """What a query is scored with: the action and the context's recent window."""
    vector: Vectors = embed_pairs([(action, context)], embedder)[0]
    return vector


def _allowed(
    index: TransitionIndex,
    exclude_lineages: Collection[str],
    exclude_groups: Collection[str],
    split: Literal["fit", "held-out", "all"],
) -> npt.NDArray[np.bool_]:
    """Which lineages (by code) may be scored; unknown exclusions raise."""
    if split == "all":
        ok = np.ones(len(index._codes), dtype=bool)
    elif split == "held-out":
        ok = index._held.copy()
    elif split == "fit":
        ok = ~index._held
    else:
        raise ValueError(f"split {split!r}: one of 'fit', 'held-out', 'all'")
    unknown: list[str] = []
    for name in sorted(set(exclude_lineages)):
        code, group = index._codes.get(name), index._group_codes.get(name)
        if code is None and group is None:
            unknown.append(name)
        if code is not None:
            ok[code] = False
        if group is not None:
            ok[index._lineage_group == group] = False
    for name in sorted(set(exclude_groups)):
        group = index._group_codes.get(name)
        if group is None:
            unknown.append(name)
        else:
            ok[index._lineage_group == group] = False
    if unknown:
        raise UnknownLineage(index, sorted(set(unknown)))
    return ok


def check_exclusions(
    index: TransitionIndex,
    exclude_lineages: Collection[str] = (),
    exclude_groups: Collection[str] = (),
) -> None:
    """Raise :class:`UnknownLineage` if an exclusion names a lineage or group the
    index does not hold (what :func:`retrieve` would raise), e.g. when a session
    starts rather than at its first step."""
    _allowed(index, exclude_lineages, exclude_groups, "all")


def _pick(
    index: TransitionIndex,
    rows: npt.NDArray[np.int64],
    scores: npt.NDArray[np.float32],
    k: int,
) -> list[tuple[int, float]]:
    """The ``k`` best of the eligible ``rows`` and their ``scores`` (row, score),
    ties by id. Scores are rounded to :data:`DECIMALS` first: the same row scored
    in a slice of another length can differ in its last bit (BLAS unrolls by
    rows), and equal texts must tie however the rows were read."""
    if k <= 0 or not len(rows):
        return []
    scores = np.round(scores, DECIMALS)
    if k < len(scores):
        # Every row scoring at least the k-th best, so ties at the edge go by id.
        kth = np.partition(-scores, k - 1)[k - 1]
        chosen = np.flatnonzero(-scores <= kth)
        rows, scores = rows[chosen], scores[chosen]
    order = np.lexsort((index._rank[rows], -scores))[:k]
    return [(int(rows[i]), float(scores[i])) for i in order]


class _Reader:
    """Scores slices of the vectors (views: scoring one copies nothing; indexing
    with an array of rows would copy the whole block first, 7x the cost at 50k
    rows) and keeps the eligible rows' scores."""

    def __init__(
        self,
        index: TransitionIndex,
        query: Vectors,
        ok: npt.NDArray[np.bool_],
        mask: tuple[int, npt.NDArray[np.bool_]] | None,
    ) -> None:
        self.index, self.query, self.ok, self.mask = index, query, ok, mask
        self.rows: list[npt.NDArray[np.int64]] = []
        self.scores: list[npt.NDArray[np.float32]] = []
        self.held = 0  # eligible rows read

    def read(self, a: int, b: int) -> None:
        index = self.index
        eligible = self.ok[index._row_lineage[a:b]]
        if self.mask is not None:
            offset, allowed = self.mask
            eligible &= allowed[a - offset : b - offset]
        picks = np.flatnonzero(eligible)
        if len(picks):
            scores: npt.NDArray[np.float32] = index.vectors[a:b] @ self.query
            self.rows.append(picks + a)
            self.scores.append(scores[picks])
            self.held += len(picks)

    def best(self, k: int) -> list[tuple[int, float]]:
        if not self.rows:
            return []
        rows, scores = np.concatenate(self.rows), np.concatenate(self.scores)
        return _pick(self.index, rows, scores, k)


def _search(
    index: TransitionIndex,
    query: Vectors,
    ok: npt.NDArray[np.bool_],
    span: tuple[int, int],
    k: int,
    probes: int,
    *,
    skip: tuple[int, int] = (0, 0),
    mask: tuple[int, npt.NDArray[np.bool_]] | None = None,
) -> list[tuple[int, float]]:
    """The ``k`` best eligible rows of ``span`` outside ``skip`` (and where
    ``mask``, from its offset, allows). A block that is not partitioned is read
    whole; a partitioned block's cells are read best centroid first until at
    least ``probes`` cells are read and ``k`` eligible rows held (``partition.py``);
    probes covering every cell read everything: the exact answer."""
    if k <= 0:
        return []
    start, stop = span
    cells = index._cells
    blocks = [
        (a, b, first, end)
        for a, (b, first, end) in cells.blocks.items()
        if start <= a < stop and (a, b) != skip
    ]
    cut = sorted([*((a, b) for a, b, _, _ in blocks), skip])
    reader = _Reader(index, query, ok, mask)
    at = start
    for a, b in cut:  # the rows no partition holds are read whole
        if a > at:
            reader.read(at, min(a, stop))
        at = max(at, b)
    if at < stop:
        reader.read(at, stop)
    if probes >= sum(end - first for _, _, first, end in blocks):
        for a, b, _, _ in blocks:
            reader.read(a, b)
        return reader.best(k)
    if len(blocks) == 1:
        order = probe_order(cells, query, blocks[0][2], blocks[0][3])
    else:
        ids = np.concatenate([np.arange(f, e) for _, _, f, e in blocks])
        best = np.argsort(-(cells.centroids[ids] @ query), kind="stable")
        order = ids[best].tolist()
    lo, hi = cells.lo, cells.hi
    for read, cell in enumerate(order):
        if read >= probes and reader.held >= k:
            break
        reader.read(int(lo[cell]), int(hi[cell]))
    return reader.best(k)


def _ranked(
    index: TransitionIndex,
    query: Vectors,
    ok: npt.NDArray[np.bool_],
    kind: Kind,
    action: str,
    k: int,
    probes: int = PROBES,
) -> list[tuple[int, float]]:
    """The ``k`` best rows of ``kind`` for ``action`` (the same tool's, or the
    same command's, first)."""
    start, stop = index._spans[kind]
    if kind == "tool":
        a, b = index._tools.get(call_tool(action) or "", (start, start))
        found = _search(index, query, ok, (a, b), k, probes)
        if len(found) >= k:
            return found
        # The other tools' results: the kind's span without this tool's rows.
        rest = _search(
            index, query, ok, (start, stop), k - len(found), probes, skip=(a, b)
        )
        return found + rest
    # A text action that issues a command (its last code block's first word) is
    # answered from replies to the same command first, as a call is from its
    # tool's results.
    same = index._commands.get(command_of(action) or "")
    if same is None:
        return _search(index, query, ok, (start, stop), k, probes)
    issued = np.zeros(stop - start, dtype=bool)
    issued[same - start] = True
    if len(same) < PARTITION_MIN:  # few: scored exactly, by row
        eligible = same[ok[index._row_lineage[same]]]
        scores: npt.NDArray[np.float32] = index.vectors[eligible] @ query
        found = _pick(index, eligible, scores, k)
    else:
        found = _search(
            index, query, ok, (start, stop), k, probes, mask=(start, issued)
        )
    if len(found) >= k:
        return found
    rest = _search(
        index, query, ok, (start, stop), k - len(found), probes, mask=(start, ~issued)
    )
    return found + rest


def retrieve(
    index: TransitionIndex,
    *,
    task: str,
    context: str,
    action: str,
    exclude_lineages: Collection[str] = (),
    k: int = 5,
    split: Literal["fit", "held-out", "all"] = "fit",
    embedder: Embedder | None = None,
    kind: Kind | None = None,
    exclude_groups: Collection[str] = (),
    probes: int = PROBES,
) -> list[tuple[Transition, float]]:
    """Up to ``k`` real transitions after an action like this one, with their cosine
    similarity: for a tool call, tool results (the same tool's first, best first,
    then other tools' if fewer than ``k`` remain); for a message, replies to
    messages (to the same command first, when the message issues one). ``kind``
    says which; left None, an action written as a call to a tool the index holds
    (``name(arguments)``) is a tool call, anything else a message.

    Scored on the action and the recent window of ``context`` (``task`` is kept for
    callers; it is not scored). Excluded lineages (a name may also be a group: all
    its lineages), ``exclude_groups`` and rows outside ``split`` are removed before
    any score is computed; a name the index does not hold raises
    :class:`UnknownLineage`. The query is embedded with ``embedder`` (default: the
    process's selected one), which must be the index's (else :class:`IndexRefused`).
    A large block is read ``probes`` cells at least (``partition.py``; as many as it
    has: exact).
    """
    del task  # not scored: the action and recent context are (see the docstring)
    found = retrieve_rows(
        index,
        context=context,
        action=action,
        exclude_lineages=exclude_lineages,
        k=k,
        split=split,
        embedder=embedder,
        kind=kind,
        exclude_groups=exclude_groups,
        probes=probes,
    )
    return [(index.transition(row), score) for row, score in found]


def retrieve_rows(
    index: TransitionIndex,
    *,
    context: str,
    action: str,
    exclude_lineages: Collection[str] = (),
    k: int = 5,
    split: Literal["fit", "held-out", "all"] = "fit",
    embedder: Embedder | None = None,
    kind: Kind | None = None,
    exclude_groups: Collection[str] = (),
    probes: int = PROBES,
) -> list[tuple[int, float]]:
    """What :func:`retrieve` finds, as stored rows (row number, score), before
    any transition is read back."""
    if k < 0:
        raise ValueError(f"k {k}: at least 0")
    embedder = embedder if embedder is not None else active()
    if index.manifest.embedder != embedder.id:
        raise embedder_refused(index.manifest.embedder, embedder.id, "the index was")
    ok = _allowed(index, exclude_lineages, exclude_groups, split)
    tool = call_tool(action)
    if kind is None:
        kind = "tool" if tool is not None and tool in index._tools else "message"
    start, stop = index._spans[kind]
    if k == 0 or stop <= start or not ok.any():
        return []
    query = query_vector(context, action, embedder)
    if probes < 1:
        raise ValueError(f"probes {probes}: at least 1 cell of a partitioned block")
    return _ranked(index, query, ok, kind, action, k, probes)

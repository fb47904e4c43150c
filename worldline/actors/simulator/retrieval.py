"""Retrieval from an index, centred on the action (see ``index.py``).

Candidates are of the action's kind only: a tool call is answered from tool results,
the same tool's first (best first), then other tools' when fewer than ``k`` remain;
a message from the replies to messages, those to the same command first when the
message issues one in a code block (a text agent's command: ``storage.command_of``);
never the other kind. A query is scored on
the action and a bounded window of recent context, as every row was
(:func:`~worldline.actors.simulator.storage.recent`). Excluded lineages and groups,
and the rows of the other partition, are removed before any score is computed;
ties are broken by transition id. Scoring reads one contiguous block of the vectors
per kind (rows are stored grouped by kind and tool), so a query costs one
matrix-vector product over its candidates, on a slice of the vectors (a view, never a
copy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from worldline.actors.belief_model.embedding import active
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


def _scored(
    index: TransitionIndex,
    query: Vectors,
    ok: npt.NDArray[np.bool_],
    start: int,
    stop: int,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """The scores of rows ``[start, stop)`` and which of them are eligible. The
    block is a slice of the vectors, a view: scoring it copies nothing (indexing
    with an array of rows would copy the whole block first, 7x the cost at 50k
    rows)."""
    scores: npt.NDArray[np.float32] = index.vectors[start:stop] @ query
    return scores, ok[index._row_lineage[start:stop]]


def _best(
    index: TransitionIndex,
    scores: npt.NDArray[np.float32],
    eligible: npt.NDArray[np.bool_],
    offset: int,
    k: int,
) -> list[tuple[int, float]]:
    """The ``k`` best eligible rows of a scored block starting at row ``offset``
    (row, score), ties by id."""
    if k <= 0:
        return []
    picks = np.flatnonzero(eligible)
    if not len(picks):
        return []
    kept = scores[picks]
    if k < len(kept):
        # Every row scoring at least the k-th best, so ties at the edge go by id.
        kth = np.partition(-kept, k - 1)[k - 1]
        chosen = np.flatnonzero(-kept <= kth)
        picks, kept = picks[chosen], kept[chosen]
    rows = picks + offset
    order = np.lexsort((index._rank[rows], -kept))[:k]
    return [(int(rows[i]), float(kept[i])) for i in order]


def _ranked(
    index: TransitionIndex,
    query: Vectors,
    ok: npt.NDArray[np.bool_],
    kind: Kind,
    action: str,
    k: int,
) -> list[tuple[int, float]]:
    """The ``k`` best rows of ``kind`` for ``action`` (the same tool's, or the
    same command's, first), each block scored as one slice."""
    start, stop = index._spans[kind]
    if kind == "tool":
        a, b = index._tools.get(call_tool(action) or "", (start, start))
        scores, eligible = _scored(index, query, ok, a, b)
        found = _best(index, scores, eligible, a, k)
        if len(found) >= k:
            return found
        # The other tools' results: the kind's block without this tool's rows.
        scores, eligible = _scored(index, query, ok, start, stop)
        eligible[a - start : b - start] = False
        return found + _best(index, scores, eligible, start, k - len(found))
    # A text action that issues a command (its last code block's first word) is
    # answered from replies to the same command first, as a call is from its
    # tool's results.
    scores, eligible = _scored(index, query, ok, start, stop)
    same = index._commands.get(command_of(action) or "")
    if same is None:
        return _best(index, scores, eligible, start, k)
    issued = np.zeros(stop - start, dtype=bool)
    issued[same - start] = True
    found = _best(index, scores, eligible & issued, start, k)
    rest = _best(index, scores, eligible & ~issued, start, k - len(found))
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
    return _ranked(index, query, ok, kind, action, k)

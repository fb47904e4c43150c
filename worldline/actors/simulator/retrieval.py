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
matrix-vector product over its candidates.
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

__all__ = ["Kind", "UnknownLineage", "check_exclusions", "query_vector", "retrieve"]

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


def _top(
    index: TransitionIndex,
    query: Vectors,
    ok: npt.NDArray[np.bool_],
    rows: npt.NDArray[np.int64],
    k: int,
) -> list[tuple[int, float]]:
    """The ``k`` best eligible ``rows`` (row, score), ties by id."""
    if k <= 0 or not len(rows):
        return []
    scores = index.vectors[rows] @ query
    keep = ok[index._row_lineage[rows]]
    rows, scores = rows[keep], scores[keep]
    if k < len(scores):
        # Every row scoring at least the k-th best, so ties at the edge go by id.
        kth = np.partition(-scores, k - 1)[k - 1]
        chosen = np.flatnonzero(-scores <= kth)
        rows, scores = rows[chosen], scores[chosen]
    order = np.lexsort((index._rank[rows], -scores))[:k]
    return [(int(rows[i]), float(scores[i])) for i in order]


def _span(start: int, stop: int) -> npt.NDArray[np.int64]:
    return np.arange(start, max(start, stop), dtype=np.int64)


def _first(
    index: TransitionIndex,
    query: Vectors,
    ok: npt.NDArray[np.bool_],
    same: npt.NDArray[np.int64],
    rest: npt.NDArray[np.int64],
    k: int,
) -> list[tuple[int, float]]:
    """The best of ``same`` first, then of ``rest`` while fewer than ``k``."""
    found = _top(index, query, ok, same, k)
    return found + _top(index, query, ok, rest, k - len(found))


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
    if kind == "message":
        # A text action that issues a command (its last code block's first word)
        # is answered from replies to the same command first, as a call is from
        # its tool's results.
        command = command_of(action)
        same = index._commands.get(command or "", _span(0, 0))
        others = np.ones(stop - start, dtype=bool)
        others[same - start] = False
        rest = _span(start, stop)[others]
    else:
        a, b = index._tools.get(tool or "", (start, start))
        same = _span(a, b)
        rest = np.concatenate([_span(start, a), _span(b, stop)])
    found = _first(index, query, ok, same, rest, k)
    return [(index.transition(row), score) for row, score in found]

"""Forecasts: what really followed actions like a move, and how many times.

A forecast retrieves the ``k`` nearest real transitions of the move's kind (a move
written ``name(arguments)`` is a tool call, answered from tool results; anything else
a message, answered from user or environment replies; see
:func:`~worldline.actors.simulator.retrieval.retrieve`) and groups their
observations: each distinct observation (whitespace normalised) is one outcome, with
how many times the neighbours that gave it were recorded (``support``: a transition
the traces recorded twice counts twice), their lineages, their transition ids and
the best similarity among them. Nothing is generated: every outcome is a recorded
observation.

**Close enough.** A neighbour counts only if it scores above :data:`FLOOR`, the
highest score a row whose action shares nothing with the query can reach on its
context alone. Rows and queries are unit vectors of ``A * action + C * window``
(``A = ACTION_WEIGHT``, ``C = CONTEXT_WEIGHT``, each embedding a unit vector). If a
row's action embedding ``a`` is orthogonal to (or points away from) the query ``q``,
the row's vector lies in the ball of radius ``C`` around ``A * a``, whose every
point makes an angle of at least ``90 - asin(C / A)`` degrees with ``q``; so its
cosine with ``q`` is at most ``C / A`` (0.5 with the weights 0.8 and 0.4). A score
above it therefore means the neighbour's action shares something with the query
(with no context: with the move itself). When no neighbour clears it, the forecast
is ``grounded=False`` with no outcomes and a note that starts "no grounding:",
never a guess.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from worldline.actors.simulator.retrieval import Kind, retrieve
from worldline.actors.simulator.storage import (
    ACTION_WEIGHT,
    CONTEXT_WEIGHT,
    call_tool,
)
from worldline.protocols.messages import ForecastOutcome, SimForecastReply

if TYPE_CHECKING:
    from collections.abc import Collection

    from worldline.actors.belief_model.embedding import Embedder
    from worldline.actors.simulator.index import TransitionIndex
    from worldline.protocols.messages import Transition

__all__ = ["FLOOR", "forecast", "move_kind", "outcomes"]

# The most a row whose action shares nothing with the query can score (see above).
FLOOR: Final = CONTEXT_WEIGHT / ACTION_WEIGHT


def move_kind(move: str) -> Kind:
    """A move written as a call (``name(arguments)``) is a tool call; anything
    else a message."""
    return "tool" if call_tool(move) is not None else "message"


def _normalised(text: str) -> str:
    return " ".join(text.split())


def outcomes(found: list[tuple[Transition, float]]) -> tuple[ForecastOutcome, ...]:
    """The distinct observations of ``found`` (neighbours, best first), each with
    its support (the sum of its neighbours' recorded counts), lineages, transition
    ids and best similarity; ordered by support,
    then best similarity, then the observation."""
    grouped: dict[str, list[tuple[Transition, float]]] = {}
    for transition, score in found:
        grouped.setdefault(_normalised(transition.observation), []).append(
            (transition, score)
        )
    made = [
        ForecastOutcome(
            observation=observation,
            support=sum(t.support for t, _ in items),
            lineages=tuple(sorted({t.lineage for t, _ in items})),
            transitions=tuple(t.id for t, _ in items),
            similarity=round(max(s for _, s in items), 6),
        )
        for observation, items in grouped.items()
    ]
    made.sort(key=lambda o: (-o.support, -o.similarity, o.observation))
    return tuple(made)


def forecast(
    index: TransitionIndex,
    move: str,
    *,
    context: str = "",
    k: int = 5,
    exclude_lineages: Collection[str] = (),
    embedder: Embedder | None = None,
) -> SimForecastReply:
    """The real outcomes of the ``k`` nearest transitions after actions like
    ``move`` (in the index's fit split, ``exclude_lineages`` removed before
    scoring) that score above :data:`FLOOR`; ``grounded=False`` and a note
    starting "no grounding:" when none does. An exclusion the index does not hold
    raises :class:`~worldline.actors.simulator.retrieval.UnknownLineage`."""
    kind = move_kind(move)
    what = "tool result" if kind == "tool" else "reply to a message"
    found = retrieve(
        index,
        task="",
        context=context,
        action=move,
        exclude_lineages=exclude_lineages,
        k=k,
        kind=kind,
        embedder=embedder,
    )
    close = [(t, s) for t, s in found if s > FLOOR]
    shown = outcomes(close)
    if not found:
        note = (
            f"no grounding: no real {what} is left to ground a forecast on (the index "
            "holds none of this kind, or every lineage is excluded)"
        )
    elif not close:
        note = (
            f"no grounding: the nearest real {what} scores "
            f"{max(s for _, s in found):.3f}, not above {FLOOR:.2f}, the most a "
            "transition whose action shares nothing with the move can score on its "
            "context alone"
        )
    else:
        plural = "s" if len(shown) != 1 else ""
        note = (
            f"{len(close)} of {len(found)} nearest real transitions score above "
            f"{FLOOR:.2f}: {len(shown)} distinct outcome{plural}"
        )
    return SimForecastReply(
        move=move,
        grounded=bool(close),
        outcomes=shown,
        index=index.manifest.id,
        note=note,
        move_kind=kind,
        floor=FLOOR,
    )

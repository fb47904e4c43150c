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

**Close enough.** A neighbour counts only if it scores above :data:`FLOOR`, after
the identifier rule (a tool call's tool and ids must be named by the neighbour's
action too), both shared with sessions: see
:mod:`~worldline.actors.simulator.grounded`. When no neighbour clears it, the
forecast is ``grounded=False`` with no outcomes and a note that starts "no
grounding:", never a guess.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldline.actors.simulator.grounded import FLOOR, ground
from worldline.actors.simulator.storage import call_tool
from worldline.protocols.messages import ForecastOutcome, SimForecastReply

if TYPE_CHECKING:
    from collections.abc import Collection

    from worldline.actors.belief_model.embedding import Embedder
    from worldline.actors.simulator.index import TransitionIndex
    from worldline.actors.simulator.retrieval import Kind
    from worldline.protocols.messages import Transition

__all__ = ["FLOOR", "forecast", "move_kind", "outcomes"]


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
    grounding = ground(
        index,
        task="",
        context=context,
        action=move,
        exclude_lineages=exclude_lineages,
        k=k,
        kind=kind,
        embedder=embedder,
    )
    found, close = grounding.found, grounding.close
    shown = outcomes(close)
    if not close:
        note = grounding.why()
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

"""World-model providers. The default is local and deterministic: it answers with the
observation of the nearest real transition of the right kind (a tool's result for a
tool call, same tool first; a user or environment reply for a message; never the other
kind), retrieved on task + context + candidate action, never the observation, with the
session's excluded lineages removed before scoring. Every prediction is conditioned
only on what really happened, and says which transitions it read.

A prediction ends the session only when the nearest transition ended its own trace
*at a comparable depth*: a real conversation that ended after ``d`` assistant actions
is evidence that this one ends only once it has taken at least ``(d - 1) // 2`` of its
own (see :func:`ends_here`). Without that, a session with a short (or empty) context
ended on its first step whenever its nearest neighbour was the closing turn of a long
conversation.

Nothing is answered with confidence that nothing recorded is close to: below the floor
forecasts use (after the identifier rule: a call to a tool the index does not hold,
or naming an id no recorded call names; see
:mod:`~worldline.actors.simulator.grounded`) a step is refused as ``no_grounding``
with the nearest score, or, if the caller asked for a best guess, answered by the
nearest and flagged ``grounded=False`` (:func:`admitted`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from worldline.actors.simulator.grounded import Grounded, ground
from worldline.actors.simulator.sessions import (
    Kind,
    Prediction,
    Session,
    SessionError,
)

if TYPE_CHECKING:
    from worldline.actors.simulator.index import TransitionIndex
    from worldline.protocols.messages import Transition

__all__ = [
    "LocalProvider",
    "admitted",
    "depth",
    "ends_here",
    "grounding",
    "judged",
    "kind_of",
    "tool_of",
]

_ASSISTANT: Final = "assistant: "


def kind_of(transition: Transition) -> Kind:
    """A transition's kind: a tool's result (paired by id or by name and order) or
    a message (a turn)."""
    return "message" if transition.pairing == "turn" else "tool"


def tool_of(action: str) -> str:
    """The tool a rendered call names (``name(arguments)`` -> ``name``)."""
    return action.split("(", 1)[0].strip()


def depth(text: str) -> int:
    """How many assistant messages a rendered context holds (lines ``assistant:``)."""
    return sum(1 for line in text.split("\n") if line.startswith(_ASSISTANT))


def ends_here(nearest: Transition, session_text: str) -> bool:
    """Whether ``nearest`` (the best grounding) ends the session: it ended its own
    trace, and it did so at most about twice as deep as this session is now."""
    if not nearest.final:
        return False
    return depth(nearest.context) <= 2 * depth(session_text) + 1


def grounding(
    index: TransitionIndex,
    session: Session,
    action: str,
    kind: Kind,
    k: int,
) -> Grounded:
    """The ``k`` nearest real transitions of ``kind`` for ``action`` in ``session``
    (for a tool call, those of the same tool first), best first, scored after the
    identifier rule. Rows of another kind are never returned."""
    found = ground(
        index,
        task=session.task,
        context=session.text(),
        action=action,
        exclude_lineages=session.exclude_lineages,
        k=k,
        kind=kind,
    )
    # ground() already keeps the kind; the filter makes the rule local and plain.
    kept = [(t, s) for t, s in found.found if kind_of(t) == kind]
    return Grounded(kept, found.what, found.unseen)


def admitted(found: Grounded, best_guess: bool) -> list[Transition]:
    """The neighbours a prediction may read: every one when one is above the
    floor, or when the caller asked for a best guess; else a ``no_grounding``
    refusal naming the nearest score (nothing left at all is refused either way)."""
    if not found.found:
        raise SessionError(
            "no_grounding",
            f"no real transition of this kind ({found.what}) is left to ground a "
            "prediction on (the index is empty, holds none of this kind, or every "
            "lineage is excluded)",
        )
    if not found.grounded and not best_guess:
        raise SessionError(
            "no_grounding",
            f"{found.why().removeprefix('no grounding: ')}; step with best_guess "
            "for the nearest anyway, flagged grounded=false",
            similarity=round(found.best, 6),
        )
    return [t for t, _ in found.found]


def judged(prediction: Prediction, found: Grounded) -> Prediction:
    """``prediction`` with whether it is grounded, its nearest score and why not."""
    return Prediction(
        observation=prediction.observation,
        terminal=prediction.terminal,
        grounding=prediction.grounding,
        support=prediction.support,
        grounded=found.grounded,
        similarity=round(found.best, 6),
        note="" if found.grounded else found.why(),
    )


class LocalProvider:
    """Predict from the retrieved real transitions (top-k, ``k`` by default 5)."""

    def __init__(self, index: TransitionIndex, *, k: int = 5) -> None:
        self.index = index
        self.k = k

    def __call__(
        self,
        session: Session,
        action: str,
        kind: Kind = "message",
        *,
        best_guess: bool = False,
    ) -> Prediction:
        scored = grounding(self.index, session, action, kind, self.k)
        found = admitted(scored, best_guess)
        nearest = found[0]
        prediction = Prediction(
            observation=nearest.observation,
            terminal=ends_here(nearest, session.text()),
            grounding=tuple(t.id for t in found),
            support=tuple(t.support for t in found),
        )
        return judged(prediction, scored)

"""World-model providers. The default is local and deterministic: it answers with the
observation of the nearest real transition (task + context + candidate action, never
the observation, with the session's excluded lineages removed before scoring), so
every prediction is conditioned only on what really happened, and says which."""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldline.actors.simulator.index import retrieve
from worldline.actors.simulator.sessions import Prediction, Session, SessionError

if TYPE_CHECKING:
    from worldline.actors.simulator.index import TransitionIndex

__all__ = ["LocalProvider"]


class LocalProvider:
    """Predict from the retrieved real transitions (top-k, ``k`` by default 5)."""

    def __init__(self, index: TransitionIndex, *, k: int = 5) -> None:
        self.index = index
        self.k = k

    def __call__(self, session: Session, action: str) -> Prediction:
        found = retrieve(
            self.index,
            task=session.task,
            context=session.text(),
            action=action,
            exclude_lineages=session.exclude_lineages,
            k=self.k,
        )
        if not found:
            raise SessionError(
                "no_grounding",
                "no real transition is left to ground a prediction on (the index is "
                "empty, or every lineage is excluded)",
            )
        nearest, _ = found[0]
        return Prediction(
            observation=nearest.observation,
            terminal=nearest.final,
            grounding=tuple(t.id for t, _ in found),
        )

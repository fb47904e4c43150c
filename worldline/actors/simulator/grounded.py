"""Close enough to answer: the floor and the identifier rule, shared by sessions and
forecasts (issue 26), so neither answers what the index never saw.

**The floor.** A neighbour counts only if it scores above :data:`FLOOR`, the highest
score a row whose action shares nothing with the query can reach on its context
alone. Rows and queries are unit vectors of ``A * action + C * window`` (``A =
ACTION_WEIGHT``, ``C = CONTEXT_WEIGHT``, each embedding a unit vector). If a row's
action embedding ``a`` is orthogonal to (or points away from) the query ``q``, the
row's vector lies in the ball of radius ``C`` around ``A * a``, whose every point
makes an angle of at least ``90 - asin(C / A)`` degrees with ``q``; so its cosine with
``q`` is at most ``C / A`` (0.5 with the weights 0.8 and 0.4).

**Identifiers.** Cosine over a whole call is fooled by what a call shares with
another: ``get_reservation_details({"reservation_id": "XYZ999"})`` scores 0.92
against the same call for another reservation, whose result is someone else's
booking. So a tool call's *identifiers*, its tool's name and every argument token
holding a digit (an id, a code, a number, a date; lower-cased, at least 2
characters), must each be named by a neighbour's action too; a neighbour missing one
scores ``FLOOR`` times its similarity, never above the floor: a call to a tool the
index does not hold never matches another tool's results, and a lookup of an id no
recorded call names is "no grounding" (or, when the caller asks for a best guess,
an answer flagged ungrounded). Messages are not checked: a user's reply to an
assistant's text rarely hangs on the ids the text repeats.

The rule is per neighbour, not per index: an id seen only in some observation (a
list of a user's reservations) still has no recorded lookup, so a lookup of it is
not grounded. The ``k`` neighbours are chosen from :data:`POOL` candidates, so a
recorded call naming the id is found even when calls for other ids score higher on
their context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from worldline.actors.simulator.retrieval import Kind, retrieve_rows
from worldline.actors.simulator.storage import (
    ACTION_WEIGHT,
    CONTEXT_WEIGHT,
    call_tool,
)

if TYPE_CHECKING:
    from collections.abc import Collection

    from worldline.actors.belief_model.embedding import Embedder
    from worldline.actors.simulator.index import TransitionIndex
    from worldline.protocols.messages import Transition

__all__ = ["FLOOR", "POOL", "Grounded", "ground", "identifiers"]

# The most a row whose action shares nothing with the query can score (see above).
FLOOR: Final = CONTEXT_WEIGHT / ACTION_WEIGHT
POOL: Final = 16  # candidates a tool call's identifiers are checked on
_TOKEN: Final = re.compile(r"[0-9A-Za-z][0-9A-Za-z_.:/-]*")
_CALL: Final = re.compile(r"\s*[A-Za-z_][\w.\-]*\((.*)\)\s*\Z", re.DOTALL)


def identifiers(action: str) -> frozenset[str]:
    """What a tool call's result hangs on: ``tool:<name>`` and each argument token
    holding a digit (lower-cased, 2 characters or more); none for a message."""
    tool = call_tool(action)
    match = _CALL.match(action)
    if tool is None or match is None:
        return frozenset()
    tokens = (t.strip(".:/-").lower() for t in _TOKEN.findall(match.group(1)))
    named = {t for t in tokens if len(t) >= 2 and any(c.isdigit() for c in t)}
    return frozenset({f"tool:{tool}", *named})


def _shown(names: Collection[str]) -> str:
    return ", ".join(
        f"the tool {n[5:]!r}" if n.startswith("tool:") else repr(n)
        for n in sorted(names)
    )


@dataclass(frozen=True)
class Grounded:
    """The neighbours of an action with their scores after the identifier rule
    (best first), and what the best one's action did not name."""

    found: list[tuple[Transition, float]]
    what: str  # "tool result" or "reply to a message"
    unseen: frozenset[str] = frozenset()  # the query's identifiers the best lacks

    @property
    def close(self) -> list[tuple[Transition, float]]:
        """The neighbours above :data:`FLOOR`."""
        return [(t, s) for t, s in self.found if s > FLOOR]

    @property
    def best(self) -> float:
        """The best score (0.0 with no neighbour)."""
        return max((s for _, s in self.found), default=0.0)

    @property
    def grounded(self) -> bool:
        return bool(self.close)

    def why(self) -> str:
        """Why nothing is close enough: a note that starts "no grounding:"."""
        if not self.found:
            return (
                f"no grounding: no real {self.what} is left to ground on (the index "
                "holds none of this kind, or every lineage is excluded)"
            )
        unseen = ""
        if self.unseen:
            unseen = (
                f" (its action does not name {_shown(self.unseen)}, which no close "
                f"recorded call names, so it counts {FLOOR:g} times its similarity)"
            )
        return (
            f"no grounding: the nearest real {self.what} scores {self.best:.3f}"
            f"{unseen}, not above {FLOOR:.2f}, the most a transition whose action "
            "shares nothing with this one can score on its context alone"
        )


def ground(
    index: TransitionIndex,
    *,
    task: str,
    context: str,
    action: str,
    kind: Kind,
    k: int = 5,
    exclude_lineages: Collection[str] = (),
    embedder: Embedder | None = None,
) -> Grounded:
    """The ``k`` nearest real transitions of ``kind`` after ``action``, best first,
    each scored by :func:`~worldline.actors.simulator.retrieval.retrieve`'s cosine,
    times :data:`FLOOR` when its action does not name every identifier of this
    tool call (:func:`identifiers`). ``task`` is recorded, not scored (as in
    ``retrieve``). Raises what ``retrieve`` raises."""
    del task
    named = identifiers(action) if kind == "tool" else frozenset()
    found = retrieve_rows(
        index,
        context=context,
        action=action,
        exclude_lineages=exclude_lineages,
        k=max(k, POOL) if named and k > 0 else k,
        kind=kind,
        embedder=embedder,
    )
    what = "tool result" if kind == "tool" else "reply to a message"
    missing = [named - identifiers(index.rows[row].action) for row, _ in found]
    scored = [
        (row, s * FLOOR if lacks else s)
        for (row, s), lacks in zip(found, missing, strict=True)
    ]
    # Stable: equal scores keep retrieve's order (by transition id). Only the
    # chosen rows are read back as transitions.
    order = sorted(range(len(scored)), key=lambda i: -scored[i][1])[:k]
    best = missing[order[0]] if order else frozenset()
    chosen = [(index.transition(scored[i][0]), scored[i][1]) for i in order]
    return Grounded(chosen, what, frozenset(best))

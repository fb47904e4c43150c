"""The worldview: the bounded, traced decision view an agent reads before it acts.

Six slices (environment, current, intent, policy, affordances, moves), each a short
ranked list of :class:`Leaf` items; every leaf names in ``trace`` the belief and
constraint ids that put it there. ``prompt`` is rendered from these structs, never the
other way round.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

__all__ = ["SLICES", "Leaf", "Worldview"]

SLICES = ("environment", "current", "intent", "policy", "affordances", "moves")


class Leaf(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One item of a slice."""

    id: str  # the belief, goal, constraint, action or entity it stands for
    kind: str  # claim, gap, contradiction, goal, constraint, invariant, action, move...
    text: str
    score: float = 0.0  # decision value: what it was ranked by within its slice
    status: str = ""  # affordances: allowed, flagged or blocked
    confidence: float | None = None
    flags: tuple[str, ...] = ()  # stale, stable, contradicted, uncertain
    trace: tuple[str, ...] = ()  # ids that put it here
    # For a question about time (it asks when, or names a day): the day the belief
    # was first said, YYYY-MM-DD (an observed artifact's own date when it gave one).
    said: str = ""


class Worldview(msgspec.Struct, frozen=True, kw_only=True):
    """What one agent reads before one move: a pure function of (state, agent,
    query, clock). Every slice is in its encoded form, even when empty."""

    world: str
    agent: str
    query: str
    at: datetime
    environment: list[Leaf] = msgspec.field(default_factory=list)
    current: list[Leaf] = msgspec.field(default_factory=list)
    intent: list[Leaf] = msgspec.field(default_factory=list)
    policy: list[Leaf] = msgspec.field(default_factory=list)
    affordances: list[Leaf] = msgspec.field(default_factory=list)
    moves: list[Leaf] = msgspec.field(default_factory=list)  # moves[0]: the top move
    limiting: Leaf | None = None  # the open belief most in the way of the goals
    clarity: float = 0.0  # 0-1 readiness to act
    prompt: str = ""  # the rendered text the model reads
    tokens: int = 0  # the prompt's size by the documented estimate
    # Which confidence it shows: "" the posterior as fusion read it; else the
    # recalibration fitted on the world's resolved beliefs ("isotonic on 40
    # resolved beliefs"; docs/belief-math.md, "Calibration").
    calibration: str = ""

    @property
    def beliefs(self) -> list[Leaf]:
        """The load-bearing claims in play."""
        return [
            leaf for leaf in self.current if leaf.kind not in ("gap", "contradiction")
        ]

    @property
    def gaps(self) -> list[Leaf]:
        """Open questions."""
        return [leaf for leaf in self.current if leaf.kind == "gap"]

    @property
    def goals(self) -> list[Leaf]:
        """What we are after."""
        return [leaf for leaf in self.intent if leaf.kind == "goal"]

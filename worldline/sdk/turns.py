"""What a turn reads and what it leaves: :class:`Turn` (the worldview read at its
start, the output set by its body) and :class:`Extracted` (what the extractor read in
an observation or a turn's output, and whether it is applied).

Plain data with no connection behind it, so the client can name :class:`Turn` in its
own signature without importing the hooks (:mod:`worldline.sdk.hooks` builds on the
client, not the reverse).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import msgspec

from worldline.protocols.messages import BeliefType

if TYPE_CHECKING:
    from worldline.protocols.worldview import Worldview

__all__ = ["Extracted", "ExtractedStatement", "Role", "Turn"]

Role = Literal["artifact", "output", "tool"]


class ExtractedStatement(msgspec.Struct, frozen=True, kw_only=True):
    """One statement the extractor read in an artifact."""

    belief_id: str  # the belief it is evidence for (created if it was new)
    evidence_id: str  # its evidence item, visible in ``trace(belief_id)``
    type: BeliefType  # as the extractor read it: claim, assumption, risk, gap...
    direction: str  # supports, refutes or neutral (a gap)
    text: str  # the statement's normalized text


class Extracted(msgspec.Struct, frozen=True, kw_only=True):
    """What one observation (an artifact, or a turn's output) became."""

    obs_id: str
    statements: list[ExtractedStatement] = msgspec.field(default_factory=list)
    applied: bool = False  # every statement is readable; False: the wait ran out

    def ids(self, type: BeliefType) -> list[str]:
        """The distinct belief ids of one type, in the order they were read."""
        return list(
            dict.fromkeys(s.belief_id for s in self.statements if s.type == type)
        )

    @property
    def claims(self) -> list[str]:
        return self.ids("claim")

    @property
    def assumptions(self) -> list[str]:
        return self.ids("assumption")

    @property
    def risks(self) -> list[str]:
        return self.ids("risk")

    @property
    def gaps(self) -> list[str]:
        return self.ids("gap")

    def by_type(self) -> dict[str, list[str]]:
        """Belief ids grouped by type (only the types present)."""
        grouped: defaultdict[str, list[str]] = defaultdict(list)
        for statement in self.statements:
            if statement.belief_id not in grouped[statement.type]:
                grouped[statement.type].append(statement.belief_id)
        return dict(grouped)


@dataclass
class Turn:
    """One turn of an agent loop: its worldview, and what the body sets."""

    query: str
    worldview: Worldview
    output: str | None = None  # set by the body: the turn's text, reported on exit
    extracted: Extracted | None = None  # set on exit, once the output is applied

    @property
    def prompt(self) -> str:
        """The worldview rendered for the model."""
        return self.worldview.prompt

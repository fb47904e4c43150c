"""Contradictions with a lifecycle: the op that settles one, the change the
materializer passes on to the projector, and the read that lists them. Unions and
decoders: :mod:`worldline.protocols.messages`; the lifecycle itself:
docs/belief-math.md, "Contradictions".
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

from worldline.protocols.base import Ident, Message, Token
from worldline.protocols.beliefs import Contradiction

__all__ = [
    "CONTRADICTION_ID",
    "ContradictionId",
    "ContradictionResolved",
    "ContradictionsReply",
    "ListContradictions",
    "ResolveContradiction",
]

CONTRADICTION_ID = r"^c-[0-9a-f]{16}\Z"
ContradictionId = Annotated[str, msgspec.Meta(pattern=CONTRADICTION_ID)]
"""``c-`` and 16 hex digits (``worldline.actors.belief_model.contradictions``)."""

Reason = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]


class ResolveContradiction(
    Message, tag="op.resolve_contradiction.v1", kw_only=True, frozen=True
):
    """Settle an open contradiction: it stops widening its ends' uncertainty.
    ``winner`` names the end judged right (None: settled without a side)."""

    op_id: Ident
    author: Token
    at: datetime
    contradiction_id: ContradictionId
    reason: Reason
    winner: Ident | None = None


class ContradictionResolved(
    Message, tag="state.contradiction_resolved.v1", kw_only=True, frozen=True
):
    """The materializer accepted a ``ResolveContradiction`` at OPS sequence ``seq``
    (the projector applies it to the contradiction it names, if that was opened
    before it in the log)."""

    contradiction_id: ContradictionId
    reason: str
    winner: str = ""
    author: str
    at: datetime
    seq: int


class ListContradictions(
    Message, tag="rpc.contradictions.v1", kw_only=True, frozen=True
):
    """Ask for the world's contradictions with their lifecycle, by id."""

    status: Literal["open", "resolved", "dissolved", "all"] = "open"
    # Valid time: only those opened by then (their status never depends on it).
    at: datetime | None = None
    # Recorded time: what the world had been told by then (status as of then).
    as_of: datetime | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000


class ContradictionsReply(
    Message, tag="rpc.contradictions_reply.v1", kw_only=True, frozen=True
):
    """The contradictions that match, by id; ``total`` counts them before ``limit``."""

    contradictions: tuple[Contradiction, ...] = ()
    total: int = 0

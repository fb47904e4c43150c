"""What every worldline message builds on: the base :class:`Message`, the
:class:`Belief` several channels carry, and the constrained field types (ids, tokens,
confidences, texts).

The wire contract as a whole (one tagged union and one decoder per inbox) is
:mod:`worldline.protocols.messages`, which re-exports everything here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, Literal, get_args

import msgspec

__all__ = [
    "BELIEF_TYPES",
    "LABEL_PATTERN",
    "ArtifactText",
    "Belief",
    "BeliefText",
    "BeliefType",
    "Confidence",
    "Cursor",
    "Ident",
    "Label",
    "Message",
    "Token",
]


Confidence = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
"""A probability: where the balance of evidence sits, 0 to 1."""

Ident = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^\S+\Z")]
"""An opaque id: 1-128 characters, no whitespace."""

Token = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}\Z")]
Cursor = Annotated[str, msgspec.Meta(max_length=1024)]  # a page's opaque position
"""A name usable as one subject token (world, agent, actor)."""

LABEL_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,63}\Z"
Label = Annotated[str, msgspec.Meta(pattern=LABEL_PATTERN)]
"""A belief's hand-set label (``load-bearing``, ``limiting-belief``): 1-64 letters,
digits and ``_.:/-``, starting with a letter or digit."""

BeliefText = Annotated[str, msgspec.Meta(min_length=1, max_length=64 * 1024)]
ArtifactText = Annotated[str, msgspec.Meta(max_length=1024 * 1024)]

BeliefType = Literal["claim", "assumption", "risk", "evidence", "gap", "goal"]
BELIEF_TYPES: Final[tuple[str, ...]] = get_args(BeliefType)


class Message(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="kind"
):
    """Base of every wire message: frozen, keyword-only, tagged by ``kind``."""


class Belief(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One belief as the world holds it: what, how sure, on how much evidence."""

    id: Ident
    text: BeliefText
    type: BeliefType
    confidence: Confidence | None = None  # None for goals and gaps: no probability
    # How much evidence stands behind it: kind-weighted, decayed, trusted (one fresh
    # measurement counts 4.0, see docs/belief-math.md).
    evidence_weight: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0
    uncertainty: Annotated[float, msgspec.Meta(ge=0.0)] | None = None  # posterior sd
    label: str = ""
    flags: tuple[str, ...] = ()  # derived: stale, stable, contradicted, uncertain
    author: Token
    created_at: datetime
    updated_at: datetime
    version: int = 0  # OPS sequence of the op behind the last change
    origin: str = ""  # id of the op that created the belief (provenance)
    prior: Confidence | None = None  # the stated confidence, if any (a weak prior)
    fragility: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0  # leave-one-source-out
    evidence_count: int = 0
    status: Literal["active", "retracted", "resolved"] = "active"
    closed_reason: str = ""
    valid_from: datetime | None = None  # when it started to hold (its creation)
    valid_until: datetime | None = None  # when it stopped (retracted, superseded)
    effective_confidence: Confidence | None = None  # after depends_on (at read time)
    slot: str = ""  # the question it is a rival answer to (AddBelief.slot), if any
    # Resolved true or false (CloseBelief.outcome), and the confidence it had just
    # before: the world's calibration record (docs/belief-math.md, "Calibration").
    outcome: bool | None = None
    closed_confidence: Confidence | None = None
    # OPS sequence of the op that created it (0: created before the field existed);
    # ``as_of`` reads date its creation by it (docs/belief-math.md, "Two time axes").
    created_seq: int = 0

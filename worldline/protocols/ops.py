"""What agents write: observations (OBS stream -> extractor) and ops (OPS stream, the
record -> fusion and the materializer). Unions and decoders:
:mod:`worldline.protocols.messages`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

from worldline.protocols.base import (
    ArtifactText,
    BeliefText,
    BeliefType,
    Confidence,
    Ident,
    Label,
    Message,
    Token,
)
from worldline.protocols.beliefs import BeliefEdge, Evidence
from worldline.protocols.world import Edge, EntityRef, FieldName, Value, WorldDecl

SlotName = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
"""A question that rival answers share, e.g. ``author-of:isbn-0131103628``."""

__all__ = [
    "AckInbox",
    "AddBelief",
    "AddEdge",
    "AddEvidence",
    "AssessSources",
    "CloseBelief",
    "DeclareWorld",
    "LinkBeliefs",
    "Observe",
    "PutWork",
    "RemoveEdge",
    "SetField",
    "SetTrust",
    "Statement",
    "UpsertEntity",
]


class Observe(Message, tag="obs.artifact.v1", kw_only=True, frozen=True):
    """An artifact (text) handed to the extractor to turn into beliefs."""

    obs_id: Ident  # idempotency id (with the author, the seed of its op ids)
    author: Token
    at: datetime
    source: str = ""  # where the artifact came from (file name, URL, tool)
    text: ArtifactText
    role: Literal["artifact", "output", "tool"] = "artifact"  # what produced it
    media_type: Literal["text", "markdown", "json"] = "text"
    # What came just before the artifact (the previous turn of a conversation,
    # the paragraph above): read by retrieval as the statements' context, never
    # as statements of its own (docs/worldview.md, "The observation's context").
    context: Annotated[str, msgspec.Meta(max_length=4096)] = ""
    # When the artifact says it happened (a conversation session's date, a
    # report's): its statements' evidence is observed then, not at ``at`` (never
    # later than ``at``); None: at ``at`` (docs/worldview.md, "Answer types and
    # the time a statement was made").
    observed_at: datetime | None = None


class AddBelief(Message, tag="op.add_belief.v1", kw_only=True, frozen=True):
    """Seed a belief; a given confidence is a weak prior that evidence moves."""

    op_id: Ident  # idempotency id, also the Nats-Msg-Id
    author: Token
    at: datetime
    belief_id: Ident
    text: BeliefText
    type: BeliefType = "claim"
    confidence: Confidence | None = None  # None: no stated prior (0.5 for claims)
    source: str = ""  # for extracted beliefs: the observation they came from
    # The question this belief answers, when it is one of several rival answers:
    # beliefs with the same slot are exclusive (at most one is true), so evidence
    # for one is evidence against the others (docs/belief-math.md, "Rival answers").
    slot: SlotName | None = None
    # A label set by hand (the belief's ``label``); the projector's derived ones
    # (``load-bearing``, ``risky-assumption``) apply only to beliefs without one.
    label: Label | None = None


class AddEvidence(Message, tag="op.add_evidence.v1", kw_only=True, frozen=True):
    """Attach one piece of evidence to an existing belief."""

    op_id: Ident
    author: Token
    at: datetime
    evidence: Evidence


class Statement(Message, tag="op.statement.v1", kw_only=True, frozen=True):
    """What the extractor read in an artifact: evidence for the belief with this id,
    creating the belief first if the world does not hold it yet (so a restatement
    becomes evidence, never a duplicate)."""

    op_id: Ident
    author: Token
    at: datetime
    belief_id: Ident
    text: BeliefText
    type: BeliefType = "claim"
    negated: bool = False  # the text itself is negated ("X is not Y")
    evidence: Evidence  # its direction is relative to the text's positive form


class AssessSources(Message, tag="op.assess_sources.v1", kw_only=True, frozen=True):
    """Learn each source's reliability from how its answers agree with the others'
    (the world's rival-answer slots), and weigh its evidence by it from now on."""

    op_id: Ident
    author: Token
    at: datetime


class SetTrust(Message, tag="op.set_trust.v1", kw_only=True, frozen=True):
    """Scale one source's (or ``agent:<name>``'s) contribution; ``lock`` stops anyone
    but its author from changing it again."""

    op_id: Ident
    author: Token
    at: datetime
    source: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    trust: Annotated[float, msgspec.Meta(ge=0.0, le=10.0)]
    lock: bool = False


class LinkBeliefs(Message, tag="op.link_beliefs.v1", kw_only=True, frozen=True):
    """Add, re-weigh or (``edge.removed``) remove a typed edge between two beliefs."""

    op_id: Ident
    author: Token
    at: datetime
    edge: BeliefEdge


class CloseBelief(Message, tag="op.close_belief.v1", kw_only=True, frozen=True):
    """Retract a belief, resolve a gap, or resolve a claim true or false (``outcome``):
    tombstoned, still readable and traceable."""

    op_id: Ident
    author: Token
    at: datetime
    belief_id: Ident
    how: Literal["retracted", "resolved"]
    reason: Annotated[str, msgspec.Meta(max_length=4096)] = ""
    # With ``resolved``: whether a claim (assumption, risk, evidence) turned out true
    # or false; None for a gap, which is answered, not true or false.
    outcome: bool | None = None


class DeclareWorld(Message, tag="op.declare_world.v1", kw_only=True, frozen=True):
    """Declare (or, by an admin, re-declare) the world from its TOML declaration."""

    op_id: Ident
    author: Token
    at: datetime
    declaration: WorldDecl


class UpsertEntity(Message, tag="op.upsert_entity.v1", kw_only=True, frozen=True):
    """Create an entity, or set several of its fields; each field needs authority."""

    op_id: Ident
    author: Token
    at: datetime
    entity: EntityRef
    fields: dict[FieldName, Value] = msgspec.field(default_factory=dict)


class SetField(Message, tag="op.set_field.v1", kw_only=True, frozen=True):
    """Write one field; with ``expect_version`` it applies only over that version."""

    op_id: Ident
    author: Token
    at: datetime
    entity: EntityRef
    field: FieldName
    value: Value
    expect_version: int | None = None  # 0: the field must not exist yet


class AddEdge(Message, tag="op.add_edge.v1", kw_only=True, frozen=True):
    """Add (or retype) a typed edge between two existing entities."""

    op_id: Ident
    author: Token
    at: datetime
    edge: Edge


class RemoveEdge(Message, tag="op.remove_edge.v1", kw_only=True, frozen=True):
    """Remove an edge by id."""

    op_id: Ident
    author: Token
    at: datetime
    edge_id: Token


class PutWork(Message, tag="op.put_work.v1", kw_only=True, frozen=True):
    """Create or update a work request (a typed demand, never a boolean flag)."""

    op_id: Ident
    author: Token
    at: datetime
    work_id: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,128}\Z")]
    work_kind: FieldName  # e.g. research_request (``kind`` is the message tag)
    assigned_to: Token
    goal: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
    priority: Annotated[int, msgspec.Meta(ge=0, le=9)] = 3
    due_at: datetime | None = None
    status: Literal["open", "in_progress", "done", "cancelled"] = "open"
    requested_by: Token
    expect_version: int | None = None


class AckInbox(Message, tag="op.ack_inbox.v1", kw_only=True, frozen=True):
    """The author has handled these inbox messages (its own inbox only)."""

    op_id: Ident
    author: Token
    at: datetime
    message_ids: list[Ident]

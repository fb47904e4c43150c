"""Per-agent inboxes: INBOX stream -> each agent's durable. What the materializer tells
one agent. Union and decoder: :mod:`worldline.protocols.messages`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from worldline.protocols.base import Ident, Message
from worldline.protocols.world import EntityRef, FieldName, Value

__all__ = ["Notification", "RejectCode", "Rejection", "WorkAssigned"]


RejectCode = Literal[
    "unauthorized", "version_conflict", "invalid", "unknown_entity", "too_much_work"
]


class Rejection(Message, tag="inbox.rejection.v1", kw_only=True, frozen=True):
    """Your op was not applied, and why. It is also kept in the conflict log."""

    id: Ident
    op_id: Ident
    code: RejectCode
    reason: str
    current_version: int | None = None  # for version_conflict
    current_value: Value = None  # for version_conflict
    at: datetime


class Notification(Message, tag="inbox.notification.v1", kw_only=True, frozen=True):
    """Something you follow changed (a rule or a subscription selected you)."""

    id: Ident
    entity: EntityRef
    field: FieldName
    value: Value
    version: int
    rule: str  # the rule or subscription that selected you
    cause: Ident  # the op that made the change
    depth: int = 0
    at: datetime


class WorkAssigned(Message, tag="inbox.work_assigned.v1", kw_only=True, frozen=True):
    """A work request was assigned to you: what, why, by when, asked by whom."""

    id: Ident
    work: EntityRef
    work_kind: str
    goal: str
    priority: int = 3
    due_at: datetime | None = None
    requested_by: str
    rule: str = ""  # the rule that created it, if any
    cause: Ident
    at: datetime

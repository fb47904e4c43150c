"""The change feed: STATE stream -> projector replicas. What the materializer applied,
one message per change. Union and decoder: :mod:`worldline.protocols.messages`.
"""

from __future__ import annotations

import msgspec

from worldline.protocols.base import Belief, Message, Token
from worldline.protocols.beliefs import BeliefEdge, Evidence
from worldline.protocols.world import Edge, Entity, WorldDecl

__all__ = [
    "BeliefChanged",
    "BeliefEdgeChanged",
    "EdgeChanged",
    "EntityChanged",
    "InboxChanged",
    "OpApplied",
    "WorldDeclared",
]


class BeliefChanged(Message, tag="state.belief.v1", kw_only=True, frozen=True):
    """The materializer applied a change to a belief."""

    belief: Belief
    evidence: list[Evidence] = msgspec.field(default_factory=list)
    trust: dict[str, float] = msgspec.field(default_factory=dict)


class BeliefEdgeChanged(Message, tag="state.belief_edge.v1", kw_only=True, frozen=True):
    """A belief edge was added, re-weighed or removed, or its posterior moved; with
    evidence of its own, the edge's evidence and the trust that weighed it."""

    edge: BeliefEdge
    evidence: list[Evidence] = msgspec.field(default_factory=list)
    trust: dict[str, float] = msgspec.field(default_factory=dict)


class EntityChanged(Message, tag="state.entity.v1", kw_only=True, frozen=True):
    """The materializer applied a change to an entity (fields carry versions)."""

    entity: Entity


class EdgeChanged(Message, tag="state.edge.v1", kw_only=True, frozen=True):
    """An edge was added, retyped or removed."""

    edge: Edge
    removed: bool = False


class WorldDeclared(Message, tag="state.declared.v1", kw_only=True, frozen=True):
    """The world's declaration changed."""

    declaration: WorldDecl
    version: int


class OpApplied(Message, tag="state.op_applied.v1", kw_only=True, frozen=True):
    """Every change of the op at OPS sequence ``seq`` precedes this on the feed: a
    replica that has seen it holds the whole op (read fences wait for it)."""

    seq: int


class InboxChanged(Message, tag="state.inbox.v1", kw_only=True, frozen=True):
    """An agent's inbox summary: how many messages wait, and the newest few."""

    agent: Token
    pending: int
    recent: list[str] = msgspec.field(default_factory=list)  # one line each
    seq: int = 0  # OPS sequence of the op that changed it

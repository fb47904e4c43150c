"""Who may write what in a crew world: the declaration's grants and admins
(:func:`may_write`), with two kinds of ownership on top: agents own the work items
they requested or are assigned (:func:`work_owners`), and the edges that start at
themselves. A refusal is a ``Reject("unauthorized", ...)`` that says what to ask for.

Who may *declare* a world is the declaration's own gate
(:mod:`worldline.actors.materializer.declaration`); that an op's author is the subject's
last token is checked first of all, in
:func:`worldline.actors.materializer.crew.handle`.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from worldline.actors.materializer.reject import Reject
from worldline.protocols.world import WORK, agent_ref

if TYPE_CHECKING:
    from worldline.protocols.world import Edge, Entity, WorldDecl

__all__ = ["authorize", "authorize_edge", "may_write", "work_owners"]


def may_write(decl: WorldDecl, agent: str, etype: str, field: str) -> bool:
    """Whether ``agent`` holds a grant for ``etype.field`` (admins hold every grant)."""
    if agent in decl.authority.admins:
        return True
    target = f"{etype}.{field}"
    return any(
        agent in grant.agents and any(fnmatchcase(target, p) for p in grant.fields)
        for grant in decl.authority.grants
    )


def authorize(decl: WorldDecl, agent: str, entity: Entity, field: str) -> None:
    if entity.type == WORK and agent in work_owners(entity):
        return  # agents always own their own work items
    if not may_write(decl, agent, entity.type, field):
        raise Reject(
            "unauthorized",
            f"{agent} may not write {entity.type}.{field} (entity {entity.id}); "
            "ask an admin for a grant in [authority]",
        )


def work_owners(entity: Entity) -> set[str]:
    owners = set()
    for name in ("assigned_to", "requested_by"):
        state_ = entity.fields.get(name)
        if state_ is not None and isinstance(state_.value, str):
            owners.add(state_.value)
    return owners


def authorize_edge(decl: WorldDecl, agent: str, edge: Edge) -> None:
    if edge.source == agent_ref(agent) or may_write(decl, agent, "edge", edge.type):
        return
    raise Reject(
        "unauthorized",
        f"{agent} may not write edge {edge.id} of type {edge.type}; agents write "
        "edges from themselves, or hold a grant on edge.<type>",
    )

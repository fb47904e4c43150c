"""The worldview's slices that come from the world's declaration: environment,
policy and affordances (the declared actions filtered through policy), each leaf
ranked by 1 + its query relevance."""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldline.protocols.worldview import Leaf

if TYPE_CHECKING:
    from worldline.actors.projector.relevance import Relevance
    from worldline.actors.projector.worldview import Scene

__all__ = ["affordances", "environment", "policy"]


def environment(scene: Scene, relevance: Relevance) -> list[Leaf]:
    leaves = []
    decl = scene.decl
    if decl:
        info = decl.world
        leaves.append(
            Leaf(
                id=info.id,
                kind="world",
                score=2.0,
                trace=(info.id,),
                text=f"{info.id}: {info.kind} {info.description}".strip(),
            )
        )
        if decl.environment.surfaces:
            leaves.append(
                Leaf(
                    id="surfaces",
                    kind="surfaces",
                    score=1.0,
                    trace=("surfaces",),
                    text="observed through: " + ", ".join(decl.environment.surfaces),
                )
            )
        if decl.environment.source_ranking:
            leaves.append(
                Leaf(
                    id="source-ranking",
                    kind="source-ranking",
                    score=1.0,
                    trace=("source-ranking",),
                    text="source ranking: "
                    + " > ".join(decl.environment.source_ranking),
                )
            )
    if scene.view:
        for e in scene.view.related:
            fields = ", ".join(f"{k}={v.value}" for k, v in sorted(e.fields.items()))
            text = f"{e.id} ({fields})"
            leaves.append(
                Leaf(
                    id=e.id,
                    kind="entity",
                    text=text,
                    score=1.0 + relevance(text),
                    trace=(e.id,),
                )
            )
    return leaves


def policy(scene: Scene, relevance: Relevance) -> list[Leaf]:
    if not scene.decl:
        return []
    p = scene.decl.policy
    leaves = []
    for kind, items in (
        ("invariant", p.invariants),
        ("convention", p.conventions),
        ("anti-pattern", p.anti_patterns),
    ):
        for i, text in enumerate(items):
            leaf_id = f"{kind}-{i}"
            leaves.append(
                Leaf(
                    id=leaf_id,
                    kind=kind,
                    text=text,
                    score=1.0 + relevance(text),
                    trace=(leaf_id,),
                )
            )
    if p.source_hierarchy:
        text = "source hierarchy: " + " > ".join(p.source_hierarchy)
        leaves.append(
            Leaf(
                id="source-hierarchy",
                kind="source-hierarchy",
                text=text,
                score=1.0 + relevance(text),
                trace=("source-hierarchy",),
            )
        )
    return leaves


def affordances(scene: Scene, relevance: Relevance) -> list[Leaf]:
    """The world's actions filtered through policy: ``blocked`` when the agent may
    write nothing and the action changes something; ``flagged`` when it needs
    approval or a constraint bounds it (the trace names the constraints);
    ``allowed`` otherwise."""
    if not scene.decl:
        return []
    may_write = bool(scene.view.may_write) if scene.view else False
    leaves = []
    for action in scene.decl.actions:
        trace = tuple(action.constraints)
        if action.safety != "info" and not may_write:
            status = "blocked"
        elif action.safety == "needs-approval" or trace:
            status = "flagged"
        else:
            status = "allowed"
        leaves.append(
            Leaf(
                id=action.id,
                kind=action.safety,
                text=action.text,
                status=status,
                score=1.0 + relevance(action.text),
                trace=trace or (action.id,),
            )
        )
    return leaves

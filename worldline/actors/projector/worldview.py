"""The worldview projection: a pure function of (scene, agent, query, clock).

It selects, orders and bounds; it computes no new math. Every number it ranks by comes
from :mod:`worldline.actors.belief_model.posterior` (influence, uncertainty, flags),
from :mod:`worldline.actors.belief_model.information` (a move's expected information
gain toward the goals it serves) or from the query channels and priors of
:mod:`.relevance` (BM25, the embedder); the products below only combine them into an
order. docs/worldview.md explains the
ranking for a user.

Bounds (no tuned absolute thresholds): per slice, items are ordered by decision value
and kept while their value is at least :data:`CUT` times the leader's, at least one and
at most :data:`CAP`; the rendered prompt stays under :data:`MAX_TOKENS` by the estimate
``ceil(len(prompt) / 4)`` (about four characters per token for English text).

Longer than 500 lines because it is one projection: every slice is valued, cut and
rendered from the same per-belief values, which issue 24 computes once per call
instead of once per slice (splitting it would pass them between modules).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.belief_model import information, posterior
from worldline.actors.projector import declared
from worldline.actors.projector.prompt import (
    EPOCH,
    FLOOR,
    MAX_TOKENS,
    estimate_tokens,
    fit,
    render,
)
from worldline.actors.projector.relevance import (
    LIFT,
    Relevance,
    Scale,
    fused,
    prior,
)
from worldline.protocols.messages import AgentView, Belief
from worldline.protocols.worldview import Leaf, Worldview

if TYPE_CHECKING:
    from datetime import datetime

    from worldline.actors.projector.answer_type import Marks
    from worldline.actors.projector.lexical import Counts
    from worldline.actors.projector.relevance import Features
    from worldline.protocols.beliefs import BeliefEdge, Contradiction
    from worldline.protocols.world import WorldDecl

__all__ = [
    "CAP",
    "CUT",
    "FLOOR",
    "MAX_TOKENS",
    "Scene",
    "bound",
    "estimate_tokens",
    "gains",
    "kept_beliefs",
    "project",
    "ranked_moves",
    "render",
    "scaled",
    "standing",
]

Weight = Callable[[Belief], float]
# A slice's item before its leaf is made: (decision value, leaf id, its maker). Only
# the items a slice keeps become leaves (see :func:`_bounded`).
Item = tuple[float, str, Callable[[], Leaf]]

CUT: Final = 0.5  # keep items worth at least half the leader
BASE: Final = 0.1  # the limiting factor's floor: an unrelated belief ranks by weight
CAP: Final = 7  # and never more than this many per slice (and at least FLOOR)


@dataclass(frozen=True)
class Scene:
    """What the projector holds for one world, read at one clock."""

    world: str
    decl: WorldDecl | None
    beliefs: Sequence[Belief]  # active, annotated at the clock
    edges: Sequence[BeliefEdge] = ()
    contradictions: Sequence[Contradiction] = ()
    view: AgentView | None = None  # the agent's crew view, if the world is declared
    influence: dict[str, float] = field(default_factory=dict)
    # Beliefs one edge away from a goal: graph proximity to what the agent is after.
    near: frozenset[str] = frozenset()
    recent: tuple[str, ...] = ()  # the most recently changed beliefs, newest first
    # Precomputed relevance features by text (terms, embedding), from the index.
    features: Features = field(default_factory=dict)
    # The world's lexical counters for the query's and the focus's terms (None:
    # every term counts as rare), and the pool's scale of each query channel, fixed
    # by :func:`scaled` (None: the scene's own beliefs are the pool).
    counts: Counts | None = None
    scale: Scale | None = None
    # What each candidate's card says for answer types, by text: the kinds of
    # answer it offers and the day it was first said (.answer_type.Marks).
    marks: dict[str, Marks] = field(default_factory=dict)
    # The query relevance :func:`scaled` calibrated, by (query, focus): a projection
    # of the scene (or of the scene with fewer beliefs) for that query reuses it and
    # what it read of each text, rather than scoring every text again.
    judged: tuple[str, str, Relevance] | None = field(
        default=None, compare=False, repr=False
    )


def bound(leaves: Sequence[Leaf]) -> list[Leaf]:
    """Order by decision value (ties by id), keep the prefix within CUT of the
    leader, at least FLOOR and at most CAP."""
    ordered = sorted(leaves, key=lambda leaf: (-leaf.score, leaf.id))
    if not ordered:
        return []
    leader = ordered[0].score
    kept = (
        [leaf for leaf in ordered if leaf.score >= CUT * leader] if leader > 0 else []
    )
    return (kept or ordered[:FLOOR])[:CAP]


def _bounded(items: Iterable[Item]) -> list[Leaf]:
    """:func:`bound` of the items' leaves, making only the leaves it keeps: an item's
    value and id are its leaf's score and id, and what ``bound`` keeps is a prefix
    of at most CAP of them in its order (``heapq.nsmallest`` is that order's
    prefix)."""
    ordered = heapq.nsmallest(CAP, items, key=_order)
    if not ordered:
        return []
    leader = ordered[0][0]
    kept = [item for item in ordered if item[0] >= CUT * leader] if leader > 0 else []
    return [make() for _, _, make in (kept or ordered[:FLOOR])]


def _order(item: Item) -> tuple[float, str]:
    return -item[0], item[1]


def _focus(scene: Scene) -> tuple[str, str]:
    """(the goals' text, the goals' and the agent's work's text)."""
    decl = scene.decl
    goals_text = " ".join(g.text for g in decl.intent.goals) if decl else ""
    work_text = " ".join(
        str(f.value)
        for w in (scene.view.work if scene.view else [])
        for f in w.fields.values()
    )
    return goals_text, f"{goals_text} {work_text}"


def _pool(scene: Scene) -> list[str]:
    return [b.text for b in scene.beliefs if b.type != "goal"]


def scaled(scene: Scene, query: str, at: datetime | None = None) -> Scene:
    """``scene`` with its query channels' scale fixed from its beliefs: projected
    again with fewer beliefs (a decision view's second pass), it keeps the scale,
    and the calibrated relevance (what it read of each text, on that scale)."""
    focus = _focus(scene)[1]
    relevance = Relevance(query, focus, scene.features, scene.counts, scene.marks, at)
    scale = relevance.calibrate(_pool(scene))
    return dataclasses.replace(scene, scale=scale, judged=(query, focus, relevance))


def _relevance(scene: Scene, query: str, focus: str, at: datetime) -> Relevance:
    if scene.judged is not None:
        asked, after, judged = scene.judged
        if (asked, after) == (query, focus) and judged.scale == scene.scale:
            return judged
    relevance = Relevance(query, focus, scene.features, scene.counts, scene.marks, at)
    if scene.scale is None:
        relevance.calibrate(_pool(scene))
    else:
        relevance.scale = scene.scale
    return relevance


def _valuer(scene: Scene, weight: Weight, relevance: Relevance) -> Weight:
    """A belief's value for the move: its query relevance lifted by its prior
    (:func:`worldline.actors.projector.relevance.fused`)."""
    heaviest = max((weight(b) for b in scene.beliefs if b.type != "goal"), default=0)
    values: dict[int, float] = {}  # by the belief's identity: current and moves ask

    def value(b: Belief) -> float:
        found = values.get(id(b))
        if found is None:
            structure = prior(
                weight(b) / heaviest if heaviest > 0 else 0.0,
                b.id in scene.near,
                relevance.near_focus(b.text),
                b.id in scene.recent,
            )
            found = values[id(b)] = fused(relevance(b.text), structure)
        return found

    return value


def project(scene: Scene, agent: str, query: str, at: datetime) -> Worldview:
    """The worldview for ``agent`` about to make the move ``query`` at clock ``at``."""
    goals_text, focus = _focus(scene)
    relevance = _relevance(scene, query, focus, at)
    n = max(len(scene.beliefs), 1)
    influence = scene.influence or posterior.influence(
        [b.id for b in scene.beliefs], scene.edges
    )

    def weight(b: Belief) -> float:  # influence relative to the average belief
        return influence.get(b.id, 1.0 / n) * n

    value = _valuer(scene, weight, relevance)
    current = _bounded(_current(scene, value, relevance))
    moves = _bounded(_moves(scene, value, query=relevance.informed))
    goals = _relevance(scene, goals_text, goals_text, at)
    limiting = _limiting(scene, weight, goals)
    view = Worldview(
        world=scene.world,
        agent=agent,
        query=query,
        at=at,
        environment=bound(declared.environment(scene, relevance)),
        current=current,
        intent=bound(_intent(scene, relevance, limiting)),
        policy=bound(declared.policy(scene, relevance)),
        affordances=bound(declared.affordances(scene, relevance)),
        moves=moves,
        limiting=limiting,
        clarity=_clarity(current, scene),
    )
    return fit(view)


def _belief_leaf(b: Belief, score: float, trace: tuple[str, ...]) -> Leaf:
    return Leaf(
        id=b.id,
        kind=b.type,
        text=b.text,
        score=score,
        confidence=b.confidence,
        flags=b.flags,
        trace=trace,
    )


def _current(scene: Scene, value: Weight, relevance: Relevance) -> list[Item]:
    depends: dict[str, list[str]] = {}
    for e in scene.edges:
        if e.type == "depends_on":
            depends.setdefault(e.source, []).append(e.target)
    items: list[Item] = []
    values: dict[str, float] = {}
    for b in scene.beliefs:
        if b.type == "goal":
            continue
        values[b.id] = value(b)
        mark = scene.marks.get(b.text) if relevance.about_time else None
        said = mark.said if mark is not None else ""
        make = _claim_leaf(scene, b, values[b.id], depends, said)
        items.append((values[b.id], b.id, make))
    for c in scene.contradictions:
        text = " vs ".join(c.beliefs)
        # As relevant as the most relevant belief it holds, times its strength.
        at_stake = max((values.get(i, 0.0) for i in c.beliefs), default=0.0)
        score = c.strength * max(at_stake, relevance(text))
        leaf_id = "contradiction:" + "+".join(c.beliefs)
        items.append((score, leaf_id, _contradiction_leaf(c, leaf_id, text, score)))
    return items


def _claim_leaf(
    scene: Scene, b: Belief, score: float, depends: dict[str, list[str]], said: str
) -> Callable[[], Leaf]:
    def make() -> Leaf:
        leaf = _belief_leaf(b, score, (b.id, *sorted(depends.get(b.id, ()))))
        if b.id in scene.recent:  # among the latest changes: say so, rank as usual
            leaf = msgspec.structs.replace(leaf, flags=(*leaf.flags, "changed"))
        if said:  # a question about time: the day it was said
            leaf = msgspec.structs.replace(leaf, said=said)
        return leaf

    return make


def _contradiction_leaf(
    c: Contradiction, leaf_id: str, text: str, score: float
) -> Callable[[], Leaf]:
    return lambda: Leaf(
        id=leaf_id,
        kind="contradiction",
        text=f"contradiction ({c.kind}): {text}",
        score=score,
        trace=c.trace,
    )


def gains(scene: Scene) -> dict[str, information.Gain]:
    """The expected information gain of checking each belief in view (a gap: of
    answering it) toward the goal beliefs in view
    (:func:`worldline.actors.belief_model.information.gains`)."""
    pairs = {
        b.id: information.pair_of(
            None if b.type == "gap" else b.confidence,
            None if b.type == "gap" else b.uncertainty,
        )
        for b in scene.beliefs
        if b.type == "gap" or (b.type != "goal" and b.uncertainty is not None)
    }
    goals = [b.id for b in scene.beliefs if b.type == "goal"]
    if goals:
        return information.gains(pairs, goals, scene.edges, load=_load(scene, pairs))
    # No goal in view: each belief's own gain, weighted by its load, as
    # information.gains gives it (a goal's share is 0), its own gain remembered.
    loads = {bid: max(0.0, value) for bid, value in _load(scene, pairs).items()}
    heaviest = max(loads.values(), default=0.0)
    return {
        bid: information.Gain(
            bid,
            _own_gain(*pairs[bid]),
            load=loads[bid] / heaviest if heaviest > 0 else 0.0,
        )
        for bid in sorted(pairs)
    }


@functools.lru_cache(maxsize=65536)
def _own_gain(alpha: float, beta: float) -> float:
    """:func:`worldline.actors.belief_model.information.own_gain` of one more
    measurement, remembered: the same beliefs are candidates of request after
    request, and their readings change seldom."""
    return information.own_gain(alpha, beta, information.PROBE)


def _load(scene: Scene, ids: Iterable[str]) -> dict[str, float]:
    """How much rests on each belief: the scene's influence (the index's local
    influence in a decision scene), else its local influence from the scene's
    edges (:func:`worldline.actors.belief_model.posterior.local_influence`)."""
    if scene.influence:
        return {i: scene.influence.get(i, 0.0) for i in ids}
    touching: dict[str, list[BeliefEdge]] = {}
    for e in scene.edges:
        for end in {e.source, e.target}:
            touching.setdefault(end, []).append(e)
    return {i: posterior.local_influence(i, touching.get(i, ())) for i in ids}


def _moves(scene: Scene, worth: Weight, *, query: bool) -> list[Item]:
    """The moves worth making, each valued by its expected information gain toward
    the goals it serves (:func:`gains`; a move that serves no goal by a share of
    its own). With a query, a belief's value for the move comes first and its gain
    (relative to the largest in view) lifts it by at most LIFT, as the priors do:
    the move the agent is making is not crowded out. When the query found nothing
    (and for ``read``), the gain alone. A move that serves goals names them and
    its gain in its text, and their ids after its belief's in its trace."""
    found = gains(scene)
    totals = {bid: g.total for bid, g in found.items()}
    best = max(totals.values(), default=0.0)
    goal_text = {b.id: b.text for b in scene.beliefs if b.type == "goal"}
    items: list[Item] = []
    for b in scene.beliefs:
        gain = found.get(b.id)
        if gain is None:
            continue
        if query:
            value = worth(b) * (1 + LIFT * (totals[b.id] / best if best > 0 else 0.0))
        else:
            value = totals[b.id]
        items.append((value, f"move:{b.id}", _move_leaf(b, gain, value, goal_text)))
    return items


def _move_leaf(
    b: Belief, gain: information.Gain, value: float, goal_text: dict[str, str]
) -> Callable[[], Leaf]:
    def make() -> Leaf:
        if b.type == "gap":
            text = f"Answer the open question: {b.text}"
        else:
            verb = "Adjudicate" if "contradicted" in b.flags else "Gather evidence on"
            text = f"{verb}: {b.text}"
        served = gain.served()
        if served:
            text += f" ({_toward(served, goal_text)})"
        return Leaf(
            id=f"move:{b.id}",
            kind="move",
            text=text,
            score=value,
            confidence=b.confidence,
            flags=b.flags,
            trace=(b.id, *(goal for goal, _ in served)),
        )

    return make


def _toward(served: list[tuple[str, float]], goal_text: dict[str, str]) -> str:
    """The goals a move serves, most served first (two named, the rest counted),
    and the expected gain toward them."""
    named = [f'"{_short(goal_text.get(goal, goal))}"' for goal, _ in served[:2]]
    if len(served) > 2:
        named.append(f"{len(served) - 2} more")
    total = sum(value for _, value in served)
    return f"toward goal {', '.join(named)}: expected gain {total:.2g} bits"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def kept_beliefs(scene: Scene, query: str, focus: str) -> set[str]:
    """The beliefs a projection of ``scene`` would show (in current, moves or as the
    limiting factor): the survivors a decision scene reads again at its clock."""
    view = project(scene, "-", query, EPOCH)
    ids = {b.id for b in scene.beliefs}
    kept = {
        item
        for leaves in (view.current, view.moves, view.intent)
        for leaf in leaves
        for item in leaf.trace
        if item in ids
    }
    if view.limiting is not None:
        kept.add(view.limiting.id)
    return kept


def ranked_moves(scene: Scene) -> list[Leaf]:
    """The world's next moves with no particular query: bounded, by expected
    information gain toward the goals they serve (what ``read()`` reports)."""
    return _bounded(_moves(scene, lambda _: 0.0, query=False))


def _limiting(scene: Scene, weight: Weight, to_goals: Relevance) -> Leaf | None:
    # No goal terms (and no semantic channel): every text is 0 to the goals.
    unrelated = not to_goals.lexicon.idf and not to_goals.semantic
    best: tuple[float, str] | None = None
    found: Belief | None = None
    for b in scene.beliefs:
        if b.type == "goal":
            continue
        doubt = 0.5 if b.uncertainty is None else b.uncertainty
        score = weight(b) * doubt * (BASE + (0.0 if unrelated else to_goals(b.text)))
        if best is None or (score, b.id) > best:
            best, found = (score, b.id), b
    if best is None or found is None:
        return None
    return _belief_leaf(found, best[0], (found.id,))


def _intent(scene: Scene, relevance: Relevance, limiting: Leaf | None) -> list[Leaf]:
    leaves: list[Leaf] = []
    if scene.decl:
        for g in scene.decl.intent.goals:
            detail = "; ".join(g.success)
            text = f"{g.text} (success: {detail})" if detail else g.text
            leaves.append(
                Leaf(
                    id=g.id,
                    kind="goal",
                    text=text,
                    score=1.0 + relevance(text),
                    trace=(g.id,),
                )
            )
        leaves += [
            Leaf(
                id=c.id,
                kind="constraint",
                text=c.text,
                score=1.0 + relevance(c.text),
                trace=(c.id,),
            )
            for c in scene.decl.intent.constraints
        ]
    leaves += [
        _belief_leaf(b, 1.0 + relevance(b.text), (b.id,))
        for b in scene.beliefs
        if b.type == "goal"
    ]
    if limiting is not None:
        leaves.append(
            Leaf(
                id=f"limiting:{limiting.id}",
                kind="limiting-factor",
                text=f"Most in the way: {limiting.text}",
                score=2.0 + relevance(limiting.text),
                trace=limiting.trace,
            )
        )
    return leaves


def _clarity(current: Sequence[Leaf], scene: Scene) -> float:
    """Readiness: how sure the claims in view are, less a share for each active
    contradiction and each open gap in view (both in 0-1)."""
    claims = [leaf for leaf in current if leaf.confidence is not None]
    if not claims:
        return 0.0
    sureness = sum(
        abs(leaf.confidence - 0.5) * 2 for leaf in claims if leaf.confidence is not None
    )
    sureness /= len(claims)
    conflicts = sum(leaf.kind == "contradiction" for leaf in current) / len(current)
    gaps = sum(leaf.kind == "gap" for leaf in current) / len(current)
    return round(max(0.0, sureness * (1 - conflicts) * (1 - gaps)), 6)


def standing(
    scene: Scene, agent: str, focus: str, *, move: str | None = None
) -> Worldview:
    """The agent's standing worldview: its goals and work as the query (shown as
    ``move`` when given), the beliefs as last changed, and as its clock the newest
    change among the beliefs it shows (:data:`EPOCH` when it shows none: the prompt
    then says so instead of a date). A change to a belief it does not show leaves
    its bytes as they were."""
    view = project(scene, agent, focus, EPOCH)
    shown = {
        item
        for name in (
            "environment",
            "current",
            "intent",
            "policy",
            "affordances",
            "moves",
        )
        for leaf in getattr(view, name)
        for item in leaf.trace
    }
    times = [b.updated_at for b in scene.beliefs if b.id in shown]
    at = max(times) if times else EPOCH
    shown_move = focus if move is None else move
    return fit(msgspec.structs.replace(view, at=at, query=shown_move))

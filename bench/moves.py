"""Moves benchmark (issue 18): does ranking moves by expected information gain toward
goals leave an agent's goal beliefs better informed after k checks than the old
ranking (influence x uncertainty) or a random check, in the same run on the same
scenes and the same noise?

    python bench/moves.py [--scenes 200] [--steps 20] [--claims 24] [--goals 2]
                          [--accuracy 0.8] [--seed 1]

Offline: no bus. Each scene is synthetic, with a hidden truth drawn from the very
model the beliefs state, so no policy is favoured by a mismatch:

- ``--claims`` claims; claim i ``depends_on`` 0 to 2 later claims, each picked with
  probability proportional to (the edges already pointing at it + 1), so some claims
  become hubs many rest on; ``--goals`` goal beliefs, each ``depends_on`` 2 claims
  picked uniformly. Edge confidences uniform in [0.5, 1].
- Each claim has a stated confidence c uniform in [0.15, 0.85] and a hidden base truth
  drawn with probability c; each edge binds with probability its confidence. A goal
  (and any claim) holds effectively when every binding edge leads to a claim that
  holds effectively and its own base truth holds (a goal's is true): what
  ``posterior.effective_confidence`` computes under independence.
- Each claim starts with 0 to 3 citations from distinct sources, each reporting its
  base truth with accuracy 0.7.
- A step: the policy picks one claim; one measurement from a fresh source reports
  its base truth with accuracy ``--accuracy`` (the j-th check of a claim in a scene
  draws the same noise for every policy); fusion's math (``posterior.read``) gives
  the claim's new reading.

Policies, on the same scenes: **gain** (the project's ranking:
``worldview.ranked_moves``, its top move), **old read** and **old before** (the
ranking before this change, transcribed from ``worldview._moves`` at commit 79181bb:
the belief's value times its uncertainty, the value from ``relevance.prior``: in
``read`` with the PageRank influence and no goal proximity, in ``before`` with no query
match with the local influence and goal proximity), and **random** (a uniform claim).

Scores after k checks (mean over scenes; +- the standard error over scenes): the log
loss (bits) and accuracy (at 0.5) of each goal's outlook (its effective confidence
with a stated confidence of 1) against whether it holds, and of each claim a goal
rests on (its confidence against its base truth). The paired line is gain minus the
other policy, per scene, for the goal log loss: negative is better for gain.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from worldline.actors.belief_model import information, posterior
from worldline.actors.projector import relevance
from worldline.actors.projector.worldview import Scene, ranked_moves
from worldline.protocols.beliefs import BeliefEdge, Evidence
from worldline.protocols.messages import Belief

if TYPE_CHECKING:
    from collections.abc import Callable

NOW = datetime(2026, 1, 1, tzinfo=UTC)
START_ACCURACY = 0.7
POLICIES = ("gain", "old read", "old before", "random")
CHECKPOINTS = (0, 1, 3, 5, 10, 20)


@dataclass
class World:
    """One scene: its structure, hidden truth and the agent's evidence so far."""

    claims: list[str]
    goals: list[str]
    edges: list[BeliefEdge]
    stated: dict[str, float]
    truth: dict[str, bool]  # base truth of each claim
    holds: dict[str, bool]  # effective truth of each goal
    premises: set[str]  # claims some goal rests on
    noise: dict[str, list[float]]  # per claim, the draws of its successive checks
    evidence: dict[str, list[Evidence]] = field(default_factory=dict)
    checks: dict[str, int] = field(default_factory=dict)


def build(rng: random.Random, n: int, goals: int) -> World:
    claims = [f"c{i:02d}" for i in range(n)]
    edges: list[BeliefEdge] = []
    indegree = [0] * n
    for i in range(n - 1):
        later = list(range(i + 1, n))
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            j = rng.choices(later, weights=[indegree[k] + 1 for k in later])[0]
            if any(e.source == claims[i] and e.target == claims[j] for e in edges):
                continue
            indegree[j] += 1
            edges.append(_edge(len(edges), claims[i], claims[j], rng))
    goal_ids = [f"goal{g}" for g in range(goals)]
    for goal in goal_ids:
        for j in rng.sample(range(n), 2):
            edges.append(_edge(len(edges), goal, claims[j], rng))
    stated = {c: rng.uniform(0.15, 0.85) for c in claims}
    truth = {c: rng.random() < stated[c] for c in claims}
    binds = {e.id: rng.random() < e.confidence for e in edges}
    holds: dict[str, bool] = {}

    def effective(node: str) -> bool:
        if node not in holds:
            base = truth.get(node, True)
            holds[node] = base and all(
                effective(e.target) for e in edges if e.source == node and binds[e.id]
            )
        return holds[node]

    for node in [*claims, *goal_ids]:
        effective(node)
    rest = information.premise_edges(edges)
    under = set().union(*(information.premises(g, rest) for g in goal_ids))
    world = World(
        claims=claims,
        goals=goal_ids,
        edges=edges,
        stated=stated,
        truth=truth,
        holds={g: holds[g] for g in goal_ids},
        premises=under,
        noise={c: [rng.random() for _ in range(64)] for c in claims},
    )
    for c in claims:
        world.evidence[c] = [
            _report(c, f"cite{k}", "citation", truth[c], rng.random(), START_ACCURACY)
            for k in range(rng.randint(0, 3))
        ]
    return world


def _edge(n: int, source: str, target: str, rng: random.Random) -> BeliefEdge:
    return BeliefEdge(
        id=f"e{n:03d}",
        type="depends_on",
        source=source,
        target=target,
        confidence=round(rng.uniform(0.5, 1.0), 3),
    )


def _report(
    claim: str, source: str, kind: str, true: bool, draw: float, accuracy: float
) -> Evidence:
    right = draw < accuracy
    return Evidence(
        id=f"ev-{claim}-{source}",
        belief_id=claim,
        direction="supports" if right == true else "refutes",
        kind=kind,  # type: ignore[arg-type]
        source=source,
        observed_at=NOW,
        author="bench",
    )


def beliefs(world: World) -> list[Belief]:
    found = []
    for c in world.claims:
        r = posterior.read(world.stated[c], world.evidence[c], {}, NOW)
        found.append(
            Belief(
                id=c,
                text=f"claim {c}",
                type="claim",
                confidence=r.confidence,
                uncertainty=r.uncertainty,
                evidence_weight=r.evidence_weight,
                flags=r.flags,
                author="bench",
                created_at=NOW,
                updated_at=NOW,
            )
        )
    found += [
        Belief(
            id=g,
            text=f"goal {g}",
            type="goal",
            author="bench",
            created_at=NOW,
            updated_at=NOW,
        )
        for g in world.goals
    ]
    return found


def pick_gain(world: World, _: random.Random) -> str:
    scene = Scene(world="bench", decl=None, beliefs=beliefs(world), edges=world.edges)
    return ranked_moves(scene)[0].trace[0]


def _old(world: World, *, near_goal: bool) -> str:
    """The ranking before this change (``worldview._moves`` with ``query=False``):
    ``fused(0, prior) * uncertainty``, ``prior`` from the influence relative to the
    heaviest and, in ``before``'s decision scene, goal proximity; no focus words and
    no recent changes. ``read`` ranked by PageRank influence (``ranked_moves``),
    ``before`` by the index's local influence. Ties by id, as ``bound`` orders
    them."""
    held = beliefs(world)
    n = len(held)
    if near_goal:  # a decision scene: the index's local influence
        weight = {b.id: posterior.local_influence(b.id, world.edges) for b in held}
    else:  # read: PageRank over the world
        influence = posterior.influence([b.id for b in held], world.edges)
        weight = {b.id: influence[b.id] * n for b in held}
    heaviest = max(weight[b.id] for b in held if b.type != "goal")
    goals = set(world.goals)
    near = {
        end
        for e in world.edges
        if {e.source, e.target} & goals
        for end in (e.source, e.target)
        if end not in goals
    }
    best: tuple[float, str] | None = None
    for b in held:
        if b.type == "goal" or b.uncertainty is None:
            continue
        structure = relevance.prior(
            weight[b.id] / heaviest, near_goal and b.id in near, 0.0, False
        )
        score = relevance.fused(0.0, structure) * b.uncertainty
        if best is None or (-score, b.id) < (-best[0], best[1]):
            best = (score, b.id)
    assert best is not None
    return best[1]


def pick_random(world: World, rng: random.Random) -> str:
    return rng.choice(world.claims)


PICKS: dict[str, Callable[[World, random.Random], str]] = {
    "gain": pick_gain,
    "old read": lambda w, _: _old(w, near_goal=False),
    "old before": lambda w, _: _old(w, near_goal=True),
    "random": pick_random,
}


def check(world: World, claim: str, accuracy: float) -> None:
    j = world.checks.get(claim, 0)
    world.checks[claim] = j + 1
    draw = world.noise[claim][j % len(world.noise[claim])]
    world.evidence[claim].append(
        _report(claim, f"probe{j}", "measurement", world.truth[claim], draw, accuracy)
    )


def _loss(p: float, outcome: bool) -> float:
    q = min(max(p if outcome else 1.0 - p, 1e-6), 1.0)
    return -math.log2(q)


def score(world: World) -> dict[str, float]:
    conf = {
        c: posterior.read(world.stated[c], world.evidence[c], {}, NOW).confidence
        for c in world.claims
    }
    base: dict[str, float] = {c: v for c, v in conf.items() if v is not None}
    base.update(dict.fromkeys(world.goals, 1.0))
    outlook = posterior.effective_confidence(base, world.edges)
    goal_loss = [_loss(outlook[g], world.holds[g]) for g in world.goals]
    goal_right = [(outlook[g] > 0.5) == world.holds[g] for g in world.goals]
    premises = sorted(world.premises)
    claim_loss = [_loss(base[c], world.truth[c]) for c in premises]
    claim_right = [(base[c] > 0.5) == world.truth[c] for c in premises]
    return {
        "goal log loss": statistics.fmean(goal_loss),
        "goal accuracy": statistics.fmean(goal_right),
        "premise log loss": statistics.fmean(claim_loss) if premises else 0.0,
        "premise accuracy": statistics.fmean(claim_right) if premises else 1.0,
    }


def run(args: argparse.Namespace) -> dict[str, dict[int, list[dict[str, float]]]]:
    results: dict[str, dict[int, list[dict[str, float]]]] = {
        p: {k: [] for k in CHECKPOINTS if k <= args.steps} for p in POLICIES
    }
    for s in range(args.scenes):
        for policy in POLICIES:
            # The same scene (and its noise) for every policy: rebuilt from its seed.
            world = build(random.Random(args.seed * 100_003 + s), args.claims,
                          args.goals)  # fmt: skip
            chooser = random.Random(args.seed * 7_919 + s)
            for k in range(args.steps + 1):
                if k in results[policy]:
                    results[policy][k].append(score(world))
                if k < args.steps:
                    check(world, PICKS[policy](world, chooser), args.accuracy)
    return results


def _mean_se(values: list[float]) -> str:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0
    return f"{mean:.3f} +- {se:.3f}"


def report(results: dict[str, dict[int, list[dict[str, float]]]]) -> None:
    metrics = ("goal log loss", "goal accuracy", "premise log loss",
               "premise accuracy")  # fmt: skip
    for metric in metrics:
        print(f"\n{metric} after k checks (mean +- s.e. over scenes)")
        ks = list(results["gain"])
        print("| policy | " + " | ".join(f"k={k}" for k in ks) + " |")
        print("| --- |" + " ---: |" * len(ks))
        for policy in POLICIES:
            cells = [_mean_se([r[metric] for r in results[policy][k]]) for k in ks]
            print(f"| {policy} | " + " | ".join(cells) + " |")
    print(
        "\npaired, goal log loss: gain minus the other policy (negative: gain better)"
    )
    ks = list(results["gain"])
    print("| versus | " + " | ".join(f"k={k}" for k in ks) + " |")
    print("| --- |" + " ---: |" * len(ks))
    for other in POLICIES[1:]:
        cells = []
        for k in ks:
            diffs = [
                a["goal log loss"] - b["goal log loss"]
                for a, b in zip(results["gain"][k], results[other][k], strict=True)
            ]
            cells.append(_mean_se(diffs))
        print(f"| {other} | " + " | ".join(cells) + " |")


def cost() -> None:
    """What the gain costs when everything rests on the goals: n beliefs, each
    ``depends_on`` 2 later ones (2n edges), 3 goals resting on 3 of the first 20."""
    for n in (100, 300, 1000):
        rng = random.Random(0)
        ids = [f"b{i}" for i in range(n)]
        edges = [
            BeliefEdge(id=f"e{i}-{k}", type="depends_on", source=ids[i],
                       target=ids[rng.randrange(i + 1, n)], confidence=0.8)
            for i in range(n - 1)
            for k in range(2)
        ]  # fmt: skip
        goals = [f"goal{g}" for g in range(3)]
        edges += [
            BeliefEdge(id=f"g{g}-{j}", type="depends_on", source=goal,
                       target=ids[j], confidence=0.8)
            for g, goal in enumerate(goals)
            for j in rng.sample(range(min(n, 20)), 3)
        ]  # fmt: skip
        pairs = {b: (rng.uniform(0.5, 5), rng.uniform(0.5, 5)) for b in ids}
        started = time.perf_counter()
        information.gains(pairs, goals, edges)
        took = time.perf_counter() - started
        print(f"gains over {n} beliefs, {len(edges)} edges, 3 goals: {took:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenes", type=int, default=200)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--claims", type=int, default=24)
    parser.add_argument("--goals", type=int, default=2)
    parser.add_argument("--accuracy", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cost", action="store_true", help="time the gain alone")
    args = parser.parse_args()
    if args.cost:
        cost()
        return
    if args.scenes < 2 or args.steps < 1 or args.claims < 3 or args.goals < 1:
        sys.exit("need --scenes >= 2, --steps >= 1, --claims >= 3, --goals >= 1")
    if not 0.5 <= args.accuracy <= 1.0:
        sys.exit("--accuracy is a probability of a right report, in [0.5, 1]")
    started = time.perf_counter()
    results = run(args)
    print(
        f"moves: {args.scenes} scenes, {args.claims} claims, {args.goals} goals, "
        f"check accuracy {args.accuracy}, seed {args.seed}; "
        f"{time.perf_counter() - started:.0f} s"
    )
    report(results)


if __name__ == "__main__":
    main()

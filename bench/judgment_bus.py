"""Judgment through the bus (issue 18, part 6): exact accuracy on the gold questions of
a public truth-discovery set, loaded into worldline as a user would, beside majority
vote computed from the same claims in the same run; then the same with K exact and K
partial copies of one bad source.

    python bench/judgment_bus.py [--data bench/data/population] [--copies 20]
                                 [--chunk 2000] [--timeout 900]

Each scenario gets a world of its own, declared first with every source of its claims
in ``[sources]`` (the loader may report them all: each stays a voice of its own, issue
23). Every (question, answer) becomes a belief added
with ``slot=question`` (its rivals are the question's other answers), and every claim
one ``citation`` from the claim's source, all observed at one instant (the set is a
snapshot), through ``World.load``. Three picks per gold
question, each the highest value, ties to the smallest answer:

- majority vote: the answer most distinct sources give (``reliability.majority``);
- worldline, rivals: the highest posterior, read back with ``get`` after the load;
- worldline, learned: the same after one ``assess_sources`` (fusion learns every
  source's accuracy and copying from the slots; docs/belief-math.md).

It starts its own nats-server and fusion, materializer and projector processes (as
``bench/trust.py``). The data are built by ``bench/data/population/build_population.py``
(see ``bench/judgment.py``); nothing here is tuned to them: the model's constants are
its defaults, chosen before any run.
"""

from __future__ import annotations

import argparse
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from judgment import DATA, accuracy, bad_source, copies, load
from trust import actor_stack

import worldline
from worldline.actors.belief_model import reliability
from worldline.actors.belief_model.text import answer_id
from worldline.protocols.world import Authority, WorldDecl, WorldInfo
from worldline.sdk.batch import AddItem, EvidenceItem

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from worldline.actors.belief_model.reliability import Claim
    from worldline.sdk.client import World

__all__ = ["Config", "Scenario", "declaration", "main", "run"]

AGENT = "bench"
# The claims carry no time of their own: each is observed when the set was taken, one
# instant for all, so decay treats every claim alike (stamped at load time instead,
# a claim loaded a minute later would be "fresher" and settle exact ties).
SNAPSHOT = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Config:
    data: Path = DATA
    copies: int = 20
    chunk: int = 2000
    timeout: float = 900.0


@dataclass
class Scenario:
    title: str
    claims: int
    sources: int
    vote: float
    rivals: float
    learned: float
    load_seconds: float
    assess_seconds: float
    failed: int  # items of the load not applied
    extra: dict[str, float] = field(default_factory=dict)


def batch(world: str, claims: Sequence[Claim]) -> list[AddItem | EvidenceItem]:
    """The adds (one per distinct answer) then the citations (one per claim)."""
    unique = sorted(set(claims))
    answers = sorted({(c.question, c.answer) for c in unique})
    adds: list[AddItem | EvidenceItem] = [
        AddItem(text=a, slot=q, id=answer_id(world, q, a)) for q, a in answers
    ]
    cites = [
        EvidenceItem(
            belief_id=answer_id(world, c.question, c.answer),
            direction="supports",
            kind="citation",
            source=c.source,
            id=f"c{i}",
            observed_at=SNAPSHOT,
        )
        for i, c in enumerate(unique)
    ]
    return adds + cites


def declaration(world: str, claims: Sequence[Claim]) -> WorldDecl:
    """The world the set is loaded into: one agent (``AGENT``) loads every claim, so
    each source it names is declared as one it may report; undeclared, all of them
    would count as that one agent's voice (docs/belief-math.md, "Source identity")."""
    sources = sorted({c.source for c in claims})
    return WorldDecl(
        world=WorldInfo(id=world),
        authority=Authority(admins=[AGENT]),
        sources={source: [AGENT] for source in sources},
    )


async def picks(
    world: World, claims: Sequence[Claim], gold: Mapping[str, str]
) -> dict[str, str]:
    """Per gold question, the answer of highest posterior (ties: smallest answer)."""
    answers: dict[str, set[str]] = {}
    for c in claims:
        if c.question in gold:
            answers.setdefault(c.question, set()).add(c.answer)
    found = {}
    for question, options in sorted(answers.items()):
        best: tuple[float, str] | None = None
        for answer in sorted(options):
            belief = await world.get(answer_id(world.world, question, answer))
            value = -1.0 if belief is None else belief.confidence or 0.0
            if best is None or value > best[0]:
                best = (value, answer)
        if best is not None:
            found[question] = best[1]
    return found


async def scenario(
    url: str, title: str, claims: list[Claim], gold: Mapping[str, str], config: Config
) -> Scenario:
    name = f"judge-{uuid.uuid4().hex[:8]}"
    vote = accuracy(reliability.majority(claims), gold)
    async with worldline.connect(
        url, world=name, agent=AGENT, request_timeout=config.timeout
    ) as world:
        await world.declare(declaration(name, claims))
        started = time.perf_counter()
        results = await world.load(batch(name, claims), chunk=config.chunk)
        loaded = time.perf_counter() - started
        rivals = accuracy(await picks(world, claims, gold), gold)
        started = time.perf_counter()
        await world.assess_sources()
        assessed = time.perf_counter() - started
        fixed = await world.sources(limit=1)  # how the fixed point ended
        learned = accuracy(await picks(world, claims, gold), gold)
    result = Scenario(
        title=title,
        claims=len(set(claims)),
        sources=len({c.source for c in claims}),
        vote=vote,
        rivals=rivals,
        learned=learned,
        load_seconds=loaded,
        assess_seconds=assessed,
        failed=sum(1 for r in results if r.outcome != "applied"),
    )
    print(
        f"{title}: {result.claims} claims, {result.sources} sources, "
        f"{len(gold)} gold questions\n"
        f"  majority vote                      {vote:.3f}\n"
        f"  worldline, rival answers           {rivals:.3f}\n"
        f"  worldline, learned reliability     {learned:.3f}\n"
        f"  load {loaded:.0f} s ({result.failed} items not applied), "
        f"assess {assessed:.0f} s ({fixed.rounds} rounds, last change "
        f"{fixed.change:.1e})",
        flush=True,
    )
    return result


async def measure(url: str, config: Config) -> list[Scenario]:
    claims, gold = load(config.data)
    out = [await scenario(url, "as published", claims, gold, config)]
    bad = bad_source(claims, gold)
    print(f"bad source {bad!r}", flush=True)
    for partial in (False, True):
        added = copies(claims, bad, config.copies, partial=partial)
        kind = "partial" if partial else "exact"
        title = f"+ {config.copies} {kind} copies of the bad source"
        out.append(await scenario(url, title, claims + added, gold, config))
    return out


def run(config: Config) -> list[Scenario]:
    with actor_stack("wl-judge-") as stack:
        return anyio.run(measure, stack.url, config, backend="asyncio")


def main(argv: list[str] | None = None) -> list[Scenario]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Config.data)
    parser.add_argument("--copies", type=int, default=Config.copies)
    parser.add_argument("--chunk", type=int, default=Config.chunk)
    parser.add_argument("--timeout", type=float, default=Config.timeout)
    args = parser.parse_args(argv)
    return run(Config(args.data, args.copies, args.chunk, args.timeout))


if __name__ == "__main__":
    main()

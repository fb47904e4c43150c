"""Concurrent writers: 50 agents hammer the same fields with expected versions over a
real nats-server with every actor running. Each write is applied or rejected, never
lost. The seed's v0.1 approach, a flat world.json updated read-modify-write, is the
baseline under the same load: it loses updates.

The long run is ``WORLDLINE_WRITERS_ROUNDS=25 python -m pytest tests/reliability``.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import msgspec
import pytest

import worldline
from tests.runtime.test_crew import crew
from tests.support import all_actors, running, unique_world
from worldline.protocols.world import Grant

if TYPE_CHECKING:
    from pathlib import Path

    from worldline import World

pytestmark = pytest.mark.nats

AGENTS = 50
ROUNDS = int(os.environ.get("WORLDLINE_WRITERS_ROUNDS", "4"))
RETRIES = 200  # attempts per increment before an agent gives it up
ENTITY = "company:soteria"
FIELDS = ("hot_leads", "total_leads")  # counters seeded by examples/crew.toml


@dataclass
class Tally:
    """What the worldline writers saw."""

    applied: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FIELDS, 0))
    rejected: int = 0  # version conflicts, each followed by a re-read and a retry
    gave_up: int = 0  # increments abandoned after RETRIES conflicts
    unexpected: list[str] = field(default_factory=list)  # any other outcome
    partial_reads: int = 0  # reads at the fence that missed the entity


async def _read(w: World, name: str, tally: Tally) -> tuple[int, int]:
    """The counter's value and version, as of every change applied so far.

    A replica may claim the fence while it holds only part of the op that set it
    (the declaration's entities arrive one change-feed message at a time): such a
    partial read is counted and retried, never taken for the counter's value."""
    await w.sync()
    with anyio.fail_after(10):
        while True:
            state = await w.read_world(entity_type="company")
            found = [e for e in state.entities if e.id == ENTITY]
            if found:
                break
            tally.partial_reads += 1
            await anyio.sleep(0.01)
    current = found[0].fields[name]
    assert isinstance(current.value, int), current
    return current.value, current.version


async def _agent(url: str, world: str, agent: str, index: int, tally: Tally) -> None:
    rng = random.Random(index)
    async with worldline.connect(url, world=world, agent=agent) as w:
        for round_ in range(ROUNDS):
            name = FIELDS[(index + round_) % len(FIELDS)]
            for attempt in range(RETRIES):
                value, version = await _read(w, name, tally)
                try:
                    await w.write(ENTITY, name, value + 1, expect_version=version)
                except worldline.Rejected as exc:
                    if exc.code != "version_conflict":
                        tally.unexpected.append(f"{agent}: {exc.code}: {exc.reason}")
                        break
                    tally.rejected += 1
                    # A little jitter so the losers of one race do not all meet again.
                    await anyio.sleep(rng.uniform(0, 0.005 * min(attempt + 1, 10)))
                    continue
                except worldline.NotApplied as exc:  # outcome unknown: not 0 lost
                    tally.unexpected.append(f"{agent}: not applied: {exc}")
                    break
                tally.applied[name] += 1
                break
            else:
                tally.gave_up += 1


# --- the v0.1 baseline: one flat world.json, read-modify-write (not shipped) ----------


def _load(path: Path) -> dict[str, dict[str, int]]:
    data: dict[str, dict[str, int]] = json.loads(path.read_text())
    return data


def _store(path: Path, data: dict[str, dict[str, int]], writer: str) -> None:
    # Written whole, atomically (temp file + rename) as a careful v0.1 would: reads
    # never see a torn file, so every loss below is a lost update, not a corruption.
    tmp = path.with_name(f"{path.name}.{writer}")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


async def _flat_agent(path: Path, agent: str, index: int) -> None:
    for round_ in range(ROUNDS):
        name = FIELDS[(index + round_) % len(FIELDS)]
        world = _load(path)  # read
        await anyio.lowlevel.checkpoint()  # other agents run between read and write
        world[ENTITY][name] += 1  # modify
        _store(path, world, agent)  # write the whole file back


async def _flat_baseline(path: Path, initial: dict[str, int]) -> tuple[int, int]:
    """(attempts, lost) for the same load on a flat world.json."""
    _store(path, {ENTITY: dict(initial)}, "seed")
    async with anyio.create_task_group() as tg:
        for index in range(AGENTS):
            tg.start_soon(_flat_agent, path, f"a{index:02d}", index)
    final = _load(path)[ENTITY]
    attempts = AGENTS * ROUNDS
    return attempts, attempts - sum(final[n] - initial[n] for n in FIELDS)


@pytest.mark.timeout(900)
async def test_fifty_writers_lose_nothing_where_a_flat_file_loses_updates(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("writers")
    writers = [f"a{i:02d}" for i in range(AGENTS)]
    decl = crew(world)
    decl = msgspec.structs.replace(
        decl,
        authority=msgspec.structs.replace(
            decl.authority,
            grants=[
                *decl.authority.grants,
                Grant(agents=writers, fields=[f"company.{n}" for n in FIELDS]),
            ],
        ),
    )
    tally = Tally()
    async with running(all_actors(), url=nats_url, data=tmp_path / "actors"):
        async with worldline.connect(nats_url, world=world, agent="henry") as henry:
            await henry.declare(decl)
            initial = {n: (await _read(henry, n, tally))[0] for n in FIELDS}
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for index, agent in enumerate(writers):
                tg.start_soon(_agent, nats_url, world, agent, index, tally)
        elapsed = time.monotonic() - started
        async with worldline.connect(nats_url, world=world, agent="henry") as henry:
            final = {n: (await _read(henry, n, tally))[0] for n in FIELDS}
    applied = sum(tally.applied.values())
    lost = sum(tally.applied[n] - (final[n] - initial[n]) for n in FIELDS)
    attempts, flat_lost = await _flat_baseline(tmp_path / "world.json", initial)

    print(
        f"\nworldline: {applied} applied, {tally.rejected} rejected, {lost} lost "
        f"({AGENTS} agents x {ROUNDS} increments on {len(FIELDS)} fields, "
        f"{tally.gave_up} given up after {RETRIES} conflicts, {elapsed:.1f}s)"
    )
    if tally.partial_reads:
        print(f"worldline: {tally.partial_reads} partial reads at the fence, retried")
    print(f"flat world.json: {attempts} attempts, {flat_lost} lost")
    assert tally.unexpected == []
    assert applied + tally.gave_up == AGENTS * ROUNDS  # every increment accounted for
    assert lost == 0
    assert flat_lost > 0

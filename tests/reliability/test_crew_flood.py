"""A flood of statements into a world with a crew: the projector rebuilds the agents'
views once per batch, so an ``add`` right behind the flood is not held up. Prints how
long it took (``python -m pytest tests/reliability/test_crew_flood.py -s``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anyio
import msgspec
import nats
import pytest

import worldline
from tests.runtime.test_crew import crew
from tests.support import all_actors, running, unique_world
from worldline.protocols.subjects import EXTRACTOR_IN

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.nats


async def test_a_flood_of_statements_in_a_crew_world_does_not_hold_up_an_add(
    nats_url: str, tmp_path: Path
) -> None:
    """1,000 extracted statements into a world with a crew: the projector rebuilds the
    agents' views once per batch, not per statement, so an ``add`` made right behind
    them is applied and readable within the SDK's own wait (it used to take 15-40 s,
    and ``add`` gave up with NotApplied)."""
    world = unique_world("flood")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        await ada.declare(crew(world))
        for o in range(10):
            await ada.observe(
                "\n".join(
                    f"The relay number {o * 100 + i} is offline near deck {i}."
                    for i in range(100)
                ),
                source=f"log-{o}",
            )
        nc = await nats.connect(nats_url)
        try:  # the statements are all on the log: the add comes behind them
            with anyio.fail_after(30):
                while True:
                    info = await nc.jetstream().consumer_info(
                        EXTRACTOR_IN.stream.name, EXTRACTOR_IN.durable
                    )
                    if not (info.num_pending or info.num_ack_pending):
                        break
                    await anyio.sleep(0.02)
        finally:
            await nc.close()
        started = time.perf_counter()
        behind = await ada.add("The crew still reads its views", confidence=0.7)
        waited = time.perf_counter() - started
        print(f"crew flood: the add behind 1,000 statements applied in {waited:.2f}s")
        assert behind.confidence is not None
        # Applied in log order: everything before the add is in the replica too.
        assert len(await ada.list(limit=5000)) == 1001
        view = await ada.view("spock")
        assert view is not None
        # The crew part alone stays small however many beliefs the world holds
        # (`worldline up --world-file` compares the declaration with it).
        crew_only = await ada.read_world(entity_type="none", beliefs=False)
        assert crew_only.declaration == crew(world)
        assert crew_only.beliefs == []
        assert len(msgspec.msgpack.encode(crew_only)) < 50_000

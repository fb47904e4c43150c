"""Belief edges as first-class, idempotent objects (issue 25, point 3), through the SDK
against the five actors on a real nats-server: relating the same beliefs the same way
twice is one edge (its id derived from type and ends) and leaves the dependent claim's
effective confidence where one relate put it; another agent's repeat is the same edge,
refused without authority over it; ``unrelate`` removes the edge and its effect, an
unknown edge is a clear error, and relating again restores it (docs/belief-math.md,
"Edges")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.sdk.errors import BadRequest, Rejected

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.sdk.client import World

pytestmark = pytest.mark.nats


async def effective(world: World, belief_id: str) -> float | None:
    await world.read()  # fenced at this agent's last write: the replica holds it
    belief = await world.get(belief_id)
    assert belief is not None
    return belief.effective_confidence


async def edge_ids(world: World, belief_id: str) -> list[str]:
    await world.read()
    return [e.id for e in (await world.trace(belief_id)).edges]


async def test_relate_twice_is_one_edge_and_unrelate_takes_it_away(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="spock") as spock,
        worldline.connect(nats_url, world=world, agent="scotty") as scotty,
    ):
        await spock.add("The launch window is open.", confidence=0.2, id="a")
        await spock.add("We launch on Friday.", confidence=0.9, id="c")
        alone = await effective(spock, "c")
        edge_id = spock.edge_id("c", "a", type="depends_on")
        assert edge_id == scotty.edge_id("c", "a", type="depends_on")

        await spock.relate("c", "a", type="depends_on")
        once = await effective(spock, "c")
        assert once is not None
        assert alone is not None
        assert once < alone  # resting on a weak premise costs c
        await spock.relate("c", "a", type="depends_on")
        assert await edge_ids(spock, "c") == [edge_id]
        assert await effective(spock, "c") == pytest.approx(once)  # not compounded

        with pytest.raises(Rejected, match="may not change or remove belief edge"):
            await scotty.relate("c", "a", type="depends_on", confidence=0.99)
        assert await edge_ids(spock, "c") == [edge_id]
        assert await effective(spock, "c") == pytest.approx(once)

        with pytest.raises(Rejected, match="unauthorized"):
            await scotty.unrelate(edge_id)  # the same authority as re-stating it
        removed = await spock.unrelate(edge_id)
        assert (removed.id, removed.removed) == (edge_id, True)
        assert await edge_ids(spock, "c") == []
        assert await effective(spock, "c") == pytest.approx(alone)
        assert (await spock.trace_edge(edge_id)).edges[0].removed  # still traceable
        assert (await spock.unrelate(edge_id)).removed  # again: nothing to change

        with pytest.raises(BadRequest, match="no belief edge 'be-missing'"):
            await spock.unrelate("be-missing")

        await spock.relate("c", "a", type="depends_on")  # the same edge, restored
        assert await edge_ids(spock, "c") == [edge_id]
        assert await effective(spock, "c") == pytest.approx(once)

        await spock.relate("a", "c", type="supports")  # removed at once, unread
        removed = await spock.unrelate(spock.edge_id("a", "c", type="supports"))
        assert removed.removed
        assert await edge_ids(spock, "c") == [edge_id]

"""Contradictions with a lifecycle and the two time axes, over a real nats-server
and the five actors, through the SDK (docs/belief-math.md, "Contradictions" and
"Two time axes")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import anyio
import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.actors.belief_model.contradictions import contradiction_id
from worldline.protocols.world import Authority, WorldDecl, WorldInfo
from worldline.sdk.errors import BadRequest, Rejected

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.protocols.beliefs import Contradiction

pytestmark = pytest.mark.nats


async def test_a_contradiction_opens_widens_and_is_settled(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="spock") as spock,
        worldline.connect(nats_url, world=world, agent="mallory") as mallory,
    ):
        # spock rules the world (so may settle) and may report its sensors.
        await spock.declare(
            WorldDecl(
                world=WorldInfo(id=world),
                authority=Authority(admins=["spock"]),
                sources={"sensor-*": ["spock"]},
            )
        )
        await spock.add("The reactor is stable.", confidence=0.8, id="b1")
        await spock.add("The reactor is failing.", confidence=0.3, id="b2")
        for n in range(6):
            await spock.evidence(
                "b1", direction="supports", kind="citation", source=f"sensor-{n}"
            )
        alone = await spock.get("b1")
        assert alone is not None
        assert alone.uncertainty is not None
        await spock.relate("b1", "b2", type="contradicts", confidence=1.0, id="x1")
        cid = contradiction_id(world, "edge", ("b1", "b2"))
        found: list[Contradiction] = []
        with anyio.move_on_after(5):
            while not found:
                found = await spock.contradictions()
        (c,) = found
        assert (c.id, c.status, c.kind, c.beliefs) == (
            cid,
            "open",
            "edge",
            ("b1", "b2"),
        )
        wide = await spock.get("b1")
        assert wide is not None
        assert wide.uncertainty is not None
        assert wide.uncertainty > alone.uncertainty
        assert "stable" not in wide.flags
        with pytest.raises(BadRequest, match="not an end"):
            await spock.resolve_contradiction(cid, "sensors agree", winner="b9")
        with pytest.raises(BadRequest, match="no contradiction"):
            await spock.resolve_contradiction("c-0000000000000000", "nothing")
        with pytest.raises(Rejected) as refused:  # not an admin: may not settle
            await mallory.resolve_contradiction(cid, "trust me", winner="b2")
        assert refused.value.code == "unauthorized"
        await spock.resolve_contradiction(cid, "six sensors agree", winner="b1")
        settled: list[Contradiction] = []
        with anyio.move_on_after(5):
            while not settled:
                settled = await spock.contradictions(status="resolved")
        assert [(x.id, x.winner, x.resolved_by) for x in settled] == [
            (cid, "b1", "spock")
        ]
        assert await spock.contradictions() == []
        narrow = await spock.get("b1")
        assert narrow is not None
        assert narrow.uncertainty == alone.uncertainty
        # Recorded time: before the edge, the world knew of no contradiction.
        opened_at = settled[0].opened_at
        assert opened_at is not None
        earlier = opened_at - timedelta(microseconds=1)
        assert await spock.contradictions(status="all", as_of=earlier) == []
        with pytest.raises(BadRequest, match="resolved already"):
            await spock.resolve_contradiction(cid, "again")


async def test_as_of_leaves_out_what_was_recorded_later(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="spock") as spock,
    ):
        await spock.add("The bridge holds.", id="b1")
        first = await spock.evidence(
            "b1", direction="supports", kind="citation", source="survey"
        )
        cut = datetime.now(UTC)
        await anyio.sleep(0.01)
        observed = first.updated_at - timedelta(days=1)  # measured before, told now
        await spock.evidence("b1", direction="refutes", kind="measurement",
                             source="strain-gauge", observed_at=observed)  # fmt: skip
        now = await spock.get("b1")
        then = await spock.get("b1", as_of=cut)
        assert now is not None
        assert then is not None
        assert (now.evidence_count, then.evidence_count) == (2, 1)
        listed = {b.id: b for b in await spock.list(as_of=cut)}
        read = {b.id: b for b in (await spock.read(as_of=cut)).beliefs}
        assert listed["b1"] == read["b1"] == then
        assert (
            await spock.get("b1", as_of=first.created_at - timedelta(seconds=1)) is None
        )

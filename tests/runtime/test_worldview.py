"""The worldview over a real nats-server: the same bytes from any projector replica,
including one rebuilt from the change feed."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import anyio
import msgspec
import pytest

import worldline
from actors.registry import build
from tests.runtime.test_crew import crew
from tests.support import running, unique_world

pytestmark = pytest.mark.nats

AT = datetime(2026, 12, 1, tzinfo=UTC)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent-output.md"


async def _settled(w: worldline.World, beliefs: int, version: int) -> int:
    """Wait until the replica answering ``w`` holds ``beliefs`` beliefs and every
    crew change up to ``version`` (extraction and the feed are asynchronous)."""
    with anyio.fail_after(10):
        while True:
            count = len(await w.list())
            if count >= beliefs and (await w.read_world()).version >= version:
                return count
            await anyio.sleep(0.05)


async def _before(nats_url: str, world: str, query: str) -> bytes:
    async with worldline.connect(nats_url, world=world, agent="spock") as spock:
        view = await spock.before(query, at=AT)
    return msgspec.json.encode(view, order="sorted")


async def test_before_is_byte_identical_across_replicas_and_rebuilds(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("view")
    writers = [build(n) for n in ("extractor", "fusion", "materializer")]
    first = build("projector", replica=f"a{uuid.uuid4().hex[:6]}")
    async with running([*writers, first], url=nats_url, data=tmp_path / "a"):
        async with worldline.connect(nats_url, world=world, agent="ada") as ada:
            await ada.declare(crew(world))
            await ada.after(EXAMPLE.read_text())
            belief = await ada.add("Pilots convert when the SLA names a carrier",
                                   confidence=0.6)  # fmt: skip
            await ada.evidence(belief.id, direction="refutes", kind="measurement",
                               source="crm", observed_at=AT)  # fmt: skip
            await ada.write("project:soteria-pilot-conversion", "phase", "sla")
            held = await _settled(ada, 10, 0)
            crew_version = (await ada.read_world()).version
        one = await _before(nats_url, world, "draft the SLA objection memo")
        again = await _before(nats_url, world, "draft the SLA objection memo")
        other = await _before(nats_url, world, "audit the export route")
    # A second replica with a fresh store rebuilds everything from the change feed.
    rebuilt = build("projector", replica=f"b{uuid.uuid4().hex[:6]}")
    async with running([*writers, rebuilt], url=nats_url, data=tmp_path / "b"):
        async with worldline.connect(nats_url, world=world, agent="spock") as spock:
            assert await _settled(spock, held, crew_version) == held
        replayed = await _before(nats_url, world, "draft the SLA objection memo")
    assert one == again
    assert one == replayed
    assert one != other  # a move-specific query changes the view
    view = msgspec.json.decode(one)
    assert view["at"].startswith("2026-12-01T00:00:00")
    assert view["tokens"] < 2000
    assert 1 <= len(view["moves"]) <= 7

"""The worldview over a real nats-server: the same bytes from any projector replica,
including one rebuilt from the change feed."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import msgspec
import pytest

import worldline
from tests.runtime.test_crew import crew
from tests.support import all_actors, running, unique_world
from worldline.actors.registry import build
from worldline.protocols.messages import AgentView

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream

    from worldline.protocols.worldview import Worldview

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


async def test_watch_gets_changes_the_view_depends_on_and_not_others(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("watch")
    async with running(all_actors(), url=nats_url, data=tmp_path):
        async with worldline.connect(nats_url, world=world, agent="ada") as ada:
            await ada.declare(crew(world))
            relevant = await ada.add("Soteria pilots convert once the SLA is signed",
                                     confidence=0.6)  # fmt: skip
            unrelated = [
                await ada.add(f"The cafeteria menu rotates on day {i}", confidence=0.5)
                for i in range(9)
            ]
            await ada.sync()
        send, receive = anyio.create_memory_object_stream[AgentView](100)
        async with (
            worldline.connect(nats_url, world=world, agent="spock") as spock,
            send,
            receive,
            anyio.create_task_group() as tg,
        ):

            async def pump() -> None:
                async for view in spock.watch():
                    await send.send(view)

            tg.start_soon(pump)
            with anyio.fail_after(10):
                first = await receive.receive()
            latest = await _quiet(receive, first)
            assert latest.worldview is not None
            shown = _traced(latest.worldview)
            assert relevant.id in shown
            assert not shown & {b.id for b in unrelated}
            # A belief the view does not show changes: nothing is pushed.
            await ada_evidence(nats_url, world, unrelated[3].id)
            assert await _quiet(receive, latest) == latest
            # A belief the view shows changes: the change reaches the stream.
            await ada_evidence(nats_url, world, relevant.id)
            with anyio.fail_after(10):
                changed = await receive.receive()
            assert changed != latest
            assert changed.worldview is not None
            assert relevant.id in _traced(changed.worldview)
            tg.cancel_scope.cancel()


def _traced(view: Worldview) -> set[str]:
    return {
        item
        for name in ("current", "intent", "moves")
        for leaf in getattr(view, name)
        for item in leaf.trace
    }


async def _quiet(
    receive: MemoryObjectReceiveStream[AgentView], latest: AgentView
) -> AgentView:
    """The last view published until the stream stays quiet for a second."""
    while True:
        with anyio.move_on_after(1.0):
            latest = await receive.receive()
            continue
        return latest


async def ada_evidence(nats_url: str, world: str, belief_id: str) -> None:
    async with worldline.connect(nats_url, world=world, agent="ada") as ada:
        await ada.evidence(belief_id, direction="refutes", kind="measurement",
                           source="crm")  # fmt: skip

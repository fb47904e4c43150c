"""The blocking SDK and the agent-loop hooks, against a real nats-server and the five
actors: a turn reads the worldview and reports its output, a failed turn reports
nothing, the decorator does both, and the blocking twins behave like the async API."""

from __future__ import annotations

import asyncio
import inspect
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio
import pytest
from anyio.from_thread import start_blocking_portal

import worldline
from tests.support import all_actors, running, unique_world
from worldline import sync
from worldline.actors.extractor.text import belief_id
from worldline.hooks import agent_step

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from worldline.hooks import Turn
    from worldline.protocols.worldview import Worldview

OUTPUT = (
    "Authentication is enforced at the API middleware.\n"
    "A schema change to the sessions table risks logging every user out.\n"
    "Is the export route reachable from outside the VPC?\n"
)


@contextmanager
def actors_in_background(url: str, data: Path) -> Iterator[None]:
    """The five actors on a loop of their own, so this thread has none (as in a
    script)."""
    with (
        start_blocking_portal(backend="asyncio") as portal,
        portal.wrap_async_context_manager(running(all_actors(), url=url, data=data)),
    ):
        yield


def test_every_async_method_has_a_blocking_twin() -> None:
    public = {
        name: member
        for name, member in inspect.getmembers(worldline.World)
        if not name.startswith("_")
        and (inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member))
    }
    assert {"add", "before", "write", "inbox", "watch", "export"} <= set(public)
    missing = sorted(name for name in public if name not in vars(sync.SyncWorld))
    assert not missing, (
        f"add `{missing[0]} = _Blocking(World.{missing[0]})` to SyncWorld"
    )


@pytest.mark.nats
def test_blocking_sdk_round_trip_from_threads_without_a_loop(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("sync")
    with (
        actors_in_background(nats_url, tmp_path),
        sync.connect(nats_url, world=world, agent="ada") as ada,
    ):
        belief = ada.add("Market size is $4.2B", confidence=0.85, type="assumption")
        assert belief.confidence is not None
        moved = ada.evidence(
            belief.id, direction="refutes", kind="measurement", source="sec-filing"
        )
        assert moved.confidence is not None
        assert moved.confidence < belief.confidence
        assert [s.evidence.source for s in ada.trace(belief.id).steps] == ["sec-filing"]
        # Another thread with no loop shares the same handle (and connection).
        seen: list[worldline.Belief | None] = []
        reader = threading.Thread(target=lambda: seen.append(ada.get(belief.id)))
        reader.start()
        reader.join(10)
        assert len(seen) == 1
        assert seen[0] is not None
        assert seen[0].version == moved.version
        view = ada.before("size the market")
        assert view.agent == "ada"
        assert view.query == "size the market"
        assert "4.2B" in view.prompt
        # An async iterator becomes a blocking one that ends with the log.
        ops = [record.op for record in ada.export()]
        assert [type(op).__name__ for op in ops] == ["AddBelief", "AddEvidence"]
        # SDK errors come through unchanged.
        with pytest.raises(worldline.BadRequest, match="no belief 'b-nope'"):
            ada.trace("b-nope")


async def test_blocking_sdk_refuses_a_thread_that_runs_a_loop(nats_url: str) -> None:
    with (
        pytest.raises(sync.LoopRunning, match="use the async API"),
        sync.connect(nats_url, world="w", agent="ada"),
    ):
        pass


@pytest.mark.nats
def test_a_handle_used_later_from_inside_a_loop_is_refused(
    nats_url: str, tmp_path: Path
) -> None:
    with sync.connect(nats_url, world=unique_world("loop"), agent="ada") as ada:

        async def misuse() -> None:
            ada.list()

        with pytest.raises(sync.LoopRunning, match="top-level await"):
            asyncio.run(misuse())


@pytest.mark.nats
async def test_turn_reads_the_worldview_and_reports_what_it_said(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("turn")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="geordi") as geordi,
    ):
        seeded = await geordi.add("Billing runs on the legacy cluster", confidence=0.7)
        async with geordi.turn("review billing auth") as turn:
            assert turn.worldview.query == "review billing auth"
            assert seeded.id in {
                i for leaf in turn.worldview.current for i in leaf.trace
            }
            assert turn.prompt == turn.worldview.prompt
            turn.output = OUTPUT
        extracted = turn.extracted
        assert extracted is not None
        assert extracted.applied
        claim = belief_id(world, "Authentication is enforced at the API middleware.")
        assert extracted.claims == [claim]
        assert len(extracted.risks) == 1
        assert len(extracted.gaps) == 1
        # Applied means readable by everyone, and traceable to this turn's output.
        chain = await geordi.trace(claim)
        assert [s.evidence.artifact for s in chain.steps] == [extracted.obs_id]
        gap = await geordi.get(extracted.gaps[0])
        assert gap is not None
        assert gap.type == "gap"

        # A turn that raises reports nothing.
        failed = "The billing export is encrypted at rest."
        turns: list[Turn] = []

        async def crashing_turn() -> None:
            async with geordi.turn("check encryption") as broken:
                turns.append(broken)
                broken.output = failed
                raise RuntimeError("model crashed")

        with pytest.raises(RuntimeError, match="model crashed"):
            await crashing_turn()
        assert turns[0].extracted is None

        # The decorator form: step(query, worldview) -> str becomes step(query).
        @agent_step(geordi)
        async def step(query: str, worldview: Worldview) -> str:
            assert worldview.query == query
            return "Token refresh takes about 40 ms at p99."

        assert await step("measure token refresh") == (
            "Token refresh takes about 40 ms at p99."
        )
        measured = await geordi.get(
            belief_id(world, "Token refresh takes about 40 ms at p99.")
        )
        assert measured is not None
        # By now the extractor has long consumed anything the failed turn could have
        # sent, and nothing came of it.
        await anyio.sleep(0.3)
        assert await geordi.get(belief_id(world, failed)) is None


@pytest.mark.nats
def test_blocking_turn_and_decorator(nats_url: str, tmp_path: Path) -> None:
    world = unique_world("sync-turn")
    with (
        actors_in_background(nats_url, tmp_path),
        sync.connect(nats_url, world=world, agent="spock") as spock,
    ):
        with spock.turn("review billing auth") as turn:
            assert turn.worldview.agent == "spock"
            turn.output = OUTPUT
        assert turn.extracted is not None
        assert turn.extracted.applied
        assert turn.extracted.by_type().keys() == {"claim", "risk", "gap"}
        assert len(spock.list(type="gap")) == 1

        calls: list[str] = []

        @spock.agent_step
        def step(query: str, worldview: Worldview) -> str:
            calls.append(worldview.query)
            if query == "fail":
                raise ValueError("no answer")
            return "Rate limiting is configured per tenant."

        assert step("rate limits") == "Rate limiting is configured per tenant."
        with pytest.raises(ValueError, match="no answer"):
            step("fail")
        assert calls == ["rate limits", "fail"]
        texts = {b.text for b in spock.list()}
        assert "Rate limiting is configured per tenant." in texts

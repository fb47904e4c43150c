"""Readers of the bus survive junk on their own subjects and keys (issue 23).

On an open bus any client can make the server write for it: an op published with a
reply subject gets its PubAck JSON (``{"stream":"WL_OPS","seq":N}``) delivered
there, so naming an agent's inbox subject or a bucket key (``$KV.wl-views.<key>``)
as the reply puts that JSON in the inbox stream or over the view. Before, ``worldline
inbox`` for that agent exited 2 ("Expected `object`, got `int`") until an operator
purged the message, and ``view``/``watch`` failed the same way. Now each reader
skips what does not decode, with a warning naming it, and returns the rest.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

import worldline
from tests.runtime.test_crew import PILOT, crew
from tests.support import all_actors, running, unique_world
from worldline.protocols.messages import Notification
from worldline.protocols.subjects import VIEWS, bucket_key, bucket_put, inbox, ops

if TYPE_CHECKING:
    from nats.aio.msg import Msg

    from worldline import World

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).parent / "worldline")


async def _pub_ack_to(world: World, reply: str) -> None:
    """The attack: an op published with ``reply`` as its reply subject."""
    await world._nc.publish(ops(world.world, world.agent), b"junk op", reply=reply)
    await world._nc.flush()


async def _notes(world: World, count: int) -> list[Notification]:
    with anyio.fail_after(15):
        while True:
            items = await world.inbox(wait=0.3, limit=100)
            for item in items:
                await item.release()
            notes = [i.message for i in items if isinstance(i.message, Notification)]
            if len(notes) >= count:
                return notes
            await anyio.sleep(0.1)


async def test_an_inbox_with_junk_returns_the_rest_and_names_the_junk(
    nats_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    world = unique_world("junkbox")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
        worldline.connect(nats_url, world=world, agent="spock") as spock,
    ):
        await ada.declare(crew(world))
        await ada.write(PILOT, "phase", "sla")
        await _notes(spock, 1)
        await _pub_ack_to(spock, inbox(world, "spock"))
        await ada.write(PILOT, "phase", "contract")
        with caplog.at_level(logging.WARNING, logger="worldline.sdk"):
            notes = await _notes(spock, 2)
        assert [n.value for n in notes] == ["sla", "contract"]
        assert len(spock.inbox_skipped) == 1
        junk_seq = spock.inbox_skipped[0]
        warned = [r.getMessage() for r in caplog.records]
        assert any(
            f"stream sequence {junk_seq}: not an inbox message" in m for m in warned
        ), warned
        # Acknowledged: the next read does not meet it again.
        assert await _notes(spock, 2)
        assert spock.inbox_skipped == []
        env = {**os.environ, "WORLDLINE_NATS": nats_url}
        done = await anyio.run_process(
            [WORLDLINE, "inbox", "--world", world, "--agent", "spock"],
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        assert "contract" in done.stdout.decode()


async def test_junk_over_a_stored_view_is_skipped_by_view_and_watch(
    nats_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    world = unique_world("junkview")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
        worldline.connect(nats_url, world=world, agent="spock") as spock,
    ):
        await ada.declare(crew(world))
        with anyio.fail_after(10):
            while await spock.stored_view() is None:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        key = bucket_put(VIEWS, bucket_key(world, "spock"))
        with caplog.at_level(logging.WARNING, logger="worldline.sdk"):
            await _pub_ack_to(spock, key)
            with anyio.fail_after(5):
                while await spock.stored_view() is not None:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
        assert any("is not a view, skipped" in r.getMessage() for r in caplog.records)

        async def first_view() -> None:
            async for view in spock.watch():  # the junk first, skipped
                assert view is not None
                return

        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(first_view)
                await anyio.sleep(0.3)
                await ada.write(PILOT, "phase", "sla")  # a new view for spock
        assert await spock.stored_view() is not None


async def test_a_junk_answer_to_a_request_is_one_clear_error(nats_url: str) -> None:
    """Any client may answer a request first on an open bus: its junk is a
    ``BusUnavailable`` naming the subject, not a decode error."""
    import nats

    from worldline.actors.runtime.declare import ensure_buckets, ensure_streams
    from worldline.protocols.subjects import BUCKETS, STREAMS, rpc
    from worldline.sdk.errors import BusUnavailable

    world = unique_world("junkreply")
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, STREAMS)
        await ensure_buckets(js, BUCKETS)

        async def answer(msg: Msg) -> None:
            await msg.respond(b'{"stream":"WL_OPS","seq":7}')

        await nc.subscribe(rpc(world, "get"), cb=answer)
        await nc.flush()
        async with worldline.connect(nats_url, world=world, agent="ada") as ada:
            with pytest.raises(BusUnavailable, match="is no worldline reply"):
                await ada.get("b-1")
    finally:
        await nc.close()


async def test_an_observation_under_a_batch_header_costs_no_model_call() -> None:
    """The store dead-letters it (observations never travel in batches), so the
    extractor's model is not asked about it first."""
    import dataclasses
    from datetime import UTC, datetime

    from worldline.actors.registry import build
    from worldline.actors.runtime.deliveries import delivery
    from worldline.actors.runtime.prepare import prepared_input
    from worldline.protocols.messages import Observe, encode
    from worldline.protocols.subjects import obs

    asked: list[str] = []

    async def prepare(message: Observe, ctx: object) -> None:
        asked.append(message.text)

    inp = dataclasses.replace(build("extractor").inputs[0], prepare=prepare)
    now = datetime(2026, 3, 1, tzinfo=UTC)
    observe = Observe(obs_id="o1", author="ada", source="s", text="Pilots", at=now)
    subject = obs("w", "ada")
    plain = delivery(1, subject, encode(observe), None)
    batched = delivery(2, subject, encode(observe), "1")
    await prepared_input(inp, [], [plain, batched], now)
    assert asked == ["Pilots"]  # the plain one only

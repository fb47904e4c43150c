"""The publish path's own behaviour over a real server (``runtime/publish.py``): a
fan-out to hundreds of inboxes opens their durables together and arrives whole, in
order; the in-flight cap holds; a message no stream takes fails with the server's
answer at once, not after the PubAck timeout."""

from __future__ import annotations

import time

import anyio
import nats
import nats.js.errors
import pytest

from tests.support import unique_world
from worldline.actors.runtime import publish
from worldline.actors.runtime.declare import ensure_streams
from worldline.actors.runtime.outbox import OutboxItem
from worldline.actors.runtime.publish import publish_all
from worldline.protocols.subjects import INBOX, STREAMS, inbox, inbox_in, state

pytestmark = pytest.mark.nats


def _item(subject: str, msg_id: str, payload: bytes = b"x") -> OutboxItem:
    return OutboxItem(key=b"k", subject=subject, msg_id=msg_id, payload=payload)


async def test_a_fanout_opens_every_inbox_and_arrives_in_order(nats_url: str) -> None:
    world = unique_world("fanout")
    agents = [f"a{i:03d}" for i in range(200)]
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, STREAMS)
        items = [_item(inbox(world, a), f"note-{a}", a.encode()) for a in agents]
        items.append(_item(state(world, "inbox"), "state-1"))
        await publish_all(js, items)
        for agent in agents:  # each durable is there, holding its one message
            info = await js.consumer_info(INBOX.name, inbox_in(world, agent).durable)
            assert info.num_pending == 1
        sub = await js.subscribe(inbox(world, "*"), ordered_consumer=True)
        got = [(await sub.next_msg(timeout=5)).data for _ in agents]
        assert got == [a.encode() for a in agents]
        # Again (a retry after a crash): nothing new is stored, nothing is opened.
        await publish_all(js, items)
        stream = await js.stream_info(INBOX.name)
        assert stream.state.messages == len(agents)
    finally:
        await nc.close()


async def test_more_than_in_flight_messages_all_arrive(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publish, "IN_FLIGHT", 3)
    monkeypatch.setattr(publish, "SEND_EVERY", 2)
    world = unique_world("inflight")
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, STREAMS)
        await publish_all(js, [_item(inbox(world, "ada"), f"m-{n}") for n in range(50)])
        stream = await js.stream_info(INBOX.name)
        assert stream.state.messages == 50
    finally:
        await nc.close()


async def test_a_message_no_stream_takes_fails_at_once(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, STREAMS)
        started = time.monotonic()
        with pytest.raises(nats.js.errors.NoStreamResponseError):
            await publish_all(js, [_item("nowhere.at.all", "m-1")])
        assert time.monotonic() - started < publish.PUBLISH_TIMEOUT
    finally:
        await nc.close()


async def test_concurrent_calls_on_one_connection_get_their_own_acks(
    nats_url: str,
) -> None:
    world = unique_world("calls")
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, STREAMS)
        async with anyio.create_task_group() as tg:
            for call in range(5):
                items = [
                    _item(inbox(world, f"c{call}"), f"{call}-{n}") for n in range(40)
                ]
                tg.start_soon(publish_all, js, items)
        stream = await js.stream_info(INBOX.name)
        assert stream.state.messages == 200
    finally:
        await nc.close()

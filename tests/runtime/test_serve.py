"""An actor's request/reply loop (``serve.serve``) on a real nats-server: a slow
answer runs in a worker thread, so the event loop (consuming, lease renewals,
heartbeats) keeps running meanwhile, and a flood of slow requests takes at most the
actor's read threads."""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import TYPE_CHECKING

import anyio
import msgspec
import pytest

from worldline.actors.runtime.bus import connect
from worldline.actors.runtime.serve import READ_THREADS, serve
from worldline.actors.runtime.spec import Service
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import PROJECTOR_RPC, BeliefReply, GetBelief, encode
from worldline.protocols.subjects import rpc, rpc_pattern

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.messages import ProjectorRpc

pytestmark = pytest.mark.nats

SLOW = 0.6  # seconds one answer takes
_REPLY = msgspec.msgpack.Decoder(BeliefReply)


class _Slow:
    """A serve function that holds its thread (as a long read does) and counts how
    many run at once, and in which thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.threads: set[int] = set()

    def __call__(
        self, reader: Reader, request: ProjectorRpc, world: str
    ) -> BeliefReply:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.threads.add(threading.get_ident())
        try:
            reader.get(b"anything")  # the read transaction is open in this thread
            time.sleep(SLOW)
        finally:
            with self.lock:
                self.running -= 1
        return BeliefReply()


async def test_slow_answers_run_off_the_event_loop_on_bounded_threads(
    nats_url: str, tmp_path: Path
) -> None:
    store = Store(tmp_path / "store", actor="projector-0")
    slow = _Slow()
    service = Service(rpc_pattern("get"), "projector", PROJECTOR_RPC, slow)
    nc = await connect(nats_url, name="test-serve")  # the actors' client
    lag = 0.0
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(partial(serve, nc, store, service))

            async def ticker() -> None:  # what else the actor's loop must keep doing
                nonlocal lag
                while True:
                    before = time.perf_counter()
                    await anyio.sleep(0.01)
                    lag = max(lag, time.perf_counter() - before - 0.01)

            tg.start_soon(ticker)
            request = encode(GetBelief(belief_id="b-1"))
            replies = []

            async def ask() -> None:
                msg = await nc.request(rpc("w", "get"), request, timeout=20)
                replies.append(_REPLY.decode(msg.data))

            started = time.perf_counter()
            async with anyio.create_task_group() as asking:
                for _ in range(3 * READ_THREADS):
                    asking.start_soon(ask)
            took = time.perf_counter() - started
            tg.cancel_scope.cancel()
    finally:
        await nc.close()
        store.close()
    assert replies == [BeliefReply()] * (3 * READ_THREADS)
    assert lag < SLOW / 2, f"the event loop stalled {lag:.2f}s behind a read"
    assert slow.most == READ_THREADS  # in parallel, but never more than the limit
    assert threading.get_ident() not in slow.threads
    assert took < 3 * SLOW * 1.5 + 1  # three rounds of READ_THREADS at once


async def test_a_request_whose_subject_is_not_text_is_refused_and_serving_goes_on(
    nats_url: str, tmp_path: Path
) -> None:
    store = Store(tmp_path / "store", actor="projector-0")
    service = Service(rpc_pattern("get"), "projector", PROJECTOR_RPC, _Slow())
    nc = await connect(nats_url, name="test-serve")  # the actors' client
    request = encode(GetBelief(belief_id="b-1"))
    bad = rpc("", "get").encode().replace(b"..", b".\xff\xfe.")  # the world's bytes
    inbox = nc.new_inbox().encode()
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(partial(serve, nc, store, service))
            # The service's SUB must reach the server before the raw PUB does (a
            # publish nobody is subscribed to yet is dropped, and the wait times out).
            await nc.flush()
            host, port = nats_url.removeprefix("nats://").rsplit(":", 1)
            async with await anyio.connect_tcp(host, int(port)) as sock:
                await sock.receive()  # INFO
                await sock.send(
                    b'CONNECT {"verbose":false,"pedantic":false}\r\n'
                    + b"SUB %s 1\r\nPUB %s %s %d\r\n%s\r\n"
                    % (inbox, bad, inbox, len(request), request)
                )
                answer = b""
                with anyio.fail_after(10):
                    while answer.count(b"\r\n") < 2:
                        answer += await sock.receive()
            assert answer.startswith(b"MSG " + inbox), answer
            reply = msgspec.msgpack.decode(answer.split(b"\r\n", 2)[1])
            assert reply["kind"] == "rpc.error.v1"
            assert reply["code"] == "invalid"
            assert "not valid UTF-8" in reply["message"]
            # The actor's connection survived: the next request is answered.
            msg = await nc.request(rpc("w", "get"), request, timeout=10)
            assert _REPLY.decode(msg.data) == BeliefReply()
            tg.cancel_scope.cancel()
    finally:
        await nc.close()
        store.close()

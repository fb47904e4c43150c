"""Reads right after a projector restart are fenced: a replica replaying a backlog
does not answer from the past (the outside attack found reads after a crash lagged
the log for a client that had written nothing, whose own fence is 0)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import anyio
import pytest
from nats.js import api

import worldline
from tests.support import running, unique_world
from worldline.actors.registry import build
from worldline.actors.runtime import fence as fence_module
from worldline.actors.runtime.bus import connect
from worldline.actors.runtime.fence import StartFence
from worldline.protocols.messages import AddBelief, BeliefReply, RpcError, encode
from worldline.protocols.subjects import (
    FUSION_IN,
    MATERIALIZER_IN,
    MATERIALIZER_OPS_IN,
    ops,
    rpc,
)

if TYPE_CHECKING:
    from pathlib import Path

    from anyio.abc import TaskStatus

pytestmark = pytest.mark.nats

BACKLOG = 1500  # beliefs the projector misses while it is down (catch-up well inside
# the 5 s read fence on a loaded 2-core machine: the lexical index halved the
# projector's apply rate, and 3,000 once took longer under CI)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def _load(url: str, world: str) -> str:
    """Publish the backlog straight onto the op log; wait until the materializer has
    put every change on the feed. Returns the last belief's id."""
    nc = await connect(url, name="fence-loader")
    try:
        js = nc.jetstream()
        futures = []
        for i in range(BACKLOG):
            op = AddBelief(
                op_id=f"op-fence-{i:06d}",
                author="loader",
                at=T0 + timedelta(milliseconds=i),
                belief_id=f"b-fence-{i:06d}",
                text=f"backlog claim {i} about renewal number {i % 97}",
                confidence=0.6,
            )
            futures.append(
                await js.publish_async(
                    ops(world, "loader"),
                    encode(op),
                    headers={api.Header.MSG_ID: op.op_id},
                )
            )
        for future in futures:
            await future
        with anyio.fail_after(60):
            # In the order the changes flow: fusion's posteriors, then the
            # materializer's two inputs (its posterior input may look empty while
            # fusion still works on the backlog).
            for spec in (FUSION_IN, MATERIALIZER_OPS_IN, MATERIALIZER_IN):
                while True:
                    info = await js.consumer_info(spec.stream.name, spec.durable)
                    if not (info.num_pending or info.num_ack_pending):
                        break
                    await anyio.sleep(0.05)
    finally:
        await nc.close()
    return f"b-fence-{BACKLOG - 1:06d}"


@pytest.mark.timeout(90)
async def test_reads_after_a_restart_wait_for_the_backlog(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("fence")
    upstream = [build("fusion"), build("materializer")]
    async with running(upstream, url=nats_url, data=tmp_path):
        async with (
            running([build("projector")], url=nats_url, data=tmp_path),
            worldline.connect(nats_url, world=world, agent="ada") as ada,
        ):
            first = await ada.add("The pilot renews in March", confidence=0.6)
        # The projector is down; the feed moves on without it.
        last = await _load(nats_url, world)
        async with (
            running([build("projector")], url=nats_url, data=tmp_path),
            worldline.connect(nats_url, world=world, agent="bob") as bob,
        ):
            # At once, from a client that has written nothing (its fence is 0).
            got = await bob.get(last)
            assert got is not None, "a restarted projector answered from the past"
            assert await bob.get(first.id) is not None


class _Applied:
    """A store's applied sequences, as the fence reads them."""

    actor = "projector-0"

    def __init__(self) -> None:
        self.seq = 0

    def applied_seq(self, durable: str) -> int:
        return self.seq


async def test_a_replica_far_behind_answers_at_once_after_one_bounded_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fence_module, "READ_FENCE_WAIT", 0.1)
    store = _Applied()
    fence = StartFence(store, {"projector-0": 10})  # type: ignore[arg-type]
    refused = await fence.hold()
    assert isinstance(refused, RpcError)
    assert "catching up" in refused.message
    assert "applied 0 of 10" in refused.message
    with anyio.fail_after(0.05):  # no second wait: answered at once
        assert await fence.hold() is not None
    store.seq = 10
    assert await fence.hold() is None


async def _answering(
    url: str, world: str, replies: list[bytes], *, task_status: TaskStatus[None]
) -> None:
    """Answer ``get`` in ``world`` with ``replies`` in turn (then the last again)."""
    nc = await connect(url, name="fence-responder")
    try:
        sub = await nc.subscribe(rpc(world, "get"))
        task_status.started()
        n = 0
        async for msg in sub.messages:
            await msg.respond(replies[min(n, len(replies) - 1)])
            n += 1
    finally:
        with anyio.CancelScope(shield=True):
            await nc.close()


CATCHING_UP = encode(
    RpcError(code="internal", message="projector is catching up", retry_after=0.05)
)


async def test_the_sdk_asks_a_catching_up_replica_again_until_it_answers(
    nats_url: str,
) -> None:
    world = unique_world("fence")
    answered = encode(BeliefReply(belief=None))
    async with anyio.create_task_group() as tg:
        await tg.start(
            _answering, nats_url, world, [CATCHING_UP, CATCHING_UP, answered]
        )
        async with worldline.connect(nats_url, world=world, agent="ada") as ada:
            assert await ada.get("b-missing") is None
        tg.cancel_scope.cancel()


async def test_a_failing_actor_is_a_server_error_a_lagging_one_unavailable(
    nats_url: str,
) -> None:
    world = unique_world("fence")
    failed = encode(RpcError(code="internal", message="projector failed: KeyError"))
    async with anyio.create_task_group() as tg:
        await tg.start(_answering, nats_url, world, [failed])
        async with worldline.connect(nats_url, world=world, agent="ada") as ada:
            with pytest.raises(worldline.ServerError, match="KeyError"):
                await ada.get("b-1")
        tg.cancel_scope.cancel()
    world = unique_world("fence")
    async with anyio.create_task_group() as tg:
        await tg.start(_answering, nats_url, world, [CATCHING_UP])
        async with worldline.connect(
            nats_url, world=world, agent="ada", request_timeout=0.5
        ) as ada:
            with pytest.raises(worldline.BusUnavailable, match="catching up"):
                await ada.get("b-1")
        tg.cancel_scope.cancel()

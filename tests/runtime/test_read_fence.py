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
from actors.registry import build
from actors.runtime import fence as fence_module
from actors.runtime.bus import connect
from actors.runtime.fence import StartFence
from protocols.messages import AddBelief, RpcError, encode
from protocols.subjects import MATERIALIZER_IN, MATERIALIZER_OPS_IN, ops
from tests.support import running, unique_world

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.nats

BACKLOG = 3000  # beliefs the projector misses while it is down
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
            for spec in (MATERIALIZER_OPS_IN, MATERIALIZER_IN):
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

"""Fetches capped in bytes (issue 18, part 4): a burst of large derived messages (as a
trust burst made before posteriors carried only what changed: many posteriors with
1,000 evidence items each) reaches the materializer through a real nats-server
without the server cutting it off as a slow consumer, and nothing is lost.

Before, a fetch asked for 256 messages whatever their size: 256 batch messages of up
to 512 KiB is 128 MiB, past the server's ``max_pending`` (64 MiB by default), and the
server closed the connection ("Slow Consumer Detected: MaxPending of ... Exceeded");
the issue saw it hundreds of times. Here the server's ``max_pending`` is 16 MiB, so a
burst of 60 MiB shows the same thing in seconds; each pull request now brings at most
:data:`~worldline.actors.runtime.bus.FETCH_BYTES`.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import anyio
import msgspec
import nats
import pytest

from tests.support import running, unique_world
from worldline.actors.registry import build
from worldline.actors.runtime import publish
from worldline.actors.runtime.bus import FETCH_BYTES, PENDING_REQUESTS, describe
from worldline.actors.runtime.declare import ensure_streams
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.actors.runtime.outbox import OutboxItem
from worldline.actors.runtime.publish import batched, publish_all
from worldline.actors.runtime.store import Store
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import (
    AddBelief,
    Belief,
    BeliefChanged,
    PosteriorUpdate,
    encode,
)
from worldline.protocols.subjects import STREAMS, derived, ops

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.nats

AT: Final = datetime(2026, 1, 1, tzinfo=UTC)
MAX_PENDING: Final = 16 * 1024 * 1024  # the server's, for this test (default 64 MiB)
BELIEFS: Final = 300
ITEMS: Final = 1000  # evidence items per posterior: about 200 KB each


def _posteriors(world: str) -> list[OutboxItem]:
    """``BELIEFS`` whole-list posteriors (as fusion sent them before) of ``ITEMS``
    evidence items each, as fusion's outbox holds them."""
    out = []
    for b in range(BELIEFS):
        belief_id = f"b-{b:04d}"
        evidence = [
            Evidence(
                id=f"ev-{n:04d}",
                belief_id=belief_id,
                direction="supports",
                kind="citation",
                source=f"store-{n}",
                observed_at=AT,
                text=f"listing {n}: the author list as this store prints it, "
                "with its edition and year",
                author="ada",
            )
            for n in range(ITEMS)
        ]
        belief = Belief(id=belief_id, text=f"Book {b} is by its listed authors.",
                        type="claim", author="ada", created_at=AT, updated_at=AT,
                        valid_from=AT, evidence_count=ITEMS)  # fmt: skip
        update = PosteriorUpdate(
            belief=belief, cause="op-add", cause_seq=1, evidence=evidence
        )
        out.append(
            OutboxItem(
                key=b"",
                subject=derived(world, "posterior", "0"),
                msg_id=f"posterior:{world}:{belief_id}:op-add",
                payload=encode(update),
            )
        )
    return out


def test_a_fetch_is_capped_in_bytes_below_what_the_server_lets_a_client_owe() -> None:
    assert PENDING_REQUESTS * FETCH_BYTES <= MAX_PENDING < 64 * 1024 * 1024
    assert describe(TimeoutError()) == "TimeoutError: TimeoutError()"
    assert describe(nats.errors.TimeoutError()).startswith("nats.errors.TimeoutError: ")


async def test_a_publish_timeout_says_what_came_back(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish whose PubAcks never come (here: a plain subscriber, not a stream,
    listens on the subject) fails with a reason, not an empty ``TimeoutError()``."""
    monkeypatch.setattr(publish, "PUBLISH_TIMEOUT", 0.3)
    nc = await nats.connect(nats_url)
    try:
        await nc.subscribe("nowhere.posterior")
        item = OutboxItem(key=b"", subject="nowhere.posterior", msg_id="m-1",
                          payload=b"x" * 1000)  # fmt: skip
        with pytest.raises(TimeoutError) as failed:
            await publish_all(nc.jetstream(), [item])
    finally:
        await nc.close()
    assert "0 of 1 PubAcks (1,000 bytes published)" in str(failed.value)
    assert describe(failed.value).startswith("TimeoutError: TimeoutError('0 of 1")


async def test_a_burst_of_large_posteriors_reaches_the_materializer_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = tmp_path / "server.conf"
    conf.write_text(f"max_pending: {MAX_PENDING}\n")
    world = unique_world("bigpost")
    items = _posteriors(world)
    size = sum(len(i.payload) for i in items)
    assert size > 3 * MAX_PENDING  # the burst: about 60 MiB
    caplog.set_level(logging.WARNING)
    with EmbeddedNats(tmp_path / "nats", config=conf) as server:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await ensure_streams(js, STREAMS)
            add = AddBelief(op_id="op-add", author="ada", at=AT, belief_id="b-0",
                            text="Book 0 is by its authors.", type="claim")  # fmt: skip
            await js.publish(ops(world, "ada"), encode(add))  # cause_seq 1 is real
            for start in range(0, len(items), 64):
                await publish_all(js, items[start : start + 64])
            sent = len(batched(items))
            info = await js.stream_info("WL_DERIVED")
            last = info.state.last_seq
            assert info.state.messages == sent
            async with running([build("materializer")], url=server.url,
                               data=tmp_path / "actors"):  # fmt: skip
                with anyio.fail_after(120):
                    while True:
                        consumer = await js.consumer_info("WL_DERIVED", "materializer")
                        if consumer.ack_floor.stream_seq >= last:
                            break
                        await anyio.sleep(0.2)
        finally:
            await nc.close()
        log = server.log_path.read_text(errors="replace")
    assert "Slow Consumer" not in log, log[-2000:]
    warned = [r.getMessage() for r in caplog.records]
    assert not [w for w in warned if "disconnected" in w or "failed" in w], warned
    store = Store(tmp_path / "actors" / "materializer", actor="materializer")
    try:
        with store.reader() as reader:
            held = list(reader.scan(f"belief/{world}/".encode()))
            assert len(held) == BELIEFS
            for _, raw in held:
                record = msgspec.msgpack.decode(raw, type=BeliefChanged)
                assert len(record.evidence) == ITEMS
    finally:
        store.close()

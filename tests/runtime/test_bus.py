"""Declarations against a real server: idempotent, drift updated or reported."""

from __future__ import annotations

import os
import time
import uuid
from typing import TYPE_CHECKING

import anyio
import msgspec
import nats
import pytest

from tests.runtime.test_store import AT, _deliveries
from tests.support import running
from worldline.actors.registry import build
from worldline.actors.runtime.bus import (
    RAW_MESSAGES,
    RAW_PULL_ENV,
    DeliveryGap,
    Puller,
    connect,
)
from worldline.actors.runtime.declare import ensure_consumer, ensure_streams
from worldline.actors.runtime.errors import BusUnavailable, ConfigDrift
from worldline.actors.runtime.publish import unbatched
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import PosteriorUpdate
from worldline.protocols.subjects import (
    MATERIALIZER_IN,
    STREAMS,
    ConsumerSpec,
    StreamSpec,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.nats


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"T_{tag}", f"t{tag}"


async def test_declarations_are_idempotent_and_drift_is_updated(nats_url: str) -> None:
    name, token = _names()
    stream = StreamSpec(name, (f"{token}.>",))
    spec = ConsumerSpec(stream, "d1", f"{token}.a", ack_wait=30.0, max_ack_pending=100)
    nc = await connect(nats_url, name="test")
    js = nc.jetstream()
    try:
        await ensure_streams(js, [stream])
        await ensure_streams(js, [stream])
        await ensure_consumer(js, spec)
        await ensure_consumer(js, spec)
        drifted = ConsumerSpec(
            stream, "d1", f"{token}.b", ack_wait=7.0, max_ack_pending=5
        )
        await ensure_consumer(js, drifted)
        info = await js.consumer_info(name, "d1")
        assert info.config.filter_subject == f"{token}.b"
        assert info.config.ack_wait == 7.0
        assert info.config.max_ack_pending == 5
        await ensure_streams(js, [StreamSpec(name, (f"{token}.>",), max_age=3600.0)])
        assert (await js.stream_info(name)).config.max_age == 3600.0
    finally:
        await nc.close()


async def test_unchangeable_drift_is_reported_not_kept(nats_url: str) -> None:
    name, token = _names()
    nc = await connect(nats_url, name="test")
    js = nc.jetstream()
    try:
        await ensure_streams(js, [StreamSpec(name, (f"{token}.>",))])
        with pytest.raises(ConfigDrift, match=r"retention.*refused"):
            await ensure_streams(
                js, [StreamSpec(name, (f"{token}.>",), retention="workqueue")]
            )
    finally:
        await nc.close()


async def test_unreachable_bus_fails_fast_and_clearly() -> None:
    started = time.monotonic()
    with pytest.raises(
        BusUnavailable, match=r"cannot reach NATS at nats://127.0.0.1:1"
    ):
        await connect("nats://127.0.0.1:1", name="test")
    assert time.monotonic() - started < 5


async def test_committed_outbox_is_published_on_restart(
    nats_url: str, tmp_path: Path
) -> None:
    # A materializer-shaped crash: fusion committed posteriors but died before
    # publishing them. On restart the runtime publishes them before consuming.
    world = f"outbox-{uuid.uuid4().hex[:8]}"
    fusion = build("fusion")
    store = Store(tmp_path / fusion.instance, actor=fusion.instance)
    deliveries = [
        d.__class__(d.seq, d.subject.replace("store-test", world), d.data)
        for d in _deliveries(1, 4)
    ]
    store.apply_batch(fusion.inputs[0], deliveries, AT)
    store.close()
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_streams(js, STREAMS)
    probe = await js.pull_subscribe(
        MATERIALIZER_IN.filter_subject.replace("*", world, 1),
        stream=MATERIALIZER_IN.stream.name,
    )
    async with running([fusion], url=nats_url, data=tmp_path):
        got: list[PosteriorUpdate] = []
        with anyio.fail_after(10):
            while len(got) < 3:
                try:
                    msgs = await probe.fetch(3, timeout=0.5)
                except TimeoutError:
                    continue
                got += [
                    msgspec.msgpack.decode(data, type=PosteriorUpdate)
                    for m in msgs
                    for _, data in unbatched(m)
                ]
    await nc.close()
    assert sorted(u.belief.id for u in got) == ["b-1", "b-2", "b-3"]
    reopened = Store(tmp_path / fusion.instance, actor=fusion.instance)
    assert reopened.pending_outbox() == []
    reopened.close()


async def test_the_pull_hands_over_batches_and_reports_a_lost_delivery(
    nats_url: str,
) -> None:
    name, token = _names()
    stream = StreamSpec(name, (f"{token}.>",))
    spec = ConsumerSpec(stream, "owned", f"{token}.>")
    nc = await connect(nats_url, name="test")
    js = nc.jetstream()
    try:
        await ensure_streams(js, [stream])
        await ensure_consumer(js, spec)
        for n in range(8):
            await js.publish(f"{token}.x", str(n).encode())
        puller = await Puller(nc, name, "owned", ordered=True).start()
        first = await puller.fetch(3, 1.0)
        assert [m.data for m in first] == [b"0", b"1", b"2"]
        # Another reader takes deliveries 4 and 5 of the same durable: for the owner
        # they are lost in flight, and it must not go on (acking past them).
        thief = await js.pull_subscribe_bind(durable="owned", stream=name)
        stolen = await thief.fetch(2, timeout=1)
        assert [m.data for m in stolen] == [b"3", b"4"]
        with pytest.raises(DeliveryGap, match="expected delivery 4"):
            await puller.fetch(3, 1.0)
        await puller.unsubscribe()
        # An unordered pull (replicas sharing a durable) takes what comes to it.
        await ensure_consumer(js, ConsumerSpec(stream, "shared", f"{token}.>"))
        shared = await Puller(nc, name, "shared").start()
        await (await js.pull_subscribe_bind(durable="shared", stream=name)).fetch(2)
        rest = await shared.fetch(10, 1.0)
        assert [m.data for m in rest] == [str(n).encode() for n in range(2, 8)]
        with pytest.raises(TimeoutError):
            await shared.fetch(10, 0.3)
        await shared.unsubscribe()
    finally:
        await nc.close()


async def test_the_pull_reads_deliveries_off_the_wire_and_from_a_plain_client_alike(
    nats_url: str,
) -> None:
    """worldline's client hands a puller's messages over raw (the installed nats-py
    takes them from its parser as the sink expects); a plain nats-py client's
    ``Msg`` objects give the same deliveries."""
    # (unless WORLDLINE_RAW_PULL=0 forces the fallback: .ci/nats-py-drift)
    assert RAW_MESSAGES or os.environ.get(RAW_PULL_ENV) == "0"
    name, token = _names()
    stream = StreamSpec(name, (f"{token}.>",))
    ours = await connect(nats_url, name="test")
    plain = await nats.connect(nats_url)
    js = ours.jetstream()
    try:
        await ensure_streams(js, [stream])
        for n in range(3):
            await js.publish(f"{token}.x", str(n).encode(), headers={"Wl-Batch": "2"})
        got = []
        for nc, durable in ((ours, "ours"), (plain, "plain")):
            await ensure_consumer(js, ConsumerSpec(stream, durable, f"{token}.>"))
            puller = await Puller(nc, name, durable, ordered=True).start()
            if nc is ours:
                sinks = ours._sinks  # type: ignore[attr-defined]
                assert (puller._sub._id in sinks) is RAW_MESSAGES
            msgs = await puller.fetch(10, 1.0)
            got.append(
                [
                    (m.subject, m.data, m.batch, m.stream_seq, m.consumer_seq)
                    for m in msgs
                ]
            )
            await msgs[-1].ack()
            await puller.unsubscribe()
        assert (
            got[0]
            == got[1]
            == [(f"{token}.x", str(n).encode(), "2", n + 1, n + 1) for n in range(3)]
        )
    finally:
        await plain.close()
        await ours.close()

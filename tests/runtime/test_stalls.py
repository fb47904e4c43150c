"""A batch that fails to commit, through the real consume loop on a real nats-server:
never skipped, a poison delivery dead-lettered alone, a full disk waited out without a
restart, and the stall shown by ``worldline status``.

Failures are injected into the store (a test cannot fill the disk or corrupt LMDB on
demand); everything else (fetches, acks, rebinding, dead letters) is the real thing.
"""

from __future__ import annotations

import contextlib
import io
import time
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import anyio
import lmdb
import msgspec
import nats
import pytest

import worldline
from tests.support import unique_world
from worldline.actors.registry import build
from worldline.actors.runtime.consume import run_actor
from worldline.actors.runtime.declare import ensure_streams
from worldline.actors.runtime.errors import StoreError
from worldline.actors.runtime.metrics import Registry
from worldline.actors.runtime.store import Store
from worldline.actors.runtime.supervise import run_actors
from worldline.cli import main
from worldline.ops.status import gather
from worldline.protocols.messages import AddBelief, DeadLetter, encode
from worldline.protocols.subjects import DLQ, STREAMS, dlq, ops

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from nats.js import JetStreamContext

    from worldline.actors.runtime.spec import ActorSpec

pytestmark = pytest.mark.nats

AT: Final = datetime(2026, 3, 1, tzinfo=UTC)
_LETTER = msgspec.msgpack.Decoder(DeadLetter)


def _op(n: int, text: str = "") -> bytes:
    return encode(
        AddBelief(
            op_id=f"op-{n}",
            author="ada",
            at=AT,
            belief_id=f"b-{n}",
            text=text or f"Belief number {n} holds.",
        )
    )


async def _publish_ops(js: JetStreamContext, world: str, texts: list[str]) -> None:
    for n, text in enumerate(texts, start=1):
        await js.publish(ops(world, "ada"), _op(n, text))


async def _lag(js: JetStreamContext, spec: ActorSpec) -> int:
    total = 0
    for inp in spec.inputs:
        info = await js.consumer_info(inp.consumer.stream.name, inp.consumer.durable)
        total += (info.num_pending or 0) + (info.num_ack_pending or 0)
    return total


async def _until(check: Callable[[], Any], within: float = 20.0) -> None:
    with anyio.fail_after(within):
        while True:
            if await check():
                return
            await anyio.sleep(0.1)


@contextlib.asynccontextmanager
async def _bus(url: str) -> AsyncIterator[JetStreamContext]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, STREAMS)  # so ops can be published before actors run
        yield js
    finally:
        await nc.close()


async def _letters(js: JetStreamContext, world: str, actor: str) -> list[Any]:
    try:
        info = await js.stream_info(DLQ.name, subjects_filter=dlq(world, actor))
    except nats.js.errors.NotFoundError:
        return []
    if not info.state.messages:
        return []
    sub = await js.pull_subscribe(dlq(world, actor), stream=DLQ.name)
    msgs = await sub.fetch(info.state.messages, timeout=2)
    await sub.unsubscribe()
    return list(msgs)


async def test_a_failed_batch_is_never_skipped_for_what_was_fetched_after_it(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack lost 255 beliefs this way: the projector's batch failed, the loop
    applied the rest of the fetch it held, and the failed batch was then skipped as
    already applied (lag 0, replay matching, beliefs never readable)."""
    world, n = unique_world(), 300
    fusion, materializer, projector = (build(a) for a in ("fusion", "materializer",
                                                          "projector"))  # fmt: skip
    async with _bus(nats_url) as js, anyio.create_task_group() as tg:
        await tg.start(partial(run_actors, [fusion, materializer], url=nats_url,
                               data=tmp_path))  # fmt: skip
        await _publish_ops(js, world, [f"Belief number {i} holds." for i in range(n)])

        async def through() -> bool:
            return await _lag(js, fusion) == 0 and await _lag(js, materializer) == 0

        await _until(through)
        changes = await js.stream_info("WL_STATE")
        assert changes.state.messages >= 2  # so the projector holds some back

        real = Store.apply_batch
        failed: list[int] = []

        def fails_once(self: Store, inp: Any, deliveries: Any, *a: Any,
                       **kw: Any) -> Any:  # fmt: skip
            if self.actor.startswith("projector") and not failed:
                failed.append(deliveries[0].seq)
                raise StoreError(f"{self.actor}: injected failure")
            return real(self, inp, deliveries, *a, **kw)

        monkeypatch.setattr(Store, "apply_batch", fails_once)
        # Eight items a transaction: one change-feed message per batch, the rest
        # of the fetch held for the next.
        await tg.start(partial(run_actor, projector, url=nats_url, data=tmp_path,
                               batch=8))  # fmt: skip

        async def caught_up() -> bool:
            return await _lag(js, projector) == 0

        await _until(caught_up)
        assert failed == [1]
        async with worldline.connect(nats_url, world=world, agent="ada") as w:
            assert len(await w.list(limit=1000)) == n
        tg.cancel_scope.cancel()


def _poisoned(poison: bytes) -> Callable[..., Any]:
    """A store whose transaction fails (as LMDB refusing a key would) whenever it
    would apply a delivery carrying ``poison``."""
    real = Store._apply_batch

    def apply(self: Store, inp: Any, deliveries: Any, now: Any, publish: bool,
              refuse: Any, *rest: Any) -> Any:  # fmt: skip
        if any(poison in d.data and d.seq not in refuse for d in deliveries):
            raise lmdb.BadValsizeError("mdb_put: MDB_BAD_VALSIZE: injected")
        return real(self, inp, deliveries, now, publish, refuse, *rest)

    return apply


async def test_a_poison_delivery_is_dead_lettered_and_the_rest_applies(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, fusion = unique_world(), build("fusion")
    texts = [f"Belief number {i} holds." for i in range(40)]
    texts[22] = "POISON belief."
    monkeypatch.setattr(Store, "_apply_batch", _poisoned(b"POISON"))
    async with _bus(nats_url) as js:
        await _publish_ops(js, world, texts)  # one fetch holds them all
        async with anyio.create_task_group() as tg:
            await tg.start(partial(run_actors, [fusion], url=nats_url, data=tmp_path))

            async def applied() -> bool:
                return await _lag(js, fusion) == 0

            started = time.monotonic()
            await _until(applied)
            took = time.monotonic() - started
            tg.cancel_scope.cancel()
        letters = await _letters(js, world, "fusion")
    (msg,) = letters
    letter = _LETTER.decode(msg.data)
    assert letter.stream_seq == 23
    assert letter.reason.startswith("unstorable: fusion: LMDB write failed")
    assert "MDB_BAD_VALSIZE" in letter.reason
    durable = fusion.inputs[0].consumer.durable
    assert msg.headers["Nats-Msg-Id"] == f"dlq:{durable}:23"
    assert took < 10  # one second chance, then halves without waiting
    store = Store(tmp_path / "fusion", actor="fusion")
    with store.reader() as reader:
        held = [reader.get(f"belief/{world}/b-{n}".encode()) for n in range(1, 41)]
    store.close()
    assert [n for n, v in enumerate(held, start=1) if v is None] == [23]


async def test_a_full_disk_stalls_shows_stalled_and_recovers_without_a_restart(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, fusion = unique_world(), build("fusion")
    real = Store._apply_batch
    full = [True]

    def no_room(self: Store, *args: Any) -> Any:
        if full[0]:
            raise lmdb.DiskError("mdb_txn_commit", 28)
        return real(self, *args)

    monkeypatch.setattr(Store, "_apply_batch", no_room)
    registry = Registry(heartbeat_interval=0.3)
    async with _bus(nats_url) as js:
        await _publish_ops(js, world, [f"Belief number {i} holds." for i in range(20)])
        async with anyio.create_task_group() as tg:
            await tg.start(partial(run_actors, [fusion], url=nats_url, data=tmp_path,
                                   metrics=registry))  # fmt: skip

            async def stalled() -> bool:
                report = await gather(nats_url, now=datetime.now(UTC))
                row = {r.instance: r for r in report.instances}["fusion"]
                return row.state == "stalled"

            await _until(stalled)
            report = await gather(nats_url, now=datetime.now(UTC))
            (inp,) = {r.instance: r for r in report.instances}["fusion"].inputs
            assert inp.stalled_since is not None
            assert inp.error is not None
            assert "no room to write" in inp.error
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = await anyio.to_thread.run_sync(
                    main, ["status", "--nats", nats_url]
                )
            assert code == 1  # an operator is needed
            assert "stalled: fusion fusion since" in out.getvalue()
            await anyio.sleep(3)  # several retries, backing off

            full[0] = False  # room again: no restart

            async def applied() -> bool:
                return await _lag(js, fusion) == 0

            await _until(applied)

            async def healthy() -> bool:
                report = await gather(nats_url, now=datetime.now(UTC))
                return {r.instance: r for r in report.instances}["fusion"].state == "ok"

            await _until(healthy)
            tg.cancel_scope.cancel()
        assert await _letters(js, world, "fusion") == []  # never dead-lettered
    store = Store(tmp_path / "fusion", actor="fusion")
    assert store.applied_seq(fusion.inputs[0].consumer.durable) == 20
    store.close()

"""The projector puts view rebuilds off while a backlog lasts (issue 14, item 6): the
runtime tells its finish step how much is still pending on the durable, the views
are rebuilt once the backlog ends (or a second after they went stale), and they end
exactly as a rebuild after every batch leaves them."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import msgspec
import nats
import numpy as np
import pytest

import worldline
from tests.core.test_crew import T0, Crew
from tests.runtime.test_crew import crew
from tests.support import running, unique_world
from worldline.actors.projector import index, views
from worldline.actors.registry import build
from worldline.actors.runtime.bus import Delivered
from worldline.actors.runtime.consume import _pending
from worldline.actors.runtime.declare import ensure_streams
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import Belief, BeliefChanged, encode
from worldline.protocols.subjects import (
    STREAMS,
    VIEWS,
    bucket_key,
    bucket_put,
    projector_in,
    state,
)

if TYPE_CHECKING:
    from worldline.actors.runtime.outbox import OutboxItem
    from worldline.actors.runtime.spec import Reader

(PROJECTOR,) = build("projector").inputs
_CARD = msgspec.msgpack.Decoder(index.Card)


def _agents(world: str) -> list[str]:
    return [e.id.split(":", 1)[1] for e in crew(world).entities
            if e.id.startswith("agent:")]  # fmt: skip


def _changes(world: str, n: int) -> list[tuple[str, bytes]]:
    """The example crew declared as ``world`` (the materializer's changes), then
    ``n`` belief changes (subject, payload), as the change feed carries them."""
    found = [
        (out.subject, encode(out.message))
        for out in Crew(world).declare(crew(world))
        if out.subject.startswith(state(world, ""))
    ]
    for i in range(n):
        belief = Belief(id=f"b{i}", text=f"convert soteria pilots to slas: {i}",
                        type="claim", author="ada", confidence=0.3 + i / (2 * n),
                        uncertainty=0.3 - i / (4 * n), created_at=T0,
                        updated_at=T0, version=100 + i)  # fmt: skip
        found.append((state(world, "belief"), encode(BeliefChanged(belief=belief))))
    return found


def _views(world: str, outbox: list[OutboxItem]) -> dict[str, list[bytes]]:
    """The views pushed to the ``wl-views`` bucket, by subject, in order."""
    keys = {bucket_put(VIEWS, bucket_key(world, a)) for a in _agents(world)}
    pushed: dict[str, list[bytes]] = {}
    for item in outbox:
        if item.subject in keys:
            pushed.setdefault(item.subject, []).append(item.payload)
    return pushed


def _held(reader: Reader) -> dict[bytes, bytes]:
    """The state, each card with the vector a read uses in place of the stored."""
    held = {}
    for key, value in reader.scan(b""):
        if key.startswith(b"card/"):
            c = _CARD.decode(value)
            vector = index.vector_of(c).astype(np.float32).tobytes()
            value = encode(msgspec.structs.replace(c, vector=vector))
        held[key] = value
    return held


def _deferrals(store: Store) -> list[bytes]:
    with store.reader() as r:
        return [k for k, _ in r.scan(b"viewsdeferred/")]


def test_views_wait_for_the_backlog_and_end_as_a_rebuild_per_batch_leaves_them() -> (
    None
):
    world = "deferral"
    changes = _changes(world, 30)
    deliveries = [Delivery(n, s, p) for n, (s, p) in enumerate(changes, 1)]
    with tempfile.TemporaryDirectory() as tmp:
        each = Store(Path(tmp) / "each", actor="projector")
        backlog = Store(Path(tmp) / "backlog", actor="projector")
        every_batch: list[OutboxItem] = []
        deferred: list[OutboxItem] = []
        for n, d in enumerate(deliveries):
            every_batch += each.apply_batch(PROJECTOR, [d], T0).outbox
            left = len(deliveries) - n - 1  # what JetStream would still hold
            deferred += backlog.apply_batch(PROJECTOR, [d], T0, pending=left).outbox
            if left:
                assert _views(world, deferred) == {}  # nothing rebuilt yet
                assert backlog.has_deferred(PROJECTOR)
        by_batch, at_end = _views(world, every_batch), _views(world, deferred)
        assert sum(map(len, by_batch.values())) > 3 * len(
            _agents(world)
        )  # old behaviour
        assert sorted(at_end) == sorted(by_batch)  # every agent's view, once
        assert all(len(p) == 1 for p in at_end.values())
        assert {k: p[-1] for k, p in by_batch.items()} == {
            k: p[0] for k, p in at_end.items()
        }
        with each.reader() as a, backlog.reader() as b:
            # Marks and deferrals gone too; cards written during the backlog left
            # their vectors out (embedded when read: the same bits).
            assert _held(a) == _held(b)
        assert not backlog.has_deferred(PROJECTOR)
        each.close()
        backlog.close()


def test_a_deferred_world_is_finished_when_the_durable_goes_idle() -> None:
    """The last batch of a backlog may carry nothing of the deferred world (or
    nothing applicable at all), and a restart may find a deferral: the consume
    loop's idle step finishes it, from the store, after a reopen too."""
    world = "idle"
    changes = _changes(world, 5)
    deliveries = [Delivery(n, s, p) for n, (s, p) in enumerate(changes, 1)]
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "s", actor="projector")
        result = store.apply_batch(PROJECTOR, deliveries, T0, pending=7)
        assert _views(world, result.outbox) == {}
        store.close()  # a crash here loses nothing: the deferral is committed
        store = Store(Path(tmp) / "s", actor="projector")
        assert store.has_deferred(PROJECTOR)
        # A redelivery (already applied) with nothing pending still finishes it.
        again = store.apply_batch(PROJECTOR, deliveries[-1:], T0, pending=0)
        assert len(_views(world, again.outbox)) == len(_agents(world))
        assert not store.has_deferred(PROJECTOR)
        assert not _deferrals(store)
        # Deferred again, then idle: finish_deferred rebuilds.
        more = _changes(world, 8)[-2:]
        late = [Delivery(100 + n, s, p) for n, (s, p) in enumerate(more)]
        assert not _views(world, store.apply_batch(PROJECTOR, late, T0, pending=3)
                          .outbox)  # fmt: skip
        idle = store.finish_deferred(PROJECTOR, T0)
        assert len(_views(world, idle.outbox)) == len(_agents(world))
        assert not store.has_deferred(PROJECTOR)
        assert store.finish_deferred(PROJECTOR, T0).outbox == []
        store.close()


def test_another_worlds_batch_finishes_a_deferred_world() -> None:
    a, b = "world-a", "world-b"
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "s", actor="projector")
        first = [Delivery(n, s, p) for n, (s, p) in enumerate(_changes(a, 3), 1)]
        assert not _views(a, store.apply_batch(PROJECTOR, first, T0, pending=9)
                          .outbox)  # fmt: skip
        # Still pending: world a waits (its stale marks are younger than a second).
        other = [Delivery(n, s, p) for n, (s, p) in enumerate(_changes(b, 2), 50)]
        step = store.apply_batch(PROJECTOR, other[:2], T0, pending=4)
        assert not _views(a, step.outbox)
        assert not _views(b, step.outbox)
        # The backlog ends with a batch of world b only: world a is finished too.
        last = store.apply_batch(PROJECTOR, other[2:], T0, pending=0)
        assert len(_views(a, last.outbox)) == len(_agents(a))
        assert len(_views(b, last.outbox)) == len(_agents(b))
        assert not store.has_deferred(PROJECTOR)
        store.close()


def test_a_view_lags_a_long_backlog_by_at_most_max_stale() -> None:
    world = "bounded"
    changes = _changes(world, 40)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "s", actor="projector")
        rebuilt_at = []
        step = timedelta(milliseconds=300)
        for n, (s, p) in enumerate(changes):
            now = T0 + n * step
            out = store.apply_batch(PROJECTOR, [Delivery(n + 1, s, p)], now,
                                    pending=1000).outbox  # fmt: skip
            if _views(world, out):
                rebuilt_at.append(n)
        # Never done with the backlog, yet rebuilt by the first batch that finds
        # the oldest change it has not shown a second old or more.
        assert rebuilt_at, "views never rebuilt during an endless backlog"
        firsts = [0] + [r + 1 for r in rebuilt_at[:-1]]  # oldest change not shown
        waits = [(r - f) * step for f, r in zip(firsts, rebuilt_at, strict=True)]
        assert all(views.MAX_STALE <= w < views.MAX_STALE + step for w in waits)
        assert (len(changes) - 1 - rebuilt_at[-1]) * step <= views.MAX_STALE + step
        store.close()


def test_pending_is_read_from_the_ack_reply() -> None:
    def msg(reply: str) -> Delivered:
        return Delivered(None, "s", reply, b"", None)  # type: ignore[arg-type]

    assert _pending(msg("$JS.ACK.WL_STATE.projector-0.1.42.7.1700000000000000000.3"))
    assert _pending(msg("$JS.ACK.S.c.1.42.7.1.1234")) == 1234
    assert _pending(msg("$JS.ACK.hub.ACC.S.c.1.42.7.1.56.rnd")) == 56
    assert _pending(msg("$JS.ACK.S.c.1.42.7.1.0")) == 0


@pytest.mark.nats
async def test_a_backlog_on_the_bus_pushes_each_view_once(
    nats_url: str, tmp_path: Path
) -> None:
    """600 changes waiting when the projector starts come in three fetches; the
    views are pushed once, when the last is applied (a rebuild per batch pushed each
    agent's view about three times), and the stored view is the one a read
    computes."""
    world = unique_world("backlog")
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, STREAMS, replicas=1)
        pushes = await nc.subscribe(bucket_put(VIEWS, bucket_key(world, "*")))
        for subject, payload in _changes(world, 0):
            await js.publish(subject, payload)
        for i in range(600):
            belief = Belief(id=f"b{i}", text=f"convert soteria pilots to slas: {i}",
                            type="claim", author="ada", confidence=0.8 - i / 1000,
                            uncertainty=0.1 + i / 1000, created_at=T0,
                            updated_at=T0 + timedelta(seconds=i),
                            version=10 + i)  # fmt: skip
            await js.publish(
                state(world, "belief"), encode(BeliefChanged(belief=belief))
            )
        async with running([build("projector")], url=nats_url, data=tmp_path):
            with anyio.fail_after(30):
                while True:
                    spec = projector_in("0")
                    info = await js.consumer_info(spec.stream.name, spec.durable)
                    if not (info.num_pending or info.num_ack_pending):
                        break
                    await anyio.sleep(0.05)
            await anyio.sleep(0.5)  # any later push would have arrived
            counts: dict[str, int] = {}
            while True:
                try:
                    got = await pushes.next_msg(timeout=0.2)
                except nats.errors.TimeoutError:
                    break
                counts[got.subject] = counts.get(got.subject, 0) + 1
            assert len(counts) == len(_agents(world))
            assert set(counts.values()) == {1}, counts
            async with worldline.connect(nats_url, world=world, agent="ada") as w:
                stored, read = await w.stored_view(), await w.view()
            enc = msgspec.msgpack.encode
            assert stored is not None
            assert enc(stored) == enc(read)
    finally:
        await nc.close()

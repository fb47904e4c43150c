"""The one consume loop every actor runs, and the actor's start and shutdown around it.

For each declared input: bind a durable pull consumer, fetch a batch, apply it in one
LMDB write transaction (in a worker thread), publish the committed outbox with
Nats-Msg-Id (outputs for one consumer packed into batches, see ``publish.batched``),
then settle: a durable this process owns acks the batch's last message (cumulative
acks), a shared one acks (accepted) or terms (dead-lettered) each message. Ack policy:
only after commit; a batch that fails to commit is retried in place, split to
dead-letter a delivery the store cannot apply (``attempts.py``), and nothing fetched
after it applies first; nothing is acked before its effect and its outputs are durable.

Shutdown: cancelling the task group stops fetching; cleanup (unsubscribe, drain, closing
LMDB) runs shielded and bounded to a few seconds.

Serving requests is ``serve.py``; where a batch applies (the event loop or a worker
thread) is ``pace.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import nats.errors

from worldline.actors.runtime.attempts import BatchAttempts
from worldline.actors.runtime.bus import (
    SHUTDOWN_GRACE,
    Delivered,
    Puller,
    describe,
)
from worldline.actors.runtime.declare import (
    ensure_buckets,
    ensure_consumer,
    ensure_streams,
    resume_consumer,
)
from worldline.actors.runtime.deliveries import delivery
from worldline.actors.runtime.errors import StoreError, StoreFull
from worldline.actors.runtime.fence import StartFence
from worldline.actors.runtime.heartbeat import run_heartbeat
from worldline.actors.runtime.lease import LeaseGate
from worldline.actors.runtime.lock import FolderLock
from worldline.actors.runtime.logs import bind_actor
from worldline.actors.runtime.metrics import Registry, bind_metrics
from worldline.actors.runtime.pace import Pace
from worldline.actors.runtime.patience import connect_patiently, connect_wait
from worldline.actors.runtime.prepare import prepared_input
from worldline.actors.runtime.publish import publish_all
from worldline.actors.runtime.serve import serve, serve_while_active
from worldline.actors.runtime.store import Store
from worldline.protocols.subjects import BUCKETS, STREAMS

if TYPE_CHECKING:
    from pathlib import Path

    from anyio.abc import TaskStatus
    from nats.aio.client import Client as NATS
    from nats.js import JetStreamContext

    from worldline.actors.runtime.metrics import ActorMetrics
    from worldline.actors.runtime.outbox import OutboxItem
    from worldline.actors.runtime.spec import ActorSpec, Input

__all__ = ["Clock", "run_actor", "utcnow"]

log = logging.getLogger("worldline.actor")

Clock = Callable[[], datetime]

FETCH_BATCH = (
    256  # in-flight limit per fetch (the consumer's max_ack_pending caps more)
)
FETCH_TIMEOUT = 1.0  # seconds a fetch waits for messages before trying again


def utcnow() -> datetime:
    """The wall clock, the only place the runtime reads it."""
    return datetime.now(UTC)


async def run_actor(
    spec: ActorSpec,
    *,
    url: str,
    data: Path,
    clock: Clock = utcnow,
    batch: int = FETCH_BATCH,
    metrics: Registry | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run one actor until cancelled; report started once every input and service binds.

    Args:
        spec: the actor's declaration (inputs, services, pure handlers).
        url: the NATS server URL.
        data: the folder holding this actor's LMDB store (``data/<instance>``).
        clock: wall clock injected into every handler call.
        batch: messages fetched (and committed) per batch.
        metrics: where this actor's counters go (one registry per process, served
            on ``/metrics`` when asked); its heartbeat interval. Default: a private one.

    Every JetStream call while starting (streams, buckets, durables, the lease) is
    retried while the server cannot serve it yet (``declare.answered``).

    Raises:
        BusUnavailable: NATS cannot be reached.
        FolderLocked: another process runs this actor instance on the same store.
        StoreError: the LMDB store cannot be opened.
        ConfigDrift: a stream or durable differs from its declaration and cannot be
            updated.
    """
    bind_actor(spec.instance)  # every line this task and its children log names it
    # One process per store: a second one would apply the same log a second time.
    lock = FolderLock(
        data / f"{spec.instance}.lock",
        what=f"the store of actor {spec.instance} ({data / spec.instance})",
        fix="stop that process first, or give this one its own --replica name or "
        "--data folder",
    ).acquire(command=f"worldline actor {spec.instance}", url=url)
    try:
        await _run_locked(spec, url, data, clock, batch, metrics, task_status)
    finally:
        lock.release()


async def _run_locked(
    spec: ActorSpec,
    url: str,
    data: Path,
    clock: Clock,
    batch: int,
    metrics: Registry | None,
    task_status: TaskStatus[None],
) -> None:
    store = Store(data / spec.instance, actor=spec.instance)
    try:
        if spec.upgrade is not None:
            # Before anything reads the store; LMDB write transactions stay on the
            # one thread that runs them.
            steps = await anyio.to_thread.run_sync(store.upgrade, spec.upgrade)
            if steps:
                log.info("%s: upgraded its store in %d steps", spec.instance, steps)
        # An actor may start before its server: the first connect waits for one.
        nc = await connect_patiently(
            url, name=f"worldline-{spec.instance}", wait=connect_wait()
        )
        try:
            js = nc.jetstream()
            await ensure_streams(js, STREAMS)
            await ensure_buckets(js, BUCKETS)
            registry = metrics or Registry()
            stats = registry.actor(spec, now=clock())
            bind_metrics(stats)  # the services time their answers into it
            async with anyio.create_task_group() as tg:
                gate = None
                if spec.lease:
                    gate = stats.lease = LeaseGate(spec.lease, spec.instance)
                    await tg.start(gate.run, js, partial(_activate, js, store, spec))
                pace = Pace()
                for inp in spec.inputs:
                    await tg.start(
                        _consume, nc, store, spec, inp, clock, batch, stats, gate, pace
                    )
                if gate is None:
                    # Reads wait until the inputs hold what they held at start.
                    fence = await StartFence.at_start(js, store, spec)
                    for service in spec.services:
                        await tg.start(serve, nc, store, service, fence)
                else:
                    await tg.start(serve_while_active, nc, store, spec.services, gate)
                interval = registry.heartbeat_interval
                await tg.start(run_heartbeat, js, store, stats, interval, clock)
                log.info("%s: consuming", spec.instance)
                stats.connected = lambda: nc.is_connected  # /readyz
                task_status.started()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_GRACE):
                await _close(nc)
    finally:
        store.close()


async def _close(nc: NATS) -> None:
    """Flush what is buffered (acks are fire-and-forget publishes), then close.

    Not ``drain()``: it waits for every subscription's pending queue to empty, which a
    cancelled pull subscription never does.
    """
    try:
        await nc.flush(timeout=2)
    except (nats.errors.Error, OSError, TimeoutError) as exc:
        log.debug("final flush failed: %s", describe(exc))
    await nc.close()


async def _consume(
    nc: NATS,
    store: Store,
    spec: ActorSpec,
    inp: Input[Any],
    clock: Clock,
    batch: int,
    stats: ActorMetrics,
    gate: LeaseGate | None,
    pace: Pace,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    js = nc.jetstream()
    sub = await _bind(nc, store, inp)
    if gate is None:  # with a lease, the holder settles leftovers when it activates
        await _publish_committed(js, store, store.pending_outbox())
    reconnects = nc.stats["reconnects"]
    held: list[Delivered] = []  # a standby's fetched messages beyond what it may apply
    durable = inp.consumer.durable
    task_status.started()
    while True:
        if inp.skip_applied and nc.stats["reconnects"] != reconnects:
            # Fetches answered while we were away are lost in flight; JetStream would
            # redeliver them only after ack_wait, behind newer messages. Rebind at
            # the store's applied sequence so the order stays the stream's.
            reconnects = nc.stats["reconnects"]
            held = []
            await _unbind(sub)
            sub = await _bind(nc, store, inp)
        if held:
            msgs, held = held, []
        else:
            try:
                msgs = await sub.fetch(batch, FETCH_TIMEOUT)
            except TimeoutError:  # nothing arrived within FETCH_TIMEOUT
                if inp.finish is not None and gate is None:
                    # Idle: finish what the backlog's batches put off. (Behind a
                    # lease, the next batch does: a standby must not publish.)
                    await _finish_deferred(js, store, spec, inp, clock, stats)
                continue
            except nats.errors.Error as exc:
                log.warning(
                    "%s: fetch failed (%s); retrying", spec.instance, describe(exc)
                )
                if inp.skip_applied:
                    # Deliveries lost in flight (a hole in the consumer sequence: a
                    # server or the durable's leader went away): rebind at the store's
                    # sequence, as after a reconnect.
                    reconnects = -1
                await anyio.sleep(0.5)
                continue
        if not msgs:
            continue
        msgs, held = _bounded(msgs, batch)
        publish = gate is None or gate.active
        if gate is not None and not publish:
            # Standing by: apply only what the holder has published, send nothing.
            limit = max(
                gate.follow_limit(inp.consumer.stream.name),
                store.applied_seq(inp.consumer.durable),
            )
            beyond = [m for m in msgs if m.stream_seq > limit]
            msgs = [m for m in msgs if m.stream_seq <= limit]
            held = beyond + held
            if beyond:
                await gate.wait_changed(FETCH_TIMEOUT)
            if not msgs:
                continue
        deliveries = [delivery(m.stream_seq, m.subject, m.data, m.batch) for m in msgs]
        started = time.perf_counter()
        now = clock()
        # The input's optional async prepare step, outside the write transaction.
        prepared = await prepared_input(inp, msgs, deliveries, now, js=js)
        # Apply the batch, in parts if it must be (see attempts.py): every delivery
        # is committed or dead-lettered, in order, before anything fetched after
        # it; a failed part is retried here, never dropped for a later fetch.
        attempts = BatchAttempts([d.seq for d in deliveries])
        while (part := attempts.next()) is not None:
            lo, hi = part
            apply = partial(
                store.apply_batch,
                prepared,
                deliveries[lo:hi],
                now,
                publish=publish,
                refuse=attempts.refuse,
                pending=_pending(msgs[hi - 1]),
            )
            items = sum(_size(m) for m in msgs[lo:hi])
            applying = time.perf_counter()
            try:
                heavy = inp.heavy is not None and any(
                    inp.heavy(d.data) for d in deliveries[lo:hi]
                )
                if not heavy and pace.inline(durable, items):
                    result = apply()
                else:
                    result = await pace.in_thread(apply)
            except StoreError as exc:
                outcome = attempts.failed(str(exc), no_room=isinstance(exc, StoreFull))
                _stalled(stats, durable, exc, clock)
                log.warning(
                    "%s: batch of %s (sequences %d-%d) not applied: %s; %s",
                    spec.instance,
                    durable,
                    deliveries[lo].seq,
                    deliveries[hi - 1].seq,
                    exc,
                    outcome.action,
                )
                if outcome.wait:
                    # Keep what we hold from being redelivered meanwhile.
                    await _in_progress([*msgs[lo:], *held])
                    await anyio.sleep(outcome.wait)
                continue
            attempts.committed()
            stats.inputs[durable].stalled_since = None
            stats.inputs[durable].error = ""
            pace.note(durable, items, time.perf_counter() - applying)
            if gate is None:
                await _publish_committed(js, store, result.outbox)
            elif not publish:
                pass  # a standby's batch: no outputs were staged
            elif gate.active:
                await _publish_committed(js, store, result.outbox)
                gate.note_published(inp.consumer.stream.name, deliveries[hi - 1].seq)
            else:
                # The lease lapsed mid-batch: the outputs wait in the outbox until
                # this replica renews in the same term (sent then) or another
                # replica takes over (dropped: the new holder sends its own).
                gate.strand()
            await _settle(msgs[lo:hi], result.accepted, cumulative=inp.skip_applied)
            seconds = time.perf_counter() - started
            stats.record(durable, result.accepted, seconds, msgs[lo].reply)


def _pending(msg: Delivered) -> int:
    """What JetStream still held for the durable when it delivered ``msg``: the last
    token of the ack reply (``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.
    <ts>.<pending>``, or the form with a domain and account hash, which may add a
    random token after it); 0 when the reply is not that."""
    tokens = msg.reply.split(".")
    token = tokens[8] if len(tokens) == 9 else tokens[10] if len(tokens) >= 11 else ""
    return int(token) if token.isdigit() else 0


async def _finish_deferred(
    js: JetStreamContext,
    store: Store,
    spec: ActorSpec,
    inp: Input[Any],
    clock: Clock,
    stats: ActorMetrics,
) -> None:
    """Run the input's finish for the worlds whose finish deferred work while a
    backlog lasted (the batch that ended it usually did already; this covers a
    backlog whose last batch touched nothing, and a restart). A store failure is
    reported and retried at the next idle fetch."""
    if not await anyio.to_thread.run_sync(store.has_deferred, inp):
        return
    try:
        result = await anyio.to_thread.run_sync(store.finish_deferred, inp, clock())
    except StoreError as exc:
        _stalled(stats, inp.consumer.durable, exc, clock)
        log.warning("%s: deferred finish of %s not applied: %s; retrying when idle",
                    spec.instance, inp.consumer.durable, exc)  # fmt: skip
        return
    await _publish_committed(js, store, result.outbox)


def _stalled(stats: ActorMetrics, durable: str, exc: StoreError, clock: Clock) -> None:
    """Report the failing batch in the heartbeat (``worldline status``: stalled)."""
    mine = stats.inputs[durable]
    if mine.stalled_since is None:
        mine.stalled_since = clock()
    mine.error = str(exc)[:1000]


async def _in_progress(msgs: list[Delivered]) -> None:
    for msg in msgs:
        try:
            await msg.in_progress()
        except nats.errors.Error as exc:
            log.debug("in_progress failed: %s", describe(exc))
            return


def _bounded(
    msgs: list[Delivered], items: int
) -> tuple[list[Delivered], list[Delivered]]:
    """Split fetched messages into what one transaction applies (about ``items``
    outputs: a batch message counts its size) and what waits for the next one. A
    fetch of batches could otherwise carry a hundred times the fetch size, and one
    transaction would hold it all (and a shutdown would wait for it)."""
    weight = 0
    for n, msg in enumerate(msgs, start=1):
        weight += _size(msg)
        if weight >= items:
            return msgs[:n], msgs[n:]
    return msgs, []


def _size(msg: Delivered) -> int:
    try:
        return max(1, int(msg.batch or 1))
    except ValueError:  # a forged header: the store dead-letters what it carries
        return 1


async def _activate(
    js: JetStreamContext, store: Store, spec: ActorSpec, same_term: bool
) -> dict[str, int]:
    """Settle committed but unsent outputs as this replica starts to hold the lease,
    and return what it has published per input stream (its watermark)."""
    pending = await anyio.to_thread.run_sync(store.pending_outbox)
    if same_term:
        await _publish_committed(js, store, pending)
    elif pending:
        log.info(
            "%s: dropping %d outputs of an earlier term (their holder sent them)",
            spec.instance,
            len(pending),
        )
        await anyio.to_thread.run_sync(store.clear_outbox, [i.key for i in pending])
    return {
        inp.consumer.stream.name: store.applied_seq(inp.consumer.durable)
        for inp in spec.inputs
    }


async def _bind(nc: NATS, store: Store, inp: Input[Any]) -> Puller:
    """Bind the input's pull subscription.

    A durable this process owns (``skip_applied``) is re-created to start right after
    the last sequence its store applied: the store, not the server's ack state, says
    where to resume. Messages fetched by a process that died before committing are
    then delivered again first, in stream order, instead of after ``ack_wait`` behind
    newer ones (which the applied-sequence check would have skipped: lost).
    Replicas that share a durable keep it as declared.
    """
    js = nc.jetstream()
    if inp.skip_applied:
        start = await anyio.to_thread.run_sync(store.applied_seq, inp.consumer.durable)
        await resume_consumer(js, inp.consumer, start + 1)
    else:
        await ensure_consumer(js, inp.consumer)
    return await Puller(
        nc, inp.consumer.stream.name, inp.consumer.durable, ordered=inp.skip_applied
    ).start()


async def _unbind(sub: Puller) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_GRACE):
        try:
            await sub.unsubscribe()
        except nats.errors.Error as exc:
            log.debug("unsubscribe failed: %s", describe(exc))


async def _settle(
    msgs: list[Delivered], accepted: list[bool], *, cumulative: bool
) -> None:
    """Ack what was applied, term what was dead-lettered. A durable this process
    owns acks cumulatively: one ack of the batch's last message settles it all (the
    store, not the ack, says what was applied; dead letters are in the DLQ)."""
    if cumulative:
        await max(msgs, key=lambda m: m.stream_seq).ack()
        return
    for msg, ok in zip(msgs, accepted, strict=True):
        if ok:
            await msg.ack()
        else:
            await msg.term()


async def _publish_committed(
    js: JetStreamContext, store: Store, items: list[OutboxItem]
) -> None:
    """Publish committed outputs, retrying until JetStream confirms them all."""
    delay = 0.2
    while items:
        try:
            await publish_all(js, items)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning(
                "%s: publishing %d committed messages failed (%s); retrying in %.1fs",
                store.actor,
                len(items),
                describe(exc),
                delay,
            )
            await anyio.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        await anyio.to_thread.run_sync(store.clear_outbox, [i.key for i in items])
        return

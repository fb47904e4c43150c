"""The optional prepare step of an input: async work per delivery (a model call, say)
run after the fetch and before the batch's LMDB write transaction, never inside it.

Each delivery that decodes is prepared in its own task, at most
``Input.prepare_concurrency`` at once, each cut off after ``Input.prepare_timeout``
seconds. A prepare that raises or times out is logged with its reason and hands the
handler :class:`~worldline.actors.runtime.spec.Unprepared` instead of a result, so the
handler decides what to do (the extractor falls back to its deterministic reading); an
input that does not decode is left to the store, which dead-letters it. While the batch
is being prepared, every fetched message is marked in progress every third of the
consumer's ``ack_wait``, so slow work is not redelivered behind our back.

The optional ``Input.prepare_batch`` step then runs once for the whole batch, given
the bus and the payload of every message it carries (batch messages unpacked). It is
retried until it returns (each failure logged, the batch marked in progress between
attempts): the handler never runs without its result, so a check that depends on it
is never skipped because the bus was slow to answer.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec
import nats.errors

from worldline.actors.runtime.spec import Context, Input, Reader, Step, Unprepared
from worldline.protocols.messages import decode_batch
from worldline.protocols.subjects import author_of, world_of

if TYPE_CHECKING:
    from datetime import datetime

    from nats.js import JetStreamContext

    from worldline.actors.runtime.bus import Delivered
    from worldline.actors.runtime.deliveries import Delivery
    from worldline.actors.runtime.spec import BatchPrepare

__all__ = ["prepared_input"]

log = logging.getLogger("worldline.actor")


# Seconds between attempts of a failing ``prepare_batch`` (doubling up to the last).
BATCH_RETRY: Final = (0.5, 5.0)


async def prepared_input(
    inp: Input[Any],
    msgs: list[Delivered],
    deliveries: list[Delivery],
    now: datetime,
    *,
    js: JetStreamContext | None = None,
) -> Input[Any]:
    """``inp`` with a handler that sees, in ``Context.prepared``, what ``inp.prepare``
    returned for each of ``deliveries`` (fetched as ``msgs``) and, in
    ``Context.batch_prepared``, what ``inp.prepare_batch`` returned for them all.

    Raises:
        ValueError: ``inp`` has a ``prepare_batch`` step but no bus (``js``) was
            given to run it with.
    """
    inp = await _each_prepared(inp, msgs, deliveries, now)
    if inp.prepare_batch is None:
        return inp
    if js is None:
        raise ValueError(
            f"input {inp.consumer.durable} has a prepare_batch step: pass the bus "
            "(js=) to prepared_input"
        )
    result = await _batch_prepared(
        inp.prepare_batch, inp.consumer.durable, msgs, deliveries, js
    )
    handle = inp.handle

    def with_batch(reader: Reader, message: Any, ctx: Context) -> Step:
        return handle(
            reader, message, msgspec.structs.replace(ctx, batch_prepared=result)
        )

    return dataclasses.replace(inp, handle=with_batch)


async def _batch_prepared(
    prepare_batch: BatchPrepare,
    durable: str,
    msgs: list[Delivered],
    deliveries: list[Delivery],
    js: JetStreamContext,
) -> Any:
    """What ``prepare_batch`` returns for ``deliveries``, retried until it does."""
    payloads = _payloads(deliveries)
    delay, longest = BATCH_RETRY
    while True:
        try:
            return await prepare_batch(js, payloads)
        except Exception as exc:
            log.warning(
                "%s: prepare_batch failed (%s: %s); retrying in %.1fs",
                durable,
                type(exc).__name__,
                exc,
                delay,
            )
        for msg in msgs:
            try:
                await msg.in_progress()
            except nats.errors.Error as exc:
                log.debug("in_progress failed: %s", exc)
        await anyio.sleep(delay)
        delay = min(delay * 2, longest)


def _payloads(deliveries: list[Delivery]) -> list[bytes]:
    """The payload of every message ``deliveries`` carry: a batch's items unpacked
    (one that does not decode is left to the store, which dead-letters it)."""
    out: list[bytes] = []
    for d in deliveries:
        if not d.batch:
            out.append(d.data)
            continue
        try:
            out.extend(payload for _, payload in decode_batch(d.data))
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            continue
    return out


async def _each_prepared(
    inp: Input[Any], msgs: list[Delivered], deliveries: list[Delivery], now: datetime
) -> Input[Any]:
    prepare = inp.prepare
    if prepare is None:
        return inp
    results: dict[int, Any] = {}
    limiter = anyio.CapacityLimiter(max(1, inp.prepare_concurrency))

    async def one(d: Delivery) -> None:
        if d.batch:  # no input prepares a batch: the store unpacks and refuses it
            return
        try:
            message = inp.decoder.decode(d.data)
            ctx = Context(
                world=world_of(d.subject),
                author=author_of(d.subject),
                subject=d.subject,
                seq=d.seq,
                now=now,
            )
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return  # the store dead-letters it with the reason
        except ValueError:
            return
        async with limiter:
            with anyio.move_on_after(inp.prepare_timeout) as scope:
                try:
                    results[d.seq] = await prepare(message, ctx)
                except Exception as exc:
                    reason = f"prepare failed: {type(exc).__name__}: {exc}"
                    log.warning("%s seq %d: %s", d.subject, d.seq, reason)
                    results[d.seq] = Unprepared(reason)
            if scope.cancelled_caught:
                reason = f"prepare timed out after {inp.prepare_timeout:g}s"
                log.warning("%s seq %d: %s", d.subject, d.seq, reason)
                results[d.seq] = Unprepared(reason)

    async with anyio.create_task_group() as tg:
        tg.start_soon(_keep_alive, msgs, inp.consumer.ack_wait / 3)
        async with anyio.create_task_group() as work:
            for d in deliveries:
                work.start_soon(one, d)
        tg.cancel_scope.cancel()
    handle = inp.handle

    def with_prepared(reader: Reader, message: Any, ctx: Context) -> Step:
        return handle(
            reader, message, msgspec.structs.replace(ctx, prepared=results.get(ctx.seq))
        )

    return dataclasses.replace(inp, handle=with_prepared)


async def _keep_alive(msgs: list[Delivered], every: float) -> None:
    """Mark ``msgs`` in progress every ``every`` seconds until cancelled."""
    while True:
        await anyio.sleep(every)
        for msg in msgs:
            try:
                await msg.in_progress()
            except nats.errors.Error as exc:
                log.debug("in_progress failed: %s", exc)

"""The request/reply side of an actor: answer each service's requests on its queue
group, reading the store in a bounded set of worker threads.

Only a plain ``_INBOX.`` reply subject (or the ``_R_.`` one the server maps a request
that crossed a service import to) is answered (no confused deputy); a replica behind
its start fence answers "catching up"; a replica behind a lease serves only while it
holds it.

Who asked (:func:`requester`) is what the server vouches for on a secured deploy (the
``Nats-Request-Info`` header, see ``requester.py``), never the reply subject; on the
open bus nothing is vouched for. A service whose requests read as an agent
(``Service.reads_as``) is refused for an attested requester that is another agent.
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import msgspec
import nats.errors

from worldline.actors.runtime.bus import SHUTDOWN_GRACE, valid_subject
from worldline.actors.runtime.metrics import observe_rpc
from worldline.actors.runtime.requester import ANONYMOUS, Requester, attested
from worldline.protocols.messages import Message, RpcError, encode
from worldline.protocols.subjects import is_reply_subject, world_of

if TYPE_CHECKING:
    from collections.abc import Iterator

    from anyio.abc import TaskStatus
    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg

    from worldline.actors.runtime.fence import StartFence
    from worldline.actors.runtime.lease import LeaseGate
    from worldline.actors.runtime.spec import Service
    from worldline.actors.runtime.store import Store

__all__ = [
    "READ_THREADS",
    "answering_for",
    "requester",
    "serve",
    "serve_while_active",
]

log = logging.getLogger("worldline.actor")


async def serve_while_active(
    nc: NATS,
    store: Store,
    services: tuple[Service[Any], ...],
    gate: LeaseGate,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Answer the services only while holding the lease (a standby's state lags).
    Reports started once a replica that holds the lease already serves."""
    if not gate.active:
        task_status.started()
        task_status = anyio.TASK_STATUS_IGNORED
    while True:
        await gate.wait_active(True)
        async with anyio.create_task_group() as tg:
            for service in services:
                await tg.start(serve, nc, store, service)
            task_status.started()
            task_status = anyio.TASK_STATUS_IGNORED
            await gate.wait_active(False)
            tg.cancel_scope.cancel()


async def serve(
    nc: NATS,
    store: Store,
    service: Service[Any],
    fence: StartFence | None = None,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    sub = await nc.subscribe(service.subject, queue=service.queue)
    # Connected with credentials: the server vouches for who asks (see requester.py).
    secured = bool(getattr(nc, "authenticated", False))
    threads = _read_threads(store)
    # Requests in flight for this service: when all are busy the loop stops taking
    # more (nats-py buffers, then drops as a slow consumer: the client times out)
    # instead of holding an unbounded number of waiting tasks.
    in_flight = anyio.Semaphore(2 * READ_THREADS)
    task_status.started()
    try:
        async with anyio.create_task_group() as tg:
            async for msg in sub.messages:
                if not is_reply_subject(msg.reply):
                    # No reply inbox (nothing to answer), or a reply subject that
                    # names a stream, bucket or JetStream API call: answering there
                    # would act with this actor's rights on the requester's behalf
                    # (a confused deputy).
                    if msg.reply:
                        log.warning(
                            "%s: refused to answer on %r (not an _INBOX reply subject)",
                            store.actor,
                            msg.reply[:200],
                        )
                    continue
                if fence is not None and (behind := await fence.hold()) is not None:
                    with contextlib.suppress(nats.errors.Error):
                        await _respond(msg, encode(behind))
                    continue
                await in_flight.acquire()
                asker = attested(msg.headers) if secured else ANONYMOUS
                tg.start_soon(_reply, msg, store, service, threads, in_flight, asker)
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_GRACE):
            await sub.unsubscribe()


READ_THREADS = 4  # worker threads per actor answering requests at once
_limiters: weakref.WeakKeyDictionary[Store, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def _read_threads(store: Store) -> anyio.CapacityLimiter:
    """The worker threads one actor's requests share (all its services): a flood of
    reads can take these, never every thread the runtime has (its consume loop
    applies batches in worker threads too)."""
    limiter = _limiters.get(store)
    if limiter is None:
        limiter = _limiters[store] = anyio.CapacityLimiter(READ_THREADS)
    return limiter


async def _reply(
    msg: Msg,
    store: Store,
    service: Service[Any],
    threads: anyio.CapacityLimiter,
    in_flight: anyio.Semaphore,
    asker: Requester = ANONYMOUS,
) -> None:
    """Answer one request. The read (its LMDB read transaction opens and closes in
    the same worker thread) and the encoding run off the event loop, so a long read
    holds up neither the actor's consuming nor its lease renewals."""
    started = time.perf_counter()
    try:
        data = await anyio.to_thread.run_sync(
            _answer_bytes,
            store,
            service,
            msg.subject,
            msg.data,
            asker,
            limiter=threads,
        )
        if data is not None:
            await _respond(msg, data)
    except nats.errors.Error as exc:  # the requester went away, or the connection
        log.debug("%s: could not answer on %s: %s", store.actor, msg.subject, exc)
    finally:
        in_flight.release()
        observe_rpc(service.subject, time.perf_counter() - started)


async def _respond(msg: Msg, data: bytes) -> None:
    """Send the encoded answer; one larger than the server's max_payload (it would
    have raised out of the serve loop and stopped the actor) becomes a clear error."""
    try:
        await msg.respond(data)
    except nats.errors.MaxPayloadError:
        log.warning("answer on %s too large (%d bytes)", msg.subject, len(data))
        error = RpcError(
            code="invalid",
            message=f"the answer on {msg.subject} is {len(data):,} bytes, more than "
            "the server's max_payload; ask for less (a smaller limit or a filter)",
        )
        await msg.respond(encode(error))


# Who asked the request being answered in this thread, as the server vouches for it:
# for a service that bounds what one caller may hold or owns (the simulator's
# sessions). Read it with :func:`requester`.
_REQUESTER: ContextVar[Requester] = ContextVar("worldline_requester", default=ANONYMOUS)


def requester() -> Requester:
    """Who asked the request being answered: on a secured deploy the attested agent
    (or the operator, from inside the actors' account); on the open bus (and outside
    a request) an unattested requester, which a service replaces with the agent the
    body claims (``Requester.or_claim``)."""
    return _REQUESTER.get()


@contextlib.contextmanager
def answering_for(asker: Requester) -> Iterator[None]:
    """Answer as if ``asker`` had asked (what the serve loop does around each
    request): for a service called outside the bus, in tests and tools."""
    token = _REQUESTER.set(asker)
    try:
        yield
    finally:
        _REQUESTER.reset(token)


def _answer_bytes(
    store: Store,
    service: Service[Any],
    subject: str,
    data: bytes,
    asker: Requester = ANONYMOUS,
) -> bytes | None:
    """The encoded answer, if any (in a worker thread)."""
    with answering_for(asker):
        reply = _answer(store, service, subject, data, asker)
    return None if reply is None else encode(reply)


def _answer(
    store: Store,
    service: Service[Any],
    subject: str,
    data: bytes,
    asker: Requester = ANONYMOUS,
) -> Message | None:
    if not valid_subject(subject):
        return RpcError(
            code="invalid",
            message=f"the subject {subject!r} is not valid UTF-8; ask on "
            "wl.<world>.rpc.<verb> with a world name of letters, digits, - and _",
        )
    try:
        request = service.decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return RpcError(code="invalid", message=f"bad request on {subject}: {exc}")
    except RecursionError:
        return RpcError(code="invalid", message=f"bad request on {subject}: too deep")
    agent = service.reads_as(request) if service.reads_as is not None else ""
    if agent and not asker.may_read_as(agent):
        return RpcError(
            code="invalid",
            message=f"{asker.label()!r} may not read as agent {agent!r} on {subject}: "
            "on a secured deploy an agent reads its own view and worldview only "
            "(ask with your own agent name, or with the operator's credentials)",
        )
    try:
        with store.reader() as reader:
            return service.serve(reader, request, world_of(subject))
    except Exception as exc:
        log.exception("%s: serving %s failed", store.actor, subject)
        return RpcError(code="internal", message=f"{store.actor} failed: {exc!r}")

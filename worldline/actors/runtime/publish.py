"""Publish an actor's committed outputs: pipelined, each with its Nats-Msg-Id, packed
into batches where the subject allows (:func:`batched`), and unpacked again by readers
outside the runtime (:func:`unbatched`).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api

from worldline.actors.runtime.declare import ensure_consumer
from worldline.actors.runtime.errors import ConfigDrift
from worldline.actors.runtime.preempt import CHECKED, stored_as_ours
from worldline.protocols.messages import BatchItems, decode_batch, encode_batch
from worldline.protocols.subjects import (
    BATCH_HEADER,
    PREFIX,
    batch_subject,
    inbox_in,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg

    from worldline.actors.runtime.outbox import OutboxItem

__all__ = [
    "BATCH_BYTES",
    "BATCH_ITEMS",
    "IN_FLIGHT",
    "PUBLISH_TIMEOUT",
    "SEND_EVERY",
    "batched",
    "open_inboxes",
    "publish_all",
    "unbatched",
]


PUBLISH_TIMEOUT = 5.0  # seconds without a PubAck before a batch is retried
BATCH_BYTES = 512 * 1024  # payload bytes per batch message (the bus caps one at 1 MiB)
BATCH_ITEMS = (
    256  # outputs per batch message (a consumer applies about this many at once)
)


# Publishes awaiting their PubAck at once, per call (as nats-py's publish_async caps).
IN_FLIGHT = 4000
# Messages queued before the socket gets them: the first one goes at once (the first
# inbox message of a fan-out is what an agent waits for), then every this many, so
# the server stores while the rest are still being written.
SEND_EVERY = 64

log = logging.getLogger("worldline.actor")
OPEN_INBOX_TIMEOUT = 5.0  # seconds to open an agent's inbox durable before giving up
OPEN_INBOX_AT_ONCE = 32  # inbox durables opened concurrently (each a round trip or two)
# The inbox subjects whose durable each connection has opened.
_opened: weakref.WeakKeyDictionary[object, set[str]] = weakref.WeakKeyDictionary()
# Subjects seen that name no inbox (the change feed's, say), so as not to split
# them again for every message; forgotten past this many.
_no_inbox: set[str] = set()
_NO_INBOX_HELD = 4096


async def open_inboxes(js: JetStreamContext, subjects: Iterable[str]) -> None:
    """Open the durable of each agent inbox among ``subjects`` (``wl.W.inbox.A``),
    once per inbox and connection: :func:`publish_all` opens them right after the
    first messages there, before anything else of the batch (its change feed, which
    says the op was applied) goes out.

    On a secured deploy agents create no consumer: a create request carries its
    config in the body, so a right to create one's own durable is also a right to
    create it as a push consumer aimed at any subject of the actors' account. The
    materializer, which writes the inboxes, opens them instead (a pull durable
    filtered to the inbox). A durable the server does not confirm in time is logged
    and tried again on the next publish there; the messages wait in the stream
    meanwhile (the durable delivers from the first one).

    Up to :data:`OPEN_INBOX_AT_ONCE` are opened concurrently: the first write a
    world of 500 agents propagates opens 500 durables, a round trip or two each."""
    done = _opened.setdefault(js._nc, set())
    wanted = {subject: None for subject in subjects if _unopened(subject, done)}
    if not wanted:
        return
    if len(wanted) == 1:
        await _open_inbox(js, next(iter(wanted)), done)
        return
    limiter = anyio.CapacityLimiter(OPEN_INBOX_AT_ONCE)

    async def opened(subject: str) -> None:
        async with limiter:
            await _open_inbox(js, subject, done)

    async with anyio.create_task_group() as tg:
        for subject in wanted:
            tg.start_soon(opened, subject)


def _unopened(subject: str, done: set[str]) -> bool:
    """Whether ``subject`` is an agent's inbox whose durable is not open yet."""
    # Checked first: this runs for every message published.
    if subject in done or subject in _no_inbox:
        return False
    if _inbox_of(subject) is None:
        if len(_no_inbox) >= _NO_INBOX_HELD:
            _no_inbox.clear()
        _no_inbox.add(subject)
        return False
    return True


def _inbox_of(subject: str) -> tuple[str, str] | None:
    """(world, agent) of an inbox subject, else None."""
    parts = subject.split(".")
    if len(parts) != 4 or parts[0] != PREFIX or parts[2] != "inbox":
        return None
    return parts[1], parts[3]


async def _open_inbox(js: JetStreamContext, subject: str, done: set[str]) -> None:
    """Open one agent's inbox durable (see :func:`open_inboxes`); add ``subject``
    to ``done`` once the server confirms it, or keeps a config not ours to change."""
    place = _inbox_of(subject)
    assert place is not None
    world, agent = place
    spec = inbox_in(world, agent)
    with anyio.move_on_after(OPEN_INBOX_TIMEOUT) as waited:
        try:
            await ensure_consumer(js, spec)
        except ConfigDrift as exc:  # not ours to delete: the operator's call
            log.warning("inbox durable %s: %s", spec.durable, exc)
            done.add(subject)
            return
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("could not open inbox durable %s: %s", spec.durable, exc)
            return
    if waited.cancelled_caught:
        log.warning(
            "inbox durable %s not confirmed within %.0f s; trying again on the "
            "next message",
            spec.durable,
            OPEN_INBOX_TIMEOUT,
        )
        return
    done.add(subject)


@dataclass(frozen=True, slots=True)
class _Publish:
    subject: str
    payload: bytes
    msg_id: str
    count: int  # outputs it carries: 0 for a plain message, else a batch's size


def batched(items: list[OutboxItem]) -> list[_Publish]:
    """The stream messages that carry ``items``, in order: consecutive outputs with
    the same :func:`~worldline.protocols.subjects.batch_subject` travel as one batch (a
    single publish, PubAck and delivery instead of one each), everything else alone.

    A batch's Msg-Id is derived from its items' Msg-Ids, so publishing the same
    items again (a retry) is de-duplicated like a single message.
    """
    return list(_batches(items))


def _batches(items: Iterable[OutboxItem]) -> Iterator[_Publish]:
    """:func:`batched`, one message at a time (the first goes out before the rest
    are packed)."""
    run: list[OutboxItem] = []
    run_subject = ""  # the batch subject of ``run``
    size = 0
    for item in items:
        key = batch_subject(item.subject)
        if key is None:
            if run:
                yield _packed(run, run_subject)
                run, size = [], 0
            yield _Publish(item.subject, item.payload, item.msg_id, 0)
            continue
        if run and (
            run_subject != key
            or size + len(item.payload) > BATCH_BYTES
            or len(run) >= BATCH_ITEMS
        ):
            yield _packed(run, run_subject)
            run, size = [], 0
        run.append(item)
        run_subject = key
        size += len(item.payload) + len(item.subject)
    if run:
        yield _packed(run, run_subject)


def _packed(run: list[OutboxItem], subject: str) -> _Publish:
    """One run of outputs on batch subject ``subject``: alone, or as one batch."""
    if len(run) == 1:
        only = run[0]
        return _Publish(only.subject, only.payload, only.msg_id, 0)
    digest = hashlib.sha256("\0".join(i.msg_id for i in run).encode())
    return _Publish(
        subject,
        encode_batch([(i.subject, i.payload) for i in run]),
        f"batch:{digest.hexdigest()[:32]}",
        len(run),
    )


def unbatched(msg: Msg) -> BatchItems:
    """(subject, payload) of every output a received message carries: the items of a
    batch, or the message itself. For readers of the derived and state streams
    outside the runtime (tools, tests, benchmarks).

    Raises:
        msgspec.DecodeError: a message marked as a batch does not decode as one.
    """
    if BATCH_HEADER in (msg.headers or {}):
        return decode_batch(msg.data)
    return [(msg.subject, msg.data)]


class _Reply(msgspec.Struct):
    """A PubAck as the server sends it (or the error it sends instead)."""

    stream: str = ""
    seq: int = 0
    domain: str | None = None
    duplicate: bool = False
    error: dict[str, Any] | None = None


_REPLY = msgspec.json.Decoder(_Reply)
_NO_RESPONDERS = "503"  # the status of the reply when no stream holds the subject


class _Call:
    """The PubAcks one :func:`publish_all` call waits for, by position."""

    __slots__ = ("acks", "error", "got", "last", "moved")

    def __init__(self) -> None:
        self.acks: list[_Reply | None] = []  # one per message published so far
        self.got = 0  # PubAcks (or errors) that came back
        self.error: Exception | None = None  # the first error that came back
        self.moved = asyncio.Event()  # set whenever something came back
        self.last = time.monotonic()  # when something last came back (or the start)


class _Acks:
    """The PubAcks of one connection's pipelined publishes, on one wildcard reply
    subscription (``<inbox>.<call>.<position>``).

    nats-py's ``publish_async`` makes a NUID, a random token, a future and a
    semaphore round per message, and decodes each PubAck through ``json`` and
    dataclasses: at a fan-out of hundreds of inbox messages that was twice the CPU
    of the publishes themselves, in the actor that has to send the next batch."""

    def __init__(self, nc: NATS) -> None:
        # No reference to ``nc``: it keys this in a weak dictionary.
        self.prefix = f"{nc.new_inbox()}."
        self.calls: dict[str, _Call] = {}
        self.ids = itertools.count()
        self.lock = asyncio.Lock()
        self.subscribed = False

    async def open(self, nc: NATS) -> None:
        async with self.lock:
            if not self.subscribed:
                await nc.subscribe(f"{self.prefix}*.*", cb=self.reply)
                self.subscribed = True

    async def reply(self, msg: Msg) -> None:
        call_id, _, position = msg.subject[len(self.prefix) :].partition(".")
        call = self.calls.get(call_id)
        if call is None or not position.isdigit():
            return  # a call that ended (it timed out, or failed)
        index = int(position)
        if index >= len(call.acks) or call.acks[index] is not None:
            return
        try:
            if msg.headers and msg.headers.get(api.Header.STATUS) == _NO_RESPONDERS:
                raise nats.js.errors.NoStreamResponseError
            ack = _REPLY.decode(msg.data)
            if ack.error is not None:
                nats.js.errors.APIError.from_error(ack.error)  # raises
        except (nats.errors.Error, msgspec.DecodeError, KeyError, TypeError) as exc:
            if call.error is None:
                call.error = (
                    exc
                    if isinstance(exc, nats.errors.Error)
                    else nats.js.errors.APIError(description=f"bad PubAck: {exc!r}")
                )
            ack = _Reply()
        call.acks[index] = ack
        call.got += 1
        call.last = time.monotonic()
        call.moved.set()


_acks: weakref.WeakKeyDictionary[object, _Acks] = weakref.WeakKeyDictionary()


async def publish_all(js: JetStreamContext, items: list[OutboxItem]) -> None:
    """Publish pipelined (batched where the subject allows, see :func:`batched`),
    each message with its Nats-Msg-Id, and wait for every PubAck.

    The first message reaches the socket at once and the rest every
    :data:`SEND_EVERY` messages, at most :data:`IN_FLIGHT` awaiting their PubAck.
    Inboxes written for the first time get their durable right after their messages,
    before the batch's next output that is not an inbox message
    (:func:`open_inboxes`).

    A duplicate PubAck in a stream agents write too is checked against the stored
    message: an output whose Msg-Id a message on another subject held first is
    published again (:mod:`~worldline.actors.runtime.preempt`).

    Raises:
        TimeoutError: no PubAck came back for :data:`PUBLISH_TIMEOUT` seconds while
            some were missing (a server that died after receiving a publish never
            answers it); the caller retries the batch, and the Msg-Ids make the
            retry harmless.
        nats.errors.Error: the server refused a message (the first refusal).
    """
    nc = js._nc
    done = _opened.setdefault(nc, set())
    unopened: list[str] = []  # inboxes just written whose durable is not open yet
    acks = _acks.get(nc)
    if acks is None:
        acks = _acks[nc] = _Acks(nc)
    await acks.open(nc)
    call_id = str(next(acks.ids))
    call = acks.calls[call_id] = _Call()
    reply = f"{acks.prefix}{call_id}."
    messages: list[_Publish] = []
    headers_of: list[dict[str, str]] = []
    try:
        for n, message in enumerate(_batches(items)):
            while n - call.got >= IN_FLIGHT:
                await _moved(call, messages)
            if _unopened(message.subject, done):
                unopened.append(message.subject)
            elif unopened:  # their durables, before the batch's other outputs
                await open_inboxes(js, unopened)
                unopened = []
            headers: dict[str, str] = {api.Header.MSG_ID: message.msg_id}
            if message.count:
                headers[BATCH_HEADER] = str(message.count)
            messages.append(message)
            headers_of.append(headers)
            call.acks.append(None)
            await nc.publish(
                message.subject, message.payload, reply=f"{reply}{n}", headers=headers
            )
            if n % SEND_EVERY == 0:
                await asyncio.sleep(0)  # nats-py's flusher writes what is queued
        if unopened:
            await open_inboxes(js, unopened)
        while call.got < len(messages) and call.error is None:
            await _moved(call, messages)
    finally:
        del acks.calls[call_id]
    if call.error is not None:
        raise call.error
    # A duplicate in a stream agents write too may be someone else's message.
    for message, headers, ack in zip(messages, headers_of, call.acks, strict=True):
        assert ack is not None
        if ack.duplicate and ack.stream in CHECKED:
            puback = api.PubAck(
                stream=ack.stream, seq=ack.seq, domain=ack.domain, duplicate=True
            )
            await stored_as_ours(js, message.subject, message.payload, headers, puback)


async def _moved(call: _Call, messages: list[_Publish]) -> None:
    """Wait until more PubAcks of ``call`` come back (or one reports an error).

    Raises:
        TimeoutError: none came back for :data:`PUBLISH_TIMEOUT` seconds (since the
            last one that did, or the call's start).
    """
    call.moved.clear()
    left = call.last + PUBLISH_TIMEOUT - time.monotonic()
    if left > 0:
        with anyio.move_on_after(left):
            await call.moved.wait()
            return
    size = sum(len(m.payload) for m in messages)
    raise TimeoutError(
        f"{call.got} of {len(messages)} PubAcks ({size:,} bytes published) came "
        f"back, then none for {PUBLISH_TIMEOUT:.0f} s; is the connection up (a slow "
        "consumer cut off by the server loses its PubAcks)?"
    )

"""Publish an actor's committed outputs: pipelined, each with its Nats-Msg-Id, packed
into batches where the subject allows (:func:`batched`), and unpacked again by readers
outside the runtime (:func:`unbatched`).
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import nats.errors
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
    from collections.abc import Iterable

    from nats.aio.msg import Msg

    from worldline.actors.runtime.outbox import OutboxItem

__all__ = [
    "BATCH_BYTES",
    "BATCH_ITEMS",
    "PUBLISH_TIMEOUT",
    "batched",
    "open_inboxes",
    "publish_all",
    "unbatched",
]


PUBLISH_TIMEOUT = 5.0  # seconds to wait for a batch's PubAcks before retrying it
BATCH_BYTES = 512 * 1024  # payload bytes per batch message (the bus caps one at 1 MiB)
BATCH_ITEMS = (
    256  # outputs per batch message (a consumer applies about this many at once)
)


log = logging.getLogger("worldline.actor")
OPEN_INBOX_TIMEOUT = 5.0  # seconds to open an agent's inbox durable before giving up
# The inbox subjects whose durable each connection has opened.
_opened: weakref.WeakKeyDictionary[object, set[str]] = weakref.WeakKeyDictionary()


async def open_inboxes(js: JetStreamContext, subjects: Iterable[str]) -> None:
    """Open the durable of each agent inbox among ``subjects`` (``wl.W.inbox.A``)
    before the first message goes there, once per inbox and connection.

    On a secured deploy agents create no consumer: a create request carries its
    config in the body, so a right to create one's own durable is also a right to
    create it as a push consumer aimed at any subject of the actors' account. The
    materializer, which writes the inboxes, opens them instead (a pull durable
    filtered to the inbox). A durable the server does not confirm in time is logged
    and tried again on the next publish there; the messages wait in the stream
    meanwhile (the durable delivers from the first one)."""
    done = _opened.setdefault(js._nc, set())
    for subject in dict.fromkeys(subjects):
        if subject in done:  # checked first: this runs for every message published
            continue
        parts = subject.split(".")
        if len(parts) != 4 or parts[0] != PREFIX or parts[2] != "inbox":
            continue
        spec = inbox_in(parts[1], parts[3])
        with anyio.move_on_after(OPEN_INBOX_TIMEOUT) as waited:
            try:
                await ensure_consumer(js, spec)
            except ConfigDrift as exc:  # not ours to delete: the operator's call
                log.warning("inbox durable %s: %s", spec.durable, exc)
                done.add(subject)
                continue
            except (nats.errors.Error, TimeoutError) as exc:
                log.warning("could not open inbox durable %s: %s", spec.durable, exc)
                continue
        if waited.cancelled_caught:
            log.warning(
                "inbox durable %s not confirmed within %.0f s; trying again on the "
                "next message",
                spec.durable,
                OPEN_INBOX_TIMEOUT,
            )
            continue
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
    out: list[_Publish] = []
    run: list[OutboxItem] = []
    run_subject: str | None = None  # the batch subject of ``run``
    size = 0

    def flush() -> None:
        nonlocal run, size
        if len(run) == 1:
            only = run[0]
            out.append(_Publish(only.subject, only.payload, only.msg_id, 0))
        elif run:
            assert run_subject is not None
            digest = hashlib.sha256("\0".join(i.msg_id for i in run).encode())
            out.append(
                _Publish(
                    run_subject,
                    encode_batch([(i.subject, i.payload) for i in run]),
                    f"batch:{digest.hexdigest()[:32]}",
                    len(run),
                )
            )
        run, size = [], 0

    for item in items:
        key = batch_subject(item.subject)
        if key is None:
            flush()
            out.append(_Publish(item.subject, item.payload, item.msg_id, 0))
            continue
        if run and (
            run_subject != key
            or size + len(item.payload) > BATCH_BYTES
            or len(run) >= BATCH_ITEMS
        ):
            flush()
        run.append(item)
        run_subject = key
        size += len(item.payload) + len(item.subject)
    flush()
    return out


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


async def publish_all(js: JetStreamContext, items: list[OutboxItem]) -> None:
    """Publish pipelined (batched where the subject allows, see :func:`batched`),
    each message with its Nats-Msg-Id, and wait for every PubAck.

    A duplicate PubAck in a stream agents write too is checked against the stored
    message: an output whose Msg-Id a message on another subject held first is
    published again (:mod:`~worldline.actors.runtime.preempt`).

    Raises:
        TimeoutError: not every PubAck came back in time (a server that died after
            receiving a publish never answers it); the caller retries the batch, and
            the Msg-Ids make the retry harmless.
    """
    messages = batched(items)
    await open_inboxes(js, (m.subject for m in messages))
    sent: list[tuple[_Publish, dict[str, str], api.PubAck]] = []
    try:
        with anyio.fail_after(PUBLISH_TIMEOUT):
            futures = []
            for message in messages:
                headers: dict[str, str] = {api.Header.MSG_ID: message.msg_id}
                if message.count:
                    headers[BATCH_HEADER] = str(message.count)
                future = await js.publish_async(
                    message.subject, message.payload, headers=headers
                )
                futures.append((message, headers, future))
            for message, headers, future in futures:
                sent.append((message, headers, await future))
    except TimeoutError as exc:
        size = sum(len(m.payload) for m in messages)
        raise TimeoutError(
            f"{len(sent)} of {len(messages)} PubAcks ({size:,} bytes published) came "
            f"back within {PUBLISH_TIMEOUT:.0f} s; is the connection up (a slow "
            "consumer cut off by the server loses its PubAcks)?"
        ) from exc
    # A duplicate in a stream agents write too may be someone else's message.
    for message, headers, ack in sent:
        if ack.duplicate and ack.stream in CHECKED:
            await stored_as_ours(js, message.subject, message.payload, headers, ack)

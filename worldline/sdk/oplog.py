"""Reading one world's whole op log, every op exactly once or a loud failure: the
reader under ``worldline export`` and ``worldline replay`` (:func:`read_log`).

Before (issue 23, F16), the export asked for 500 ops per fetch whatever their size:
500 junk ops of 1 MiB is 500 MiB owed at once, past the server's ``max_pending``
(64 MiB), and the server cut the operator off as a slow consumer. Ops lost in flight
that way are never sent again (the consumer acks nothing), and when they were the
log's last, nothing came after them to show the hole: the export exited 0 with
1,275 of 1,420 ops, and a replay of it printed ``match: NO``.

Now each pull request is capped in bytes (:data:`EXPORT_BYTES`, at least the server's
largest message), one at a time, so the server never owes this client more than one
request's worth; and the read is complete by construction. The world's last sequence
is read before anything else (the log's last message on ``wl.<world>.ops.*``); the
consumer delivers the world's ops in log order, numbered 1, 2, 3, ... (its consumer
sequence), so a skipped number is a hole, and so is a consumer that says it sent
more than arrived. A hole is read again: the consumer is made anew at the first
sequence not yet read (with half the byte cap, down to one message). The read ends
at that last sequence, and nowhere else: if the ops cannot be read (the server keeps
dropping them, or says the log no longer holds them) it raises
:class:`~worldline.sdk.errors.BusUnavailable` naming the first op not read and the
log's last, never returning short.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
from typing import TYPE_CHECKING, Any, Final

import anyio
import nats.errors
import nats.js.errors
from nats.js import api

from worldline.protocols.subjects import BATCH_HEADER
from worldline.sdk.errors import BusUnavailable

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription
    from nats.js import JetStreamContext

__all__ = ["EXPORT_BYTES", "EXPORT_FETCH", "LogMessage", "read_log"]

log = logging.getLogger("worldline.sdk")

EXPORT_FETCH: Final = 500  # ops one pull request may bring
EXPORT_BYTES: Final = 4 * 1024 * 1024  # bytes one pull request may bring (at least
# the server's max_payload; the server's max_pending is 64 MiB by default)
EXPORT_WAIT: Final = 1.0  # seconds a pull request waits for its first op
EXPORT_IDLE_LIMIT: Final = 10  # requests in a row with nothing, ops still unread
EXPORT_RETRIES: Final = 8  # holes read again in a row without a new op
_OVERHEAD: Final = 64 * 1024  # a message's subject and headers beyond max_payload
_NO_MESSAGE: Final = 10037  # JetStream's error code: no message found

# (stream sequence, subject, payload, Wl-Batch header or None)
LogMessage = tuple[int, str, bytes, str | None]


async def read_log(
    nc: NATS, js: JetStreamContext, stream: str, subject: str, *, what: str
) -> AsyncIterator[LogMessage]:
    """Every message of ``stream`` on ``subject`` (a filter) up to the last one it
    holds when called, in log order, each once. ``what`` names the read in errors.

    Raises:
        BusUnavailable: the server holds no such stream, or the read could not get
            every message up to that last one (named, with the first one missing).
    """
    reader = _Reader(nc, js, stream, subject, what)
    end = await reader.last_sequence()
    if end == 0:
        return
    try:
        async for message in reader.read(end):
            yield message
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await reader.close()


class _Reader:
    def __init__(
        self, nc: NATS, js: JetStreamContext, stream: str, subject: str, what: str
    ) -> None:
        self._nc = nc
        self._js = js
        self._stream = stream
        self._subject = subject
        self._what = what
        prefix: str = getattr(js, "_prefix", api.DEFAULT_PREFIX)
        self._next_prefix = f"{prefix}.CONSUMER.MSG.NEXT.{stream}"
        self._floor = nc.max_payload + _OVERHEAD  # the server refuses a smaller cap
        self._cap = max(EXPORT_BYTES, self._floor)
        self._consumer = ""
        self._inbox = ""
        self._requests = 0
        self._sub: Subscription | None = None
        self._arrived = _Arrivals()

    async def last_sequence(self) -> int:
        """The sequence of the last message on the subject now (0: none)."""
        try:
            await self._js.stream_info(self._stream)
            last = await self._js.get_msg(self._stream, subject=self._subject)
        except nats.js.errors.NotFoundError as exc:
            if getattr(exc, "err_code", None) == _NO_MESSAGE:
                return 0
            raise BusUnavailable(
                "this server holds no worldline op log; start the actors "
                "(`worldline up`) or point --nats at the right server"
            ) from exc
        except (TimeoutError, nats.errors.Error) as exc:
            raise BusUnavailable(
                f"{self._what}: the log's last op could not be read ({exc!r}); "
                "run it again"
            ) from exc
        return int(last.seq or 0)

    async def read(self, end: int) -> AsyncIterator[LogMessage]:
        start = 1  # the first stream sequence not yet read
        idle = retries = 0
        while start <= end:
            hole = await self._open(start)
            expected = 1  # the consumer sequence of the next delivery
            while not hole:
                msgs = await self._pull()
                if not msgs:
                    sent = await self._delivered()
                    if sent is None:
                        hole = "the server dropped the reader's consumer"
                    elif sent >= expected:
                        hole = f"{sent - expected + 1} sent after it never arrived"
                    else:
                        idle += 1
                        if idle >= EXPORT_IDLE_LIMIT:
                            raise self._short(start, end, "none arrived in time")
                    continue
                idle = 0
                for msg in msgs:
                    seq, consumer_seq = _sequences(msg)
                    if consumer_seq != expected:
                        hole = f"{consumer_seq - expected} lost in flight"
                        break
                    expected += 1
                    if seq > end:  # published after the read began: not in it
                        return
                    retries = 0
                    start = seq + 1
                    yield seq, msg.subject, msg.data, _batch_header(msg)
                    if seq == end:
                        return
            retries += 1
            if retries > EXPORT_RETRIES:
                raise self._short(start, end, f"read again {EXPORT_RETRIES} times")
            self._cap = max(self._floor, self._cap // 2)
            log.warning(
                "%s: ops from seq %d read again (%s); asking for at most %d bytes "
                "at a time",
                self._what, start, hole, self._cap,
            )  # fmt: skip
            await anyio.sleep(min(0.1 * retries, 1.0))

    def _short(self, start: int, end: int, why: str) -> BusUnavailable:
        return BusUnavailable(
            f"{self._what} is incomplete: the ops from seq {start} through {end} "
            f"(the log's last) could not be read ({why}); nothing was cut "
            "silently: run it again"
        )

    async def _open(self, start: int) -> str:
        """A new consumer from stream sequence ``start`` and a new inbox for it
        (what the old one still receives is dropped with it); why not, if not."""
        await self.close()
        name = f"wl-read-{secrets.token_hex(8)}"
        config = api.ConsumerConfig(
            name=name,
            filter_subject=self._subject,
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
            inactive_threshold=30.0,
            mem_storage=True,
            num_replicas=1,
        )
        try:
            await self._js.add_consumer(self._stream, config)
        except (TimeoutError, nats.errors.Error) as exc:  # a reconnect, say
            return f"no consumer: {exc!r}"
        self._consumer = name
        self._inbox = self._nc.new_inbox()
        self._arrived = _Arrivals()  # what the old inbox still brought is dropped
        # Each request has its own reply subject under the inbox, so a status
        # that ends an earlier request never ends a later one.
        self._sub = await self._nc.subscribe(
            f"{self._inbox}.*",
            cb=self._arrived.take,
            pending_msgs_limit=4 * EXPORT_FETCH,
            pending_bytes_limit=4 * max(EXPORT_BYTES, self._floor),
        )
        return ""

    async def _pull(self) -> list[Msg]:
        """The ops one pull request brought (none: nothing arrived in time), and
        any that arrived late for an earlier one, in the order they came."""
        assert self._sub is not None
        self._requests += 1
        reply = f"{self._inbox}.{self._requests}"
        arrived = self._arrived
        arrived.expect(reply)
        request = {
            "batch": EXPORT_FETCH,
            "max_bytes": self._cap,
            "expires": int(EXPORT_WAIT * 1e9),
        }
        await self._nc.publish(
            f"{self._next_prefix}.{self._consumer}",
            json.dumps(request).encode(),
            reply=reply,
        )
        with anyio.move_on_after(EXPORT_WAIT + 1.0):
            await arrived.done.wait()
        return arrived.drain()

    async def _delivered(self) -> int | None:
        """How many the consumer says it sent; None: it is gone. (No answer now:
        0, the caller asks again.)"""
        try:
            info = await self._js.consumer_info(self._stream, self._consumer)
        except nats.js.errors.NotFoundError:
            return None
        except (TimeoutError, nats.errors.Error):
            return 0
        delivered: Any = info.delivered
        return 0 if delivered is None else int(delivered.consumer_seq or 0)

    async def close(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        if self._consumer:
            name, self._consumer = self._consumer, ""
            # If not now, it goes away on its own once idle.
            with contextlib.suppress(TimeoutError, nats.errors.Error):
                await self._js.delete_consumer(self._stream, name)


class _Arrivals:
    """What one inbox subscription receives, taken off the wire by its callback (no
    wait per message): ops are kept, in order, until :meth:`drain`; ``done`` is set
    once the awaited request is over (its status came, or it brought a batch)."""

    def __init__(self) -> None:
        self.msgs: list[Msg] = []
        self.reply = ""
        self.done = anyio.Event()

    def expect(self, reply: str) -> None:
        self.reply = reply
        self.done = anyio.Event()
        if len(self.msgs) >= EXPORT_FETCH:
            self.done.set()

    async def take(self, msg: Msg) -> None:
        if msg.reply.startswith("$JS.ACK."):  # an op, whatever its headers
            self.msgs.append(msg)
            if len(self.msgs) >= EXPORT_FETCH:
                self.done.set()
        elif msg.subject == self.reply:
            self.done.set()  # a status ends this request: no more now, or none will

    def drain(self) -> list[Msg]:
        msgs, self.msgs = self.msgs, []
        return msgs


_V1_TOKENS: Final = 9  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<n>


def _sequences(msg: Msg) -> tuple[int, int]:
    """The (stream, consumer) sequences a delivery's reply subject carries (read
    directly in the usual form; other forms through nats-py's metadata)."""
    tokens = msg.reply.split(".")
    if len(tokens) == _V1_TOKENS:
        return int(tokens[5]), int(tokens[6])
    meta = msg.metadata
    return int(meta.sequence.stream or 0), int(meta.sequence.consumer or 0)


def _batch_header(msg: Msg) -> str | None:
    header: str | None = (msg.headers or {}).get(BATCH_HEADER)
    return header

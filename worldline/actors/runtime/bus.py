"""The NATS connection: connect (a client that hands pulled messages over raw) and the
raw pull from a durable (:class:`Puller`, :class:`Delivered`).

Declaring streams, durables and buckets is ``declare.py``; publishing an outbox is
``publish.py``.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.lowlevel
import nats
import nats.errors
from nats.aio.client import Client as NATS

from worldline.actors.runtime.auth import load_credentials
from worldline.actors.runtime.errors import BusUnavailable, CredentialsRefused
from worldline.protocols.subjects import BATCH_HEADER

if TYPE_CHECKING:
    from collections.abc import Callable

    from nats.aio.msg import Msg

__all__ = [
    "FETCH_BYTES",
    "SHUTDOWN_GRACE",
    "Delivered",
    "DeliveryGap",
    "Puller",
    "connect",
    "describe",
    "raw_subject",
    "valid_subject",
]

log = logging.getLogger("worldline.bus")

SHUTDOWN_GRACE = 5.0  # seconds cleanup may take before it is abandoned
FETCH_BYTES: Final = 4 * 1024 * 1024
"""Bytes one pull request may bring (JetStream's ``max_bytes``; raised to hold the
server's largest message). A server cuts off a client whose unread data passes its
``max_pending`` (64 MiB by default) as a slow consumer: a fetch of 256 batch messages
of up to 512 KiB each asked for 128 MiB at once, and the materializer was cut off
hundreds of times in a trust burst (issue 18)."""
PENDING_REQUESTS: Final = 4  # pull requests whose messages may be unread at once
_OVERHEAD: Final = 64 * 1024  # a message's subject and headers beyond max_payload


def describe(exc: BaseException) -> str:
    """An exception for a log line: its type and repr, never an empty reason (a
    ``TimeoutError()`` prints as nothing with ``%s``)."""
    kind = type(exc)
    module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
    return f"{module}{kind.__qualname__}: {exc!r}"


async def connect(
    url: str,
    *,
    name: str,
    connect_timeout: float = 2.0,
    creds: str | os.PathLike[str] | None = None,
    on_server_error: Callable[[Exception], None] | None = None,
) -> NATS:
    """Connect to NATS; raise :class:`BusUnavailable` if it cannot be reached now.

    ``url`` may list several servers, comma-separated (``nats://a:4222,nats://b:4222``,
    the nodes of a cluster): the client connects to one of them and fails over to the
    others (and to those the cluster advertises). Once connected, the client
    reconnects forever (an actor outlives a server restart).

    ``creds`` is a credentials file from ``worldline creds`` (default:
    ``$WORLDLINE_CREDS``, if set); without one the client connects anonymously.
    ``on_server_error`` sees every error the server reports once connected (a
    permissions violation, say: the SDK turns it into an error naming the subject).

    Raises:
        BusUnavailable: no server answered (:class:`CredentialsRefused`: the server
            refused the credentials).
        CredentialsError: the credentials file is missing or holds no user key.
    """
    auth = load_credentials(creds)
    servers = [part.strip() for part in url.split(",") if part.strip()] or [url]

    refused: list[Exception] = []  # the server turned the credentials away

    async def on_error(exc: Exception) -> None:
        # While connecting, nats-py reports the server's refusal as a plain Error.
        if "authorization violation" in str(exc).lower() or isinstance(
            exc, nats.errors.AuthorizationError
        ):
            refused.append(exc)
        if client:  # before the first connect, failure is reported once, below
            log.warning("%s: nats error: %s", name, describe(exc))
            if on_server_error is not None:
                on_server_error(exc)

    client: list[NATS] = []  # filled once connected, so callbacks can see its state

    async def on_disconnect() -> None:
        if client and not (client[0].is_closed or client[0].is_draining):
            log.warning("%s: disconnected from %s, reconnecting", name, url)

    async def on_reconnect() -> None:
        log.info("%s: reconnected to %s", name, url)

    nc = _Client()
    try:
        options: dict[str, Any] = {
            "name": name,
            "connect_timeout": connect_timeout,
            "allow_reconnect": True,
            "max_reconnect_attempts": 1,  # the first connect: fail fast, clearly
            "reconnect_time_wait": 0.5,
            "error_cb": on_error,
            "disconnected_cb": on_disconnect,
            "reconnected_cb": on_reconnect,
        }
        await nc.connect(servers, **options, **(auth.connect_options() if auth else {}))
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        if not refused and not isinstance(exc, nats.errors.AuthorizationError):
            raise BusUnavailable(
                f"cannot reach NATS at {url} ({exc or type(exc).__name__}); start "
                "one with `worldline up` or pass --nats URL (env WORLDLINE_NATS)"
            ) from exc
        who = f"the credentials in {auth.path}" if auth else "an anonymous client"
        raise CredentialsRefused(
            f"NATS at {url} refused {who} (authorization violation); pass the "
            "credentials file `worldline creds` wrote for you (--creds FILE, env "
            "WORLDLINE_CREDS), and check that the server includes the auth.conf "
            "generated with it"
        ) from exc
    # Connected once: from now on, reconnect forever (an actor outlives a server
    # restart). nats-py reads this option on every reconnect attempt.
    nc.options["max_reconnect_attempts"] = -1
    nc.authenticated = auth is not None
    client.append(nc)
    return nc


_NEXT = "$JS.API.CONSUMER.MSG.NEXT"  # JetStream's pull request subject


class DeliveryGap(nats.errors.Error):
    """An owned durable's deliveries skipped a consumer sequence: messages were lost
    in flight. The caller rebinds at its store's applied sequence (acking past the
    hole would acknowledge what was never applied)."""


RAW_PULL_ENV: Final = "WORLDLINE_RAW_PULL"


def _hands_raw_messages() -> bool:
    """Whether the installed nats-py's client takes each message from its parser the
    way :class:`_Client` expects (``_process_msg(sid, subject, reply, data,
    headers)``); if a release changes that, pulls take nats-py's ``Msg`` objects.
    ``WORLDLINE_RAW_PULL=0`` forces that fallback (``.ci/nats-py-drift`` tests both)."""
    if os.environ.get(RAW_PULL_ENV, "").strip() == "0":
        return False
    try:
        params = list(inspect.signature(NATS._process_msg).parameters)
    except (AttributeError, TypeError, ValueError):
        return False
    return params == ["self", "sid", "subject", "reply", "data", "headers"]


RAW_MESSAGES: Final = _hands_raw_messages()


class _Client(NATS):
    """nats-py's client, plus subscriptions that take their messages off the wire.

    nats-py turns every message into a ``Msg`` (its headers parsed into a dict), puts
    it on the subscription's queue and wakes the subscription's task, which calls
    back: about 6 us of CPU per message, a third of what an actor spends on one op
    besides its core. A sink registered here for a subscription gets the subject,
    reply, payload and raw header block right from the protocol parser instead.
    Only :class:`Puller` registers sinks; every other subscription is nats-py's.
    """

    def __init__(self) -> None:
        super().__init__()
        self._sinks: dict[int, Callable[[bytes, bytes, bytes, bytes | None], None]] = {}
        # Connected with credentials (a secured deploy: see serve.py's requester).
        self.authenticated = False

    def sink(
        self, sid: int, sink: Callable[[bytes, bytes, bytes, bytes | None], None]
    ) -> None:
        self._sinks[sid] = sink

    def unsink(self, sid: int) -> None:
        self._sinks.pop(sid, None)

    async def _process_msg(
        self,
        sid: int,
        subject: bytes,
        reply: bytes,
        data: bytes,
        headers: bytes | None,
    ) -> None:
        sink = self._sinks.get(sid)
        if sink is None:
            # nats-py reads no header block and an empty one alike.
            await super()._process_msg(sid, subject, reply, data, headers or b"")
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        sink(subject, reply, data, headers)

    def _build_message(
        self,
        sid: int,
        subject: bytes,
        reply: bytes,
        data: bytes,
        headers: dict[str, str] | None,
    ) -> Msg:
        # nats-py decodes strictly, inside its protocol parser: one frame whose
        # subject is not valid UTF-8 (anyone may publish one) raised there and broke
        # the connection (an export read 32 of 512 ops). Bytes that are not UTF-8
        # become lone surrogates instead: ``raw_subject`` gets the bytes back, and
        # anything that encodes the subject strictly fails on it, as it should.
        return self.msg_class(
            subject=subject.decode(errors="surrogateescape"),
            reply=reply.decode(errors="surrogateescape"),
            data=data,
            headers=headers,
            _client=self,
            _sid=sid,
        )


def raw_subject(subject: str) -> bytes:
    """The bytes of a subject read by a client of :func:`connect`, including one
    that is not valid UTF-8 (see ``_Client._build_message``)."""
    return subject.encode(errors="surrogateescape")


def valid_subject(subject: str) -> bool:
    """Whether a subject read by a client of :func:`connect` was valid UTF-8."""
    try:
        subject.encode()
    except UnicodeEncodeError:
        return False
    return True


class Delivered:
    """One message a :class:`Puller` fetched: what the runtime needs of a JetStream
    delivery (its sequences from the reply subject, the batch header), and its acks.
    """

    __slots__ = (
        "_nc",
        "batch",
        "consumer_seq",
        "data",
        "reply",
        "stream_seq",
        "subject",
    )

    def __init__(
        self,
        nc: NATS,
        subject: str,
        reply: str,
        data: bytes,
        batch: str | None,
    ) -> None:
        self._nc = nc
        self.subject = subject
        self.reply = reply
        self.data = data
        self.batch = batch  # the Wl-Batch header (items carried), None if plain
        self.stream_seq, self.consumer_seq = _sequences(reply)

    async def ack(self) -> None:
        await self._nc.publish(self.reply, _ACK)

    async def nak(self) -> None:
        await self._nc.publish(self.reply, _NAK)

    async def term(self) -> None:
        await self._nc.publish(self.reply, _TERM)

    async def in_progress(self) -> None:
        await self._nc.publish(self.reply, _PROGRESS)


_ACK, _NAK, _TERM, _PROGRESS = b"+ACK", b"-NAK", b"+TERM", b"+WPI"


def _sequences(reply: str) -> tuple[int, int]:
    """(stream, consumer) sequence from a JetStream ack subject: ``$JS.ACK.<stream>.
    <consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``, or the form with a domain
    and account hash (``$JS.ACK.<domain>.<hash>.<stream>...``).

    Raises:
        ValueError: ``reply`` is not a JetStream ack subject.
    """
    tokens = reply.split(".")
    if tokens[:2] == ["$JS", "ACK"]:
        if len(tokens) == 9:
            return int(tokens[5]), int(tokens[6])
        if len(tokens) >= 11:
            return int(tokens[7]), int(tokens[8])
    raise ValueError(f"not a JetStream delivery: reply subject {reply!r}")


_BATCH_NAME = BATCH_HEADER.encode()


def _status(headers: bytes) -> bool:
    """Whether a header block is a status (``NATS/1.0 404 No Messages``), not a
    message's headers (``NATS/1.0\r\n...``)."""
    return headers[8:9] == b" "


def _batch_header(headers: bytes) -> str | None:
    """The ``Wl-Batch`` value of a raw header block, read by the rule nats-py's own
    parser reads it (``Name: Value`` lines split at the first colon, name and value
    stripped, the last of repeated names), so the raw pull, the pull through
    nats-py's ``Msg`` and ``worldline export`` agree on which messages are batches
    (a name written ``Wl-Batch :``, say, is one for all three, or replay would
    apply what the live actors dead-lettered)."""
    if _BATCH_NAME not in headers:  # the fast path: no line can name it
        return None
    found = None
    for line in headers.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if colon and name.strip() == _BATCH_NAME:
            # Whatever a hostile publisher put there reaches the store, which
            # rejects it.
            found = value.strip().decode(errors="replace")
    return found


class Puller:
    """Fetch batches from a durable pull consumer through one plain subscription.

    nats-py's ``fetch`` waits for each message of a batch with a task and a timer of
    its own; at tens of thousands of messages a second that is most of an actor's bus
    cost. Here the messages go from the protocol parser straight into a buffer (a
    sink of the client :func:`connect` makes; see ``_Client``), and a fetch asks
    JetStream for what is there now (``no_wait``: the batch is complete when it is
    full or a status says so) or, when nothing is, waits up to ``timeout`` for the
    first message. What arrives late stays in the buffer for the next fetch. Acks,
    terms and naks go to each message's own reply subject, as with ``fetch``.

    Each request is capped in bytes as well as messages (``max_bytes``, default
    :data:`FETCH_BYTES`, at least the server's ``max_payload``: a message larger
    than the cap would never be delivered), so the server never has more than a few
    requests' worth queued for this client, however large the messages; the
    subscription's pending limits hold :data:`PENDING_REQUESTS` of them.
    """

    def __init__(
        self,
        nc: NATS,
        stream: str,
        durable: str,
        *,
        ordered: bool = False,
        max_bytes: int = FETCH_BYTES,
    ) -> None:
        self._nc = nc
        self._max_bytes = max_bytes
        # One owner reads the durable: deliveries must come 1, 2, 3, ... (the
        # consumer sequence); a hole means some were lost in flight.
        self._ordered = ordered
        self._delivered = 0
        self._next = f"{_NEXT}.{stream}.{durable}"
        self._inbox = nc.new_inbox()
        self._buffer: list[Delivered] = []
        self._arrived = anyio.Event()
        self._ended = False
        self._sub: Any = None

    @property
    def max_bytes(self) -> int:
        """What one pull request may bring, in bytes."""
        return self._max_bytes

    async def start(self) -> Puller:
        # The server refuses (409) a request whose cap is below its next message.
        self._max_bytes = max(self._max_bytes, self._nc.max_payload + _OVERHEAD)
        pending = PENDING_REQUESTS * self._max_bytes
        if isinstance(self._nc, _Client) and RAW_MESSAGES:
            self._sub = await self._nc.subscribe(
                self._inbox, pending_bytes_limit=pending
            )
            self._nc.sink(self._sub._id, self._take_raw)
        else:  # a client of nats-py's own: take its Msg objects
            self._sub = await self._nc.subscribe(
                self._inbox, cb=self._take_msg, pending_msgs_limit=-1,
                pending_bytes_limit=pending,
            )  # fmt: skip
        return self

    def _take_raw(
        self, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        # Called by nats-py's protocol parser: nothing here may raise.
        if headers is not None and _status(headers):
            self._ended = True  # no more for the request (or an old one's expiry)
        else:
            self._take(
                subject.decode(errors="replace"),
                reply.decode(errors="replace"),
                data,
                None if headers is None else _batch_header(headers),
            )
        self._arrived.set()

    async def _take_msg(self, msg: Msg) -> None:
        headers = msg.headers or {}
        if headers.get("Status"):
            self._ended = True
        else:
            self._take(msg.subject, msg.reply, msg.data, headers.get(BATCH_HEADER))
        self._arrived.set()

    def _take(self, subject: str, reply: str, data: bytes, batch: str | None) -> None:
        try:
            delivered = Delivered(self._nc, subject, reply, data, batch)
        except ValueError as exc:  # not from JetStream: nothing to ack it with
            log.warning("%s: dropped a message: %s", self._next, exc)
            return
        self._buffer.append(delivered)

    async def _ask(self, request: dict[str, Any], wait: float) -> None:
        self._arrived = anyio.Event()
        self._ended = False
        await self._nc.publish(
            self._next, json.dumps(request).encode(), reply=self._inbox
        )
        with anyio.move_on_after(wait):
            await self._arrived.wait()

    async def fetch(self, batch: int, wait: float) -> list[Delivered]:
        """Up to ``batch`` messages, in delivery order.

        Raises:
            TimeoutError: nothing arrived within ``wait`` seconds.
            DeliveryGap: an ordered pull's deliveries skipped a consumer sequence.
        """
        if len(self._buffer) < batch:
            want = batch - len(self._buffer)
            cap = self._max_bytes
            await self._ask({"batch": want, "no_wait": True, "max_bytes": cap}, wait)
            # no_wait answers with what is there, then a status if that is not all:
            # let the sink take in the rest of the burst.
            while len(self._buffer) < batch and self._arrived.is_set():
                if self._ended:
                    break
                self._arrived = anyio.Event()
                with anyio.move_on_after(0.002):
                    await self._arrived.wait()
            if not self._buffer:
                expires = max(int(wait * 1e9) - 100_000_000, 1_000_000)
                request = {"batch": batch, "expires": expires, "max_bytes": cap}
                await self._ask(request, wait)
                await anyio.lowlevel.checkpoint()  # the rest of a burst, if one started
        if not self._buffer:
            raise TimeoutError
        msgs, self._buffer = self._buffer[:batch], self._buffer[batch:]
        if self._ordered:
            first = self._delivered + 1
            got = [m.consumer_seq for m in msgs]
            if got != list(range(first, first + len(msgs))):
                raise DeliveryGap(
                    f"{self._next}: expected delivery {first}, got {got[0]}..; some "
                    "were lost in flight (a server or leader went away)"
                )
            self._delivered += len(msgs)
        return msgs

    async def unsubscribe(self) -> None:
        if self._sub is not None:
            if isinstance(self._nc, _Client):
                self._nc.unsink(self._sub._id)
            await self._sub.unsubscribe()

"""The NATS side of the shell: connect, declare streams and durables, publish an outbox.

Declarations are idempotent. A stream or durable whose stored config differs from its
declaration is updated in place (and the change logged); if the server refuses the
update the runtime raises :class:`ConfigDrift` naming the fields and the fix, never
silently keeping the old config.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio
import anyio.lowlevel
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext, api

from actors.runtime.auth import load_credentials
from actors.runtime.errors import BusUnavailable, ConfigDrift
from protocols.messages import BatchItems, decode_batch, encode_batch
from protocols.subjects import BATCH_HEADER, batch_subject, bucket_stream

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from nats.aio.msg import Msg

    from actors.runtime.store import OutboxItem
    from protocols.subjects import BucketSpec, ConsumerSpec, StreamSpec

__all__ = [
    "MAX_REPLICAS",
    "REPLICAS_ENV",
    "STARTUP_RETRY_MAX",
    "Delivered",
    "DeliveryGap",
    "Puller",
    "answered",
    "connect",
    "ensure_buckets",
    "ensure_consumer",
    "ensure_streams",
    "publish_all",
    "raw_subject",
    "resume_consumer",
    "stream_replicas",
    "unbatched",
    "valid_subject",
]

log = logging.getLogger("worldline.bus")
T = TypeVar("T")


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
        BusUnavailable: no server answered, or the server refused the credentials.
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
            log.warning("%s: nats error: %s", name, exc)
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
        raise BusUnavailable(
            f"NATS at {url} refused {who} (authorization violation); pass the "
            "credentials file `worldline creds` wrote for you (--creds FILE, env "
            "WORLDLINE_CREDS), and check that the server includes the auth.conf "
            "generated with it"
        ) from exc
    # Connected once: from now on, reconnect forever (an actor outlives a server
    # restart). nats-py reads this option on every reconnect attempt.
    nc.options["max_reconnect_attempts"] = -1
    client.append(nc)
    return nc


REPLICAS_ENV = "WORLDLINE_STREAM_REPLICAS"
MAX_REPLICAS = 5  # JetStream's limit


def stream_replicas() -> int:
    """How many servers keep a copy of each stream and bucket, default 1.

    Read from ``$WORLDLINE_STREAM_REPLICAS``; ``worldline up|actor --stream-replicas N``
    sets it for the actors it runs.

    Raises:
        ValueError: the setting is not a whole number from 1 to 5.
    """
    text = os.environ.get(REPLICAS_ENV, "").strip() or "1"
    value = int(text) if text.isdigit() else 0
    if not 1 <= value <= MAX_REPLICAS:
        raise ValueError(
            f"{REPLICAS_ENV}={text!r} is not a replica count: use 1 (one server) to "
            f"{MAX_REPLICAS}, at most the number of JetStream servers in the cluster"
        )
    return value


# Server refusals that name a configuration problem: retrying cannot fix them.
_CONFIG_REFUSALS: Final = frozenset(
    {
        10006,  # JetStream not in clustered mode
        10010,  # clustering support required
        10036,  # not supported in clustered mode
        10049,  # stream create failed: <reason>
        10052,  # stream configuration invalid (e.g. a retention change)
        10053,  # stream limits
        10069,  # stream update failed: <reason>
        10074,  # replicas > 1 not supported in non-clustered mode
    }
)
STARTUP_RETRY_MAX = 5.0  # seconds: the longest wait between start-up retries


def transient(exc: BaseException) -> bool:
    """Whether a JetStream API call failed for a reason that passes by itself.

    Timeouts, no responders (a server whose JetStream is not enabled or not ready
    yet), a connection that is reconnecting, and server-side 5xx answers (no leader
    in a cluster, JetStream starting, storage full) pass: the call is worth
    repeating. 4xx answers (not found, bad request) and the 5xx refusals that name
    a configuration problem (``_CONFIG_REFUSALS``) do not.
    """
    if isinstance(
        exc,
        TimeoutError
        | nats.errors.NoRespondersError
        | nats.errors.ConnectionReconnectingError
        | nats.errors.OutboundBufferLimitError
        | nats.errors.StaleConnectionError,
    ):
        return True
    if isinstance(exc, nats.js.errors.ServiceUnavailableError):
        return exc.err_code not in _CONFIG_REFUSALS  # err_code None: no responders
    if isinstance(exc, nats.js.errors.APIError):
        return (exc.code or 0) >= 500 and exc.err_code not in _CONFIG_REFUSALS
    return False


def _reason(exc: BaseException) -> str:
    if isinstance(exc, nats.js.errors.APIError) and exc.description:
        return f"{exc.description} ({exc.code}, {exc.err_code})"
    if isinstance(
        exc, nats.js.errors.ServiceUnavailableError | nats.errors.NoRespondersError
    ):
        return "no JetStream answers: is it enabled (nats-server -js) and ready?"
    if isinstance(exc, TimeoutError):
        return "no answer in time (a cluster electing its leader, or a busy server)"
    return repr(exc)


async def answered(what: str, request: Callable[[], Awaitable[T]]) -> T:
    """Run a JetStream API request, retrying (backing off to
    :data:`STARTUP_RETRY_MAX`) while the server cannot serve it (see
    :func:`transient`): a server whose JetStream is still starting or not yet
    enabled, a cluster electing a leader after a node dies or at a cold start, a
    stream growing to more replicas (tests/cluster/test_cluster.py,
    tests/runtime/test_startup.py). Each retry is logged.

    Raises:
        nats.js.errors.APIError: the server refused the request for good (4xx, or a
            configuration refusal); the caller maps it.
    """
    delay = 0.2
    while True:
        try:
            return await request()
        except (nats.errors.Error, TimeoutError) as exc:
            if not transient(exc):
                raise
            log.warning(
                "%s: JetStream cannot serve it now: %s; retrying in %.1fs",
                what,
                _reason(exc),
                delay,
            )
            await anyio.sleep(delay)
            delay = min(delay * 2, STARTUP_RETRY_MAX)


def _stream_config(spec: StreamSpec, replicas: int) -> api.StreamConfig:
    return api.StreamConfig(
        name=spec.name,
        subjects=list(spec.subjects),
        retention=api.RetentionPolicy(spec.retention),
        storage=api.StorageType.FILE,
        max_age=spec.max_age,
        duplicate_window=spec.duplicate_window,
        num_replicas=replicas,
    )


def _differences(declared: Any, stored: Any, fields: Iterable[str]) -> list[str]:
    diffs = []
    for name in fields:
        want, have = getattr(declared, name), getattr(stored, name)
        if isinstance(want, list):
            want, have = sorted(want), sorted(have or [])
        if want != have:
            diffs.append(f"{name}: {have!r} -> {want!r}")
    return diffs


async def ensure_streams(
    js: JetStreamContext, specs: Iterable[StreamSpec], *, replicas: int | None = None
) -> None:
    """Create each stream, or bring an existing one in line with its declaration.

    Args:
        replicas: copies JetStream keeps of each stream (default:
            :func:`stream_replicas`).

    Raises:
        ConfigDrift: the server refused a declaration (for example more replicas than
            the cluster has servers) or an update of a drifted stream.
    """
    replicas = stream_replicas() if replicas is None else replicas
    for spec in specs:
        config = _stream_config(spec, replicas)
        what = f"stream {spec.name}"
        try:
            info = await answered(what, partial(js.stream_info, spec.name))
        except nats.js.errors.NotFoundError:
            await _add_stream(js, config)
            continue
        diffs = _differences(
            config,
            info.config,
            ("subjects", "retention", "max_age", "duplicate_window", "num_replicas"),
        )
        if not diffs:
            continue
        try:
            await answered(what, partial(js.update_stream, config))
        except nats.js.errors.APIError as exc:
            raise ConfigDrift(
                f"stream {spec.name} differs from its declaration "
                f"({'; '.join(diffs)}) and the server refused the update: "
                f"{exc.description}. Back up and delete the stream, then restart, "
                "or run the worldline version that declared it."
            ) from exc
        log.warning("stream %s updated to its declaration: %s", spec.name, diffs)


async def _add_stream(js: JetStreamContext, config: api.StreamConfig) -> None:
    try:
        await answered(f"stream {config.name}", partial(js.add_stream, config))
    except nats.js.errors.APIError as exc:
        raise ConfigDrift(
            f"the server refused to create stream {config.name} with "
            f"{config.num_replicas} replica(s): {exc.description}. More than one "
            "replica needs a JetStream cluster of at least that many servers: set "
            f"{REPLICAS_ENV} (or --stream-replicas) to fit the deployment."
        ) from exc


async def ensure_buckets(
    js: JetStreamContext, specs: Iterable[BucketSpec], *, replicas: int | None = None
) -> None:
    """Create each key/value bucket that does not exist yet, and bring the replica
    count of an existing one in line (its other settings are never updated).

    Raises:
        ConfigDrift: the server refused the bucket or its replica change.
    """
    replicas = stream_replicas() if replicas is None else replicas
    for spec in specs:
        what = f"bucket {spec.bucket}"
        try:
            await answered(what, partial(js.key_value, spec.bucket))
        except nats.js.errors.BucketNotFoundError:
            config = api.KeyValueConfig(
                bucket=spec.bucket,
                history=spec.history,
                ttl=spec.ttl or None,
                replicas=replicas,
                # Reads by key subject, so bus permissions can limit an agent to its
                # own key (a stream-level message get names no key).
                direct=True,
            )
            try:
                await answered(what, partial(js.create_key_value, config))
            except nats.js.errors.APIError as exc:
                raise ConfigDrift(
                    f"the server refused to create bucket {spec.bucket} with "
                    f"{replicas} replica(s): {exc.description}. Set {REPLICAS_ENV} "
                    "(or --stream-replicas) to at most the number of JetStream servers."
                ) from exc
            continue
        stored = (
            await answered(what, partial(js.stream_info, bucket_stream(spec)))
        ).config
        if stored.num_replicas == replicas and stored.allow_direct:
            continue
        have, stored.num_replicas = stored.num_replicas, replicas
        stored.allow_direct = True  # buckets made before per-key reads
        try:
            await answered(what, partial(js.update_stream, stored))
        except nats.js.errors.APIError as exc:
            raise ConfigDrift(
                f"bucket {spec.bucket} keeps {have} replica(s), declared {replicas}, "
                f"and the server refused the update: {exc.description}. Set "
                f"{REPLICAS_ENV} (or --stream-replicas) to fit the deployment."
            ) from exc
        log.warning("bucket %s updated: replicas %s -> %s", spec.bucket, have, replicas)


def _consumer_config(spec: ConsumerSpec) -> api.ConsumerConfig:
    return api.ConsumerConfig(
        name=spec.durable,
        durable_name=spec.durable,
        ack_policy=api.AckPolicy.EXPLICIT,
        deliver_policy=api.DeliverPolicy.ALL,
        filter_subject=spec.filter_subject,
        ack_wait=spec.ack_wait,
        max_deliver=spec.max_deliver,
        max_ack_pending=spec.max_ack_pending,
    )


async def ensure_consumer(js: JetStreamContext, spec: ConsumerSpec) -> None:
    """Create the durable, or update it when its stored config has drifted."""
    config = _consumer_config(spec)
    what = f"durable {spec.durable} on {spec.stream.name}"
    add = partial(js.add_consumer, spec.stream.name, config)
    try:
        info = await answered(
            what, partial(js.consumer_info, spec.stream.name, spec.durable)
        )
    except nats.js.errors.NotFoundError:
        await answered(what, add)
        return
    diffs = _differences(
        config,
        info.config,
        ("filter_subject", "ack_wait", "max_deliver", "max_ack_pending", "ack_policy"),
    )
    if not diffs:
        return
    try:
        await answered(what, add)
    except nats.js.errors.APIError as exc:
        raise ConfigDrift(
            f"durable {spec.durable} on {spec.stream.name} differs from its "
            f"declaration ({'; '.join(diffs)}) and the server refused the update: "
            f"{exc.description}. Delete the durable (it restarts from the first "
            "message; applied sequences in LMDB keep that safe) and restart the actor."
        ) from exc
    log.warning("durable %s updated to its declaration: %s", spec.durable, diffs)


async def resume_consumer(
    js: JetStreamContext, spec: ConsumerSpec, start_seq: int
) -> None:
    """(Re)create a durable this process owns so delivery starts at ``start_seq``.

    The owner's store records every sequence it applied (acks come only after that
    commit), so starting right after it loses nothing and repeats nothing: whatever
    the old durable had delivered but not seen acked comes first, in stream order.
    While a cluster elects a leader the requests are retried until it answers.

    Its acks are cumulative (``AckPolicy.ALL``): the owner applies in stream order
    and acks a whole batch by acking its last message, one ack per batch.
    """
    config = _consumer_config(spec)
    config.ack_policy = api.AckPolicy.ALL
    config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
    config.opt_start_seq = max(start_seq, 1)

    async def recreate() -> None:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_consumer(spec.stream.name, spec.durable)
        await js.add_consumer(spec.stream.name, config)

    await answered(f"durable {spec.durable} on {spec.stream.name}", recreate)


_NEXT = "$JS.API.CONSUMER.MSG.NEXT"  # JetStream's pull request subject


class DeliveryGap(nats.errors.Error):
    """An owned durable's deliveries skipped a consumer sequence: messages were lost
    in flight. The caller rebinds at its store's applied sequence (acking past the
    hole would acknowledge what was never applied)."""


def _hands_raw_messages() -> bool:
    """Whether the installed nats-py's client takes each message from its parser the
    way :class:`_Client` expects (``_process_msg(sid, subject, reply, data,
    headers)``); if a release changes that, pulls take nats-py's ``Msg`` objects."""
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


_BATCH_LINE = f"\r\n{BATCH_HEADER}:".encode()


def _status(headers: bytes) -> bool:
    """Whether a header block is a status (``NATS/1.0 404 No Messages``), not a
    message's headers (``NATS/1.0\r\n...``)."""
    return headers[8:9] == b" "


def _batch_header(headers: bytes) -> str | None:
    at = headers.find(_BATCH_LINE)
    if at < 0:
        return None
    start = at + len(_BATCH_LINE)
    end = headers.find(b"\r\n", start)
    value = headers[start:] if end < 0 else headers[start:end]
    # Whatever a hostile publisher put there reaches the store, which rejects it.
    return value.decode(errors="replace").strip()


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
    """

    def __init__(
        self, nc: NATS, stream: str, durable: str, *, ordered: bool = False
    ) -> None:
        self._nc = nc
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

    async def start(self) -> Puller:
        if isinstance(self._nc, _Client) and RAW_MESSAGES:
            self._sub = await self._nc.subscribe(self._inbox)
            self._nc.sink(self._sub._id, self._take_raw)
        else:  # a client of nats-py's own: take its Msg objects
            self._sub = await self._nc.subscribe(
                self._inbox, cb=self._take_msg, pending_msgs_limit=-1,
                pending_bytes_limit=-1,
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
            await self._ask({"batch": want, "no_wait": True}, wait)
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
                await self._ask({"batch": batch, "expires": expires}, wait)
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


PUBLISH_TIMEOUT = 5.0  # seconds to wait for a batch's PubAcks before retrying it
BATCH_BYTES = 512 * 1024  # payload bytes per batch message (the bus caps one at 1 MiB)
BATCH_ITEMS = (
    256  # outputs per batch message (a consumer applies about this many at once)
)


@dataclass(frozen=True, slots=True)
class _Publish:
    subject: str
    payload: bytes
    msg_id: str
    count: int  # outputs it carries: 0 for a plain message, else a batch's size


def batched(items: list[OutboxItem]) -> list[_Publish]:
    """The stream messages that carry ``items``, in order: consecutive outputs with
    the same :func:`~protocols.subjects.batch_subject` travel as one batch (a single
    publish, PubAck and delivery instead of one each), everything else alone.

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

    Raises:
        TimeoutError: not every PubAck came back in time (a server that died after
            receiving a publish never answers it); the caller retries the batch, and
            the Msg-Ids make the retry harmless.
    """
    with anyio.fail_after(PUBLISH_TIMEOUT):
        futures = []
        for message in batched(items):
            headers: dict[str, str] = {api.Header.MSG_ID: message.msg_id}
            if message.count:
                headers[BATCH_HEADER] = str(message.count)
            futures.append(
                await js.publish_async(
                    message.subject, message.payload, headers=headers
                )
            )
        for future in futures:
            await future

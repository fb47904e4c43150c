"""Declare streams, durables and buckets, and run JetStream API requests through the
moments a server cannot serve them (:func:`answered`).

Declarations are idempotent. A stream or durable whose stored config differs from its
declaration is updated in place (and the change logged); if the server refuses the
update the runtime raises :class:`ConfigDrift` naming the fields and the fix, never
silently keeping the old config.
"""

from __future__ import annotations

import contextlib
import logging
import os
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api

from worldline.actors.runtime.errors import ConfigDrift
from worldline.protocols.subjects import bucket_stream

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from worldline.protocols.subjects import BucketSpec, ConsumerSpec, StreamSpec

__all__ = [
    "MAX_REPLICAS",
    "REPLICAS_ENV",
    "STARTUP_RETRY_MAX",
    "answered",
    "ensure_buckets",
    "ensure_consumer",
    "ensure_streams",
    "resume_consumer",
    "stream_replicas",
    "transient",
]

log = logging.getLogger("worldline.bus")
T = TypeVar("T")


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

"""``worldline status``: every actor instance, its lag, rates, dead letters and store.

Two sources, read once: the heartbeats actor processes write to the ``wl-status`` KV
bucket (what only a process knows: its counters since start, LMDB size, uptime, host
and pid) and JetStream's own consumer and stream info (lag, redeliveries, DLQ counts,
stream sizes). :func:`build_report` joins them (pure, the clock passed in);
:func:`gather` does the reading; :func:`worldline.ops.status_table.render` draws the
operator's table.

JSON (``--json``) is :class:`StatusReport` encoded as is; every key is always present
(``null`` when unknown). Its keys are documented in ``docs/runtime.md`` ("Operating").
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Literal

import anyio
import msgspec
import nats.errors
import nats.js.errors

from worldline.actors.registry import ACTORS, build
from worldline.actors.runtime.bus import connect
from worldline.actors.runtime.errors import BusUnavailable
from worldline.actors.runtime.lease import Unreadable, read_lease
from worldline.protocols.status import HEARTBEAT_VALUE, Heartbeat
from worldline.protocols.subjects import (
    ACTOR_NAMES,
    DLQ,
    LEASES,
    STATUS,
    STREAMS,
    bucket_put,
    bucket_stream,
    dlq,
)

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Mapping

    from nats.js import JetStreamContext

__all__ = [
    "STALE_AFTER",
    "ConsumerState",
    "InputRow",
    "InstanceRow",
    "StatusReport",
    "StreamRow",
    "build_report",
    "expected",
    "gather",
]

STALE_AFTER = 3  # heartbeat intervals without a heartbeat before an instance is stale

State = Literal["ok", "stalled", "stale", "stopped", "missing"]


class ConsumerState(msgspec.Struct, frozen=True, kw_only=True):
    """JetStream's view of one durable."""

    pending: int  # messages not yet delivered
    ack_pending: int  # delivered, not yet acked
    redelivered: int  # delivered more than once, not yet acked


class InputRow(msgspec.Struct, frozen=True, kw_only=True):
    """One input durable of an instance."""

    durable: str
    stream: str
    lag: int | None  # pending + ack_pending; null if the durable does not exist
    pending: int | None
    ack_pending: int | None
    redelivered: int | None
    applied: int | None  # acked by this process since it started (heartbeat)
    dead_lettered: int | None  # dead-lettered by this process since it started
    batches: int | None
    rate: float | None  # messages/s applied over the last minute
    last_batch_seconds: float | None
    # A batch of this input has failed to commit since then and is being retried
    # (a full disk, a store error); null when none is failing.
    stalled_since: datetime | None = None
    error: str | None = None  # the last failure of that batch


class InstanceRow(msgspec.Struct, frozen=True, kw_only=True):
    """One actor process (or an expected actor that reports nowhere: missing)."""

    actor: str
    instance: str
    state: State
    host: str | None
    pid: int | None
    started_at: datetime | None
    uptime_seconds: float | None
    heartbeat_age_seconds: float | None
    store_bytes: int | None
    dlq: int  # messages on wl.*.dlq.<instance> in WL_DLQ (every world, 30 days)
    inputs: list[InputRow]


class StreamRow(msgspec.Struct, frozen=True, kw_only=True):
    """One worldline stream."""

    name: str
    messages: int | None  # null if the stream does not exist
    bytes: int | None
    consumers: int | None


class LeaseRow(msgspec.Struct, frozen=True, kw_only=True):
    """Who writes for one materializer partition (the ``wl-leases`` bucket)."""

    partition: str  # the lease key, e.g. materializer.p0of1
    holder: str  # the instance that publishes; the partition's others stand by
    term: int  # grows by one at every takeover
    published: dict[str, int]  # per input stream, the last sequence sent
    # The key holds junk now (what was found; holder "?", term 0): the replicas
    # take it back by compare-and-set (docs/runtime.md, "the lease")
    unreadable: str | None = None
    repairs: int = 0  # times the lease was taken back from junk
    repaired: str = ""  # what was found the last time


class StatusReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``worldline status --json`` prints."""

    version: int  # of this layout; bumped only on an incompatible change
    at: datetime
    nats: str
    instances: list[InstanceRow]
    streams: list[StreamRow]
    leases: list[LeaseRow] = []


def _order(actor: str) -> int:
    return ACTOR_NAMES.index(actor) if actor in ACTOR_NAMES else len(ACTOR_NAMES)


def _input_rows(
    durables: Iterable[tuple[str, str]],
    beat: Heartbeat | None,
    consumers: Mapping[tuple[str, str], ConsumerState],
) -> list[InputRow]:
    reported = {i.durable: i for i in beat.inputs} if beat is not None else {}
    rows = []
    for stream, durable in durables:
        info = consumers.get((stream, durable))
        mine = reported.get(durable)
        rows.append(
            InputRow(
                durable=durable,
                stream=stream,
                lag=None if info is None else info.pending + info.ack_pending,
                pending=None if info is None else info.pending,
                ack_pending=None if info is None else info.ack_pending,
                redelivered=None if info is None else info.redelivered,
                applied=None if mine is None else mine.applied,
                dead_lettered=None if mine is None else mine.dead_lettered,
                batches=None if mine is None else mine.batches,
                rate=None if mine is None else mine.rate,
                last_batch_seconds=None if mine is None else mine.last_batch_seconds,
                stalled_since=None if mine is None else mine.stalled_since,
                error=None if mine is None or not mine.error else mine.error,
            )
        )
    return rows


Expected = tuple[str, list[tuple[str, str]]]  # (instance, [(stream, durable)])


def expected(actor: str) -> Expected:
    """The instance name and (stream, durable) inputs of ``actor``'s default
    deployment (what ``worldline up`` runs)."""
    spec = build(actor)
    return spec.instance, [
        (i.consumer.stream.name, i.consumer.durable) for i in spec.inputs
    ]


def build_report(
    *,
    url: str,
    now: datetime,
    heartbeats: Iterable[Heartbeat],
    consumers: Mapping[tuple[str, str], ConsumerState],
    dlq_counts: Mapping[str, int],
    streams: Iterable[StreamRow],
    expected: Mapping[str, Expected],
    leases: Iterable[LeaseRow] = (),
) -> StatusReport:
    """Join heartbeats with JetStream's numbers; pure, so tests pin every rule.

    Args:
        url: the NATS URL read.
        now: the wall clock, for heartbeat ages and uptimes.
        heartbeats: the latest record of every process in ``wl-status``.
        consumers: JetStream state per (stream, durable) that exists.
        dlq_counts: messages on each DLQ subject's instance token (every world).
        streams: the worldline streams.
        expected: per actor kind, its default instance and durables; an actor kind
            with no heartbeat at all is listed ``missing`` under them.
    """
    rows: list[InstanceRow] = []
    seen_actors: set[str] = set()
    seen_instances: set[str] = set()
    for beat in heartbeats:
        seen_actors.add(beat.actor)
        seen_instances.add(beat.instance)
        age = (now - beat.at).total_seconds()
        state: State = "ok"
        if beat.stopped:
            state = "stopped"
        elif age > STALE_AFTER * beat.interval:
            state = "stale"
        elif any(i.stalled_since is not None for i in beat.inputs):
            state = "stalled"  # alive, but a batch keeps failing to commit
        rows.append(
            InstanceRow(
                actor=beat.actor,
                instance=beat.instance,
                state=state,
                host=beat.host,
                pid=beat.pid,
                started_at=beat.started_at,
                uptime_seconds=round((beat.at - beat.started_at).total_seconds(), 3),
                heartbeat_age_seconds=round(age, 3),
                store_bytes=beat.store_bytes,
                dlq=dlq_counts.get(beat.instance, 0),
                inputs=_input_rows(
                    ((i.stream, i.durable) for i in beat.inputs), beat, consumers
                ),
            )
        )
    missing = [(a, *expected[a]) for a in expected if a not in seen_actors]
    # Dead letters of an instance nobody reports for (a shard or replica that is
    # gone) must not vanish from the report.
    listed = seen_instances | {instance for _, instance, _ in missing}
    missing += [("", i, []) for i in sorted(dlq_counts) if i not in listed]
    for actor, name, durables in missing:
        rows.append(
            InstanceRow(
                actor=actor,
                instance=name,
                state="missing",
                host=None,
                pid=None,
                started_at=None,
                uptime_seconds=None,
                heartbeat_age_seconds=None,
                store_bytes=None,
                dlq=dlq_counts.get(name, 0),
                inputs=_input_rows(durables, None, consumers),
            )
        )
    rows.sort(key=lambda r: (_order(r.actor), r.instance, r.host or "", r.pid or 0))
    return StatusReport(
        version=1,
        at=now,
        nats=url,
        instances=rows,
        streams=list(streams),
        leases=sorted(leases, key=lambda lease: lease.partition),
    )


# --- reading the bus -----------------------------------------------------------------


async def _heartbeats(js: JetStreamContext) -> list[Heartbeat]:
    prefix = bucket_put(STATUS, "")
    try:
        info = await js.stream_info(
            bucket_stream(STATUS), subjects_filter=bucket_put(STATUS, ">")
        )
        kv = await js.key_value(STATUS.bucket)
    except nats.js.errors.NotFoundError:  # no actor ever ran against this server
        return []
    beats = []
    for subject in sorted(info.state.subjects or {}):
        try:
            entry = await kv.get(subject.removeprefix(prefix))
        except nats.js.errors.NotFoundError:  # deleted, or expired meanwhile
            continue
        if entry.value is None:
            continue
        try:
            beats.append(HEARTBEAT_VALUE.decode(entry.value))
        except (msgspec.DecodeError, RecursionError):  # junk, or a foreign writer
            continue
    return beats


async def _leases(js: JetStreamContext) -> list[LeaseRow]:
    try:
        kv = await js.key_value(LEASES.bucket)
        keys = await kv.keys()
    except (nats.js.errors.NotFoundError, nats.js.errors.NoKeysError):  # none yet
        return []
    rows = []
    for key in keys:
        try:
            entry = await kv.get(key)
        except nats.js.errors.NotFoundError:
            continue
        if entry.value is None:
            continue
        lease = read_lease(entry.value, entry.revision or 0)
        if isinstance(lease, Unreadable):
            rows.append(
                LeaseRow(
                    partition=key,
                    holder="?",
                    term=0,
                    published={},
                    unreadable=lease.detail,
                )
            )
            continue
        rows.append(
            LeaseRow(
                partition=key,
                holder=lease.holder,
                term=lease.term,
                published=dict(lease.published),
                repairs=lease.repairs,
                repaired=lease.repaired,
            )
        )
    return rows


async def _consumers(
    js: JetStreamContext, durables: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], ConsumerState]:
    found = {}
    for stream, durable in sorted(set(durables)):
        try:
            info = await js.consumer_info(stream, durable)
        except nats.js.errors.NotFoundError:
            continue
        found[stream, durable] = ConsumerState(
            pending=info.num_pending or 0,
            ack_pending=info.num_ack_pending or 0,
            redelivered=info.num_redelivered or 0,
        )
    return found


async def _dlq_counts(js: JetStreamContext) -> dict[str, int]:
    try:
        info = await js.stream_info(DLQ.name, subjects_filter=dlq("*", "*"))
    except nats.js.errors.NotFoundError:
        return {}
    counts: dict[str, int] = defaultdict(int)
    for subject, count in (info.state.subjects or {}).items():
        counts[subject.rsplit(".", 1)[-1]] += count
    return dict(counts)


async def _streams(js: JetStreamContext) -> list[StreamRow]:
    rows = []
    for spec in STREAMS:
        try:
            info = await js.stream_info(spec.name)
        except nats.js.errors.NotFoundError:
            rows.append(
                StreamRow(name=spec.name, messages=None, bytes=None, consumers=None)
            )
            continue
        rows.append(
            StreamRow(
                name=spec.name,
                messages=info.state.messages,
                bytes=info.state.bytes,
                consumers=info.state.consumer_count,
            )
        )
    return rows


async def gather(
    url: str, *, now: datetime, creds: str | os.PathLike[str] | None = None
) -> StatusReport:
    """Read heartbeats, consumers, dead letters and streams from the bus at ``url``
    (with ``creds``; default ``$WORLDLINE_CREDS``).

    The caller bounds the whole read (``anyio.fail_after``); each JetStream request
    is also bounded by nats-py's own 5 s timeout.

    Raises:
        BusUnavailable: NATS cannot be reached, has no JetStream, or fails a query.
    """
    nc = await connect(url, name="worldline-status", creds=creds)
    try:
        js = nc.jetstream()
        try:
            beats = await _heartbeats(js)
            defaults = {name: expected(name) for name in ACTORS}
            durables = [(i.stream, i.durable) for b in beats for i in b.inputs]
            durables += [d for _, ds in defaults.values() for d in ds]
            consumers = await _consumers(js, durables)
            dlq_counts = await _dlq_counts(js)
            streams = await _streams(js)
            leases = await _leases(js)
        except nats.errors.Error as exc:
            raise BusUnavailable(
                f"NATS at {url} did not answer status queries "
                f"({exc or type(exc).__name__}); is JetStream enabled "
                "(nats-server -js) and the server healthy?"
            ) from exc
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            await nc.close()
    return build_report(
        url=url,
        now=now,
        heartbeats=beats,
        consumers=consumers,
        dlq_counts=dlq_counts,
        streams=streams,
        expected=defaults,
        leases=leases,
    )

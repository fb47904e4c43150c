"""Counters and latency histograms each actor process keeps, served over HTTP for
Prometheus (``/metrics``) and an orchestrator's probes (``/healthz``, ``/readyz``).

The consume loop records each settled batch in its actor's :class:`ActorMetrics`
(counts, duration, each message's age since JetStream stored it), the services time
each answer, the heartbeat (``heartbeat.py``) adds store size and lag and publishes the
same numbers for ``worldline status``. One :class:`Registry` per process (an ``actor``
label per instance) exposes them through ``prometheus_client`` (a registry of its own,
so two never mix): the seven families of the first release under their names, the
count of pre-empted outputs, the liveness gauges (last heartbeat, stalled inputs, a
materializer's lease), three histograms, and the library's process collector.

``endpoint.py`` serves them over HTTP with the health and readiness checks.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from bisect import bisect_left
from collections import deque
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from worldline.protocols.status import Heartbeat, InputStatus

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from prometheus_client.metrics_core import Metric

    from worldline.actors.runtime.lease import LeaseGate
    from worldline.actors.runtime.spec import ActorSpec

__all__ = [
    "HEARTBEAT_INTERVAL",
    "ActorMetrics",
    "InputMetrics",
    "RateWindow",
    "Registry",
    "bind_metrics",
    "count_preempted",
    "observe_rpc",
    "published_at",
    "render",
]

log = logging.getLogger("worldline.metrics")

HEARTBEAT_INTERVAL = 5.0  # seconds between heartbeats (and lag/size refreshes)
RATE_WINDOW = 60.0  # seconds the applied rate is averaged over

# Seconds; a batch of 256 small ops applies in a few ms, a cold LMDB page or a big
# world's finish in a second or more.
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0,
)  # fmt: skip
# Propagation includes queueing behind a backlog: up to minutes on a catch-up.
PROPAGATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0, 1800.0,
)  # fmt: skip


class RateWindow:
    """Messages per second over a sliding window of (time, total) samples.

    Pure: the caller passes monotonic times in, so tests drive it with fixed values.
    """

    def __init__(self, window: float = RATE_WINDOW) -> None:
        self._window = window
        self._samples: deque[tuple[float, int]] = deque()

    def observe(self, now: float, total: int) -> float:
        """Record the running total at ``now``; return the rate over the window."""
        self._samples.append((now, total))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self._window:
            self._samples.popleft()
        first_t, first_total = self._samples[0]
        span = now - first_t
        return (total - first_total) / span if span > 0 else 0.0


class Buckets:
    """A histogram's counts (observations <= each bound, +Inf last) and sum.

    Kept beside the counters they are read with (one registry's, never another's) and
    observed on the event loop only, so without prometheus_client's per-metric lock;
    the registry's collector turns the counts into a histogram family at scrape time.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, count of observations <= le)`` per bound, ``+Inf`` last."""
        total, out = 0, []
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            total += count
            out.append(("+Inf" if math.isinf(bound) else repr(bound), float(total)))
        return out


@dataclass(slots=True)
class InputMetrics:
    """Counters of one input durable, since the process started."""

    durable: str
    stream: str
    applied: int = 0
    dead_lettered: int = 0
    batches: int = 0
    last_batch_seconds: float = 0.0
    lag: int | None = None  # num_pending + num_ack_pending at the last heartbeat
    rate: float = 0.0  # messages/s acked, refreshed at each heartbeat
    window: RateWindow = field(default_factory=RateWindow)
    stalled_since: datetime | None = None  # a batch failing to commit, since then
    error: str = ""  # the last failure of that batch
    apply: Buckets = field(default_factory=lambda: Buckets(LATENCY_BUCKETS))
    propagation: Buckets = field(default_factory=lambda: Buckets(PROPAGATION_BUCKETS))


def published_at(reply: str) -> float | None:
    """When JetStream stored a delivered message (Unix seconds), read from its ack
    reply subject (``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.
    <pending>``, or the form with a domain and account hash); None for anything else.
    """
    tokens = reply.split(".")
    token = tokens[7] if len(tokens) == 9 else tokens[9] if len(tokens) >= 11 else ""
    return int(token) / 1e9 if token.isdigit() else None


@dataclass(slots=True)
class ActorMetrics:
    """What one actor instance in this process has done."""

    actor: str
    instance: str
    inputs: dict[str, InputMetrics]
    started_at: datetime
    started_monotonic: float
    store_bytes: int = 0
    # Set once the actor's inputs and services are bound: whether its NATS
    # connection is up now (the readiness check calls it).
    connected: Callable[[], bool] | None = None
    rpc: dict[str, Buckets] = field(default_factory=dict)  # answer seconds by verb
    preempted: int = 0  # outputs whose Msg-Id another subject held (preempt.py)
    heartbeat_at: float | None = None  # Unix time of the last heartbeat written
    lease: LeaseGate | None = None  # its partition's lease, if it takes one

    def record(
        self,
        durable: str,
        accepted: Iterable[bool],
        seconds: float,
        oldest: str = "",
        *,
        now: float | None = None,
    ) -> None:
        """One settled batch: ``accepted`` is True per acked message, False per
        dead-lettered one; ``seconds`` from fetch to settle; ``oldest`` the ack reply
        subject of its first message (its JetStream timestamp gives the batch's
        propagation time, up to ``now``, Unix seconds, default the wall clock). An
        empty batch (a fetch that returned nothing) is not counted."""
        stats = self.inputs[durable]
        accepted = list(accepted)
        if not accepted:
            return
        for ok in accepted:
            if ok:
                stats.applied += 1
            else:
                stats.dead_lettered += 1
        stats.batches += 1
        stats.last_batch_seconds = seconds
        stats.apply.observe(seconds)
        # One observation per batch, the age of its oldest message: the longest any
        # message of it took (parsing every reply would put work on each message).
        at = published_at(oldest) if oldest else None
        if at is not None:
            now = time.time() if now is None else now
            # Two hosts' clocks: a skew may make an age negative; it counts as 0
            # rather than disappearing.
            stats.propagation.observe(max(0.0, now - at))

    def observe_rpc(self, verb: str, seconds: float) -> None:
        """One answered request of ``verb`` (``get``, ``before``, ``sim.step``)."""
        buckets = self.rpc.get(verb)
        if buckets is None:
            buckets = self.rpc[verb] = Buckets(LATENCY_BUCKETS)
        buckets.observe(seconds)

    def refresh_rates(self, now: float) -> None:
        for stats in self.inputs.values():
            stats.rate = stats.window.observe(now, stats.applied)

    def heartbeat(
        self, *, at: datetime, interval: float, stopped: bool = False
    ) -> Heartbeat:
        """The record published for ``worldline status``."""
        return Heartbeat(
            actor=self.actor,
            instance=self.instance,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=self.started_at,
            at=at,
            interval=interval,
            store_bytes=self.store_bytes,
            inputs=tuple(
                InputStatus(
                    durable=s.durable,
                    stream=s.stream,
                    applied=s.applied,
                    dead_lettered=s.dead_lettered,
                    batches=s.batches,
                    rate=round(s.rate, 3),
                    last_batch_seconds=round(s.last_batch_seconds, 6),
                    stalled_since=s.stalled_since,
                    error=s.error,
                )
                for s in self.inputs.values()
            ),
            stopped=stopped,
        )


# The metrics of the actor whose task this is (bound by the consume loop), for the
# services' timing: they run in the actor's tasks but are not handed its metrics.
_CURRENT: ContextVar[ActorMetrics | None] = ContextVar(
    "worldline_actor_metrics", default=None
)


def bind_metrics(metrics: ActorMetrics) -> None:
    """Make ``metrics`` the current task's (and its child tasks') actor metrics."""
    _CURRENT.set(metrics)


def count_preempted() -> None:
    """One output of the current actor found pre-empted and published again."""
    metrics = _CURRENT.get()
    if metrics is not None:
        metrics.preempted += 1


def observe_rpc(subject_pattern: str, seconds: float) -> None:
    """Time one answer of the service on ``subject_pattern`` (``wl.*.rpc.before``)
    for the current actor, if one is bound."""
    metrics = _CURRENT.get()
    if metrics is not None:
        # ``<prefix>.<world>.rpc.<verb>`` (``subjects.rpc_pattern``): the verb.
        metrics.observe_rpc(subject_pattern.split(".", 3)[-1], seconds)


class Registry:
    """Every actor's metrics in one process, and how often they heartbeat."""

    def __init__(self, *, heartbeat_interval: float = HEARTBEAT_INTERVAL) -> None:
        if not heartbeat_interval > 0:
            raise ValueError(
                f"heartbeat interval must be positive, not {heartbeat_interval}"
            )
        self.heartbeat_interval = heartbeat_interval
        self.actors: dict[str, ActorMetrics] = {}
        self.port: int | None = None  # the /metrics port, once serving
        # How many actors this process starts (``run_actors`` sets it): /readyz
        # waits for all of them, not just the first to register.
        self.expected = 0
        self.prometheus = CollectorRegistry()
        self.prometheus.register(_Counters(self))
        ProcessCollector(registry=self.prometheus)
        PlatformCollector(registry=self.prometheus)

    def actor(self, spec: ActorSpec, *, now: datetime | None = None) -> ActorMetrics:
        """The (fresh) metrics of ``spec``'s instance, registered under its name."""
        metrics = ActorMetrics(
            actor=spec.name,
            instance=spec.instance,
            inputs={
                i.consumer.durable: InputMetrics(
                    i.consumer.durable, i.consumer.stream.name
                )
                for i in spec.inputs
            },
            started_at=now or datetime.now(UTC),
            started_monotonic=time.monotonic(),
        )
        self.actors[spec.instance] = metrics
        return metrics

    def readiness(self) -> list[str]:
        """Why this process is not ready (empty: ready): an actor not started yet
        (inputs and services not bound) or not connected to NATS."""
        waiting = [
            f"{name}: starting"
            for name, m in sorted(self.actors.items())
            if m.connected is None
        ]
        waiting += [
            f"{name}: not connected to NATS"
            for name, m in sorted(self.actors.items())
            if m.connected is not None and not m.connected()
        ]
        started = len(self.actors) - len(waiting)
        if not waiting and (started == 0 or started < self.expected):
            waiting.append(
                f"{started} of {max(self.expected, 1)} actors started; waiting"
            )
        return waiting


# --- Prometheus exposition -----------------------------------------------------------


class _Counters:
    """A collector reading the registry's counters and buckets at scrape time: the
    families of the first release under their names, and three histograms."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def describe(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        return self._families(self._registry.actors.values())

    @staticmethod
    def _families(actors: Iterable[ActorMetrics] = ()) -> Iterator[Metric]:
        by_input = ["actor", "durable"]
        applied = CounterMetricFamily(
            "worldline_messages_applied",
            "Messages acked after commit.",
            labels=by_input,
        )
        dead = CounterMetricFamily(
            "worldline_messages_dead_lettered",
            "Messages dead-lettered (termed, sent to the actor's DLQ subject).",
            labels=by_input,
        )
        batches = CounterMetricFamily(
            "worldline_batches", "Batches committed.", labels=by_input
        )
        last = GaugeMetricFamily(
            "worldline_last_batch_apply_seconds",
            "Seconds from fetch to settle of the last batch (apply, publish, ack).",
            labels=by_input,
        )
        lag = GaugeMetricFamily(
            "worldline_consumer_lag",
            "Messages pending or awaiting ack on the durable at the last heartbeat.",
            labels=by_input,
        )
        size = GaugeMetricFamily(
            "worldline_store_bytes", "Bytes of the actor's LMDB file in use.",
            labels=["actor"],
        )  # fmt: skip
        start = GaugeMetricFamily(
            "worldline_start_time_seconds", "Unix time the actor started.",
            labels=["actor"],
        )  # fmt: skip
        preempted = CounterMetricFamily(
            "worldline_outputs_preempted",
            "Outputs whose Nats-Msg-Id a message on another subject held first, "
            "published again.",
            labels=["actor"],
        )
        for m in sorted(actors, key=lambda a: a.instance):
            for s in m.inputs.values():
                labels = [m.instance, s.durable]
                applied.add_metric(labels, s.applied)
                dead.add_metric(labels, s.dead_lettered)
                batches.add_metric(labels, s.batches)
                last.add_metric(labels, s.last_batch_seconds)
                if s.lag is not None:  # unknown until the first heartbeat
                    lag.add_metric(labels, s.lag)
            size.add_metric([m.instance], m.store_bytes)
            start.add_metric([m.instance], m.started_at.timestamp())
            preempted.add_metric([m.instance], m.preempted)
        yield from (applied, dead, batches, last, lag, size, start, preempted)
        yield from _liveness(actors)
        yield from _histograms(actors)


def _liveness(actors: Iterable[ActorMetrics]) -> Iterator[Metric]:
    """Whether each actor heartbeats, commits and (a materializer) holds its lease:
    what the alert rules of deploy/k8s/alerts.yaml read."""
    beat = GaugeMetricFamily(
        "worldline_heartbeat_time_seconds",
        "Unix time of the last heartbeat the actor wrote to wl-status.",
        labels=["actor"],
    )
    stalled = GaugeMetricFamily(
        "worldline_input_stalled",
        "1 while a batch of this input fails to commit and is retried, else 0.",
        labels=["actor", "durable"],
    )
    held = GaugeMetricFamily(
        "worldline_lease_held",
        "1 while this replica holds its partition's lease and may publish, else 0.",
        labels=["actor", "lease"],
    )
    term = GaugeMetricFamily(
        "worldline_lease_term",
        "Term of the partition's lease as this replica last read it (one more at "
        "each takeover).",
        labels=["actor", "lease"],
    )
    for m in sorted(actors, key=lambda a: a.instance):
        if m.heartbeat_at is not None:  # none before the first heartbeat
            beat.add_metric([m.instance], m.heartbeat_at)
        for s in m.inputs.values():
            stuck = s.stalled_since is not None
            stalled.add_metric([m.instance, s.durable], int(stuck))
        if m.lease is not None:
            held.add_metric([m.instance, m.lease.key], int(m.lease.active))
            term.add_metric([m.instance, m.lease.key], m.lease.seen_term)
    yield from (beat, stalled, held, term)


def _histograms(actors: Iterable[ActorMetrics]) -> Iterator[Metric]:
    apply = HistogramMetricFamily(
        "worldline_apply_seconds",
        "Seconds from fetch to settle of each committed batch (apply in one LMDB "
        "transaction, publish the outputs, ack).",
        labels=["actor", "durable"],
    )
    propagation = HistogramMetricFamily(
        "worldline_propagation_seconds",
        "Per committed batch, seconds from its oldest message's store in JetStream to "
        "the commit here; on fusion's durable: op published -> posterior applied.",
        labels=["actor", "durable"],
    )
    rpc = HistogramMetricFamily(
        "worldline_rpc_seconds",
        "Seconds to answer one request (read, encode, send), by verb: before, get, "
        "view, state_hash, sim.step, ...",
        labels=["actor", "verb"],
    )
    for m in sorted(actors, key=lambda a: a.instance):
        for s in m.inputs.values():
            for family, b in ((apply, s.apply), (propagation, s.propagation)):
                family.add_metric([m.instance, s.durable], b.cumulative(), b.sum)
        for verb, b in sorted(m.rpc.items()):
            rpc.add_metric([m.instance, verb], b.cumulative(), b.sum)
    yield from (apply, propagation, rpc)


def render(registry: Registry) -> str:
    """The registry in the Prometheus text exposition format (0.0.4)."""
    return generate_latest(registry.prometheus).decode()

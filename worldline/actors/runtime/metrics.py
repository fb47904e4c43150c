"""Counters each actor process keeps, and an opt-in Prometheus ``/metrics`` endpoint.

The consume loop records every settled batch in its actor's :class:`ActorMetrics`
(applied and dead-lettered messages, batches, the last batch's duration per input
durable); the heartbeat (``heartbeat.py``) adds the store size and consumer lag, and
publishes the same numbers for ``worldline status``. A :class:`Registry` holds the
metrics of every actor in the process, so ``worldline up`` serves one endpoint with an
``actor`` label.

The endpoint is a tiny HTTP/1.0 server on anyio (no dependency): ``GET /metrics``
answers the Prometheus text exposition format (version 0.0.4); any other path is 404,
any other method 405. It runs in the supervisor's task group and stops on cancel.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio
from anyio.abc import SocketAttribute

from worldline.protocols.status import Heartbeat, InputStatus

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from anyio.abc import SocketStream, TaskStatus

    from worldline.actors.runtime.spec import ActorSpec

__all__ = [
    "HEARTBEAT_INTERVAL",
    "ActorMetrics",
    "InputMetrics",
    "RateWindow",
    "Registry",
    "answer",
    "render",
    "serve_metrics",
]

log = logging.getLogger("worldline.metrics")

HEARTBEAT_INTERVAL = 5.0  # seconds between heartbeats (and lag/size refreshes)
RATE_WINDOW = 60.0  # seconds the applied rate is averaged over
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_REQUEST = 8192  # bytes of request head read before answering 400
REQUEST_TIMEOUT = 5.0  # seconds a client may take to send its request head


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


@dataclass(slots=True)
class ActorMetrics:
    """What one actor instance in this process has done."""

    actor: str
    instance: str
    inputs: dict[str, InputMetrics]
    started_at: datetime
    started_monotonic: float
    store_bytes: int = 0

    def record(self, durable: str, accepted: Iterable[bool], seconds: float) -> None:
        """One settled batch: ``accepted`` is True per acked message, False per
        dead-lettered one; ``seconds`` from fetch to settle. An empty batch (a
        fetch that returned nothing) is not counted."""
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


# --- Prometheus text format ----------------------------------------------------------


def _label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if isinstance(value, float) else str(value)


_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("worldline_messages_applied_total", "counter", "Messages acked after commit."),
    (
        "worldline_messages_dead_lettered_total",
        "counter",
        "Messages dead-lettered (termed, sent to the actor's DLQ subject).",
    ),
    ("worldline_batches_total", "counter", "Batches committed."),
    (
        "worldline_last_batch_apply_seconds",
        "gauge",
        "Seconds from fetch to settle of the last batch (apply, publish, ack).",
    ),
    (
        "worldline_consumer_lag",
        "gauge",
        "Messages pending or awaiting ack on the durable at the last heartbeat.",
    ),
    ("worldline_store_bytes", "gauge", "Bytes of the actor's LMDB file in use."),
    ("worldline_start_time_seconds", "gauge", "Unix time the actor started."),
)


def render(registry: Registry) -> str:
    """The registry in the Prometheus text exposition format (0.0.4)."""
    samples: dict[str, list[str]] = {name: [] for name, _, _ in _FAMILIES}
    for m in sorted(registry.actors.values(), key=lambda a: a.instance):
        actor = f'actor="{_label(m.instance)}"'
        for s in m.inputs.values():
            labels = f'{{{actor},durable="{_label(s.durable)}"}}'
            samples["worldline_messages_applied_total"].append(f"{labels} {s.applied}")
            samples["worldline_messages_dead_lettered_total"].append(
                f"{labels} {s.dead_lettered}"
            )
            samples["worldline_batches_total"].append(f"{labels} {s.batches}")
            samples["worldline_last_batch_apply_seconds"].append(
                f"{labels} {_number(s.last_batch_seconds)}"
            )
            if s.lag is not None:
                samples["worldline_consumer_lag"].append(f"{labels} {s.lag}")
        samples["worldline_store_bytes"].append(f"{{{actor}}} {m.store_bytes}")
        samples["worldline_start_time_seconds"].append(
            f"{{{actor}}} {_number(m.started_at.timestamp())}"
        )
    lines = []
    for name, kind, help_text in _FAMILIES:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines += [f"{name}{sample}" for sample in samples[name]]
    return "\n".join(lines) + "\n"


# --- the HTTP endpoint ---------------------------------------------------------------


def _response(status: str, body: str, content_type: str = "text/plain") -> bytes:
    payload = body.encode()
    head = (
        f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + payload


def answer(request_head: bytes, body: Callable[[], str]) -> bytes:
    """The HTTP response to one request head (pure, so tests can call it)."""
    line = request_head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return _response("400 Bad Request", "bad request line\n")
    method, target = parts[0], parts[1].split("?", 1)[0]
    if target != "/metrics":
        return _response("404 Not Found", "only /metrics is served here\n")
    if method not in ("GET", "HEAD"):
        return _response("405 Method Not Allowed", "use GET\n")
    response = _response("200 OK", body(), CONTENT_TYPE)
    if method == "HEAD":
        return response.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
    return response


async def _read_head(stream: SocketStream) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head and b"\n\n" not in head:
        if len(head) > MAX_REQUEST:
            break
        try:
            head += await stream.receive(4096)
        except anyio.EndOfStream:
            break
    return head


async def serve_metrics(
    registry: Registry,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``GET /metrics`` for ``registry`` until cancelled.

    Reports started with the bound port (``port=0`` picks a free one) and stores it in
    ``registry.port``.

    Raises:
        OSError: the address cannot be bound (in use, not local).
    """

    async def handle(stream: SocketStream) -> None:
        async with stream:
            try:
                with anyio.fail_after(REQUEST_TIMEOUT):
                    head = await _read_head(stream)
                await stream.send(answer(head, lambda: render(registry)))
            except (TimeoutError, anyio.BrokenResourceError, OSError) as exc:
                log.debug("metrics request dropped: %s", exc)

    listener = await anyio.create_tcp_listener(
        local_host=host, local_port=port, reuse_port=False
    )
    async with listener:
        bound = int(listener.extra(SocketAttribute.local_port))
        registry.port = bound
        log.debug("metrics: http://%s:%d/metrics", host, bound)
        task_status.started(bound)
        await listener.serve(handle)

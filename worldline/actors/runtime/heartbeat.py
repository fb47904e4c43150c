"""Each actor process writes a heartbeat to the ``wl-status`` KV bucket.

Every ``interval`` seconds (first at start-up): refresh the store size and each input
durable's consumer lag in the actor's :class:`ActorMetrics`, update its applied rate,
and put a :class:`Heartbeat` under ``<instance>.<host>-<pid>``. On cancel, one last
heartbeat marked ``stopped`` is written (shielded, bounded), so ``worldline status``
tells a clean stop from a crash (a crashed process just goes stale, then the bucket's
TTL removes it). A failed put or lag query is logged and retried at the next tick: the
heartbeat never stops an actor.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from functools import partial
from typing import TYPE_CHECKING

import anyio
import nats.errors

from worldline.actors.runtime.bus import describe
from worldline.actors.runtime.declare import answered
from worldline.protocols.messages import encode
from worldline.protocols.subjects import STATUS, status_key

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from anyio.abc import TaskStatus
    from nats.js import JetStreamContext

    from worldline.actors.runtime.metrics import ActorMetrics
    from worldline.actors.runtime.store import Store

__all__ = ["run_heartbeat"]

log = logging.getLogger("worldline.heartbeat")

GRACE = 2.0  # seconds the final "stopped" heartbeat may take


async def _refresh(js: JetStreamContext, store: Store, metrics: ActorMetrics) -> None:
    metrics.store_bytes = store.size_bytes()
    for stats in metrics.inputs.values():
        try:
            info = await js.consumer_info(stats.stream, stats.durable)
        except (nats.errors.Error, TimeoutError) as exc:
            log.debug("%s: no consumer info for %s: %s", metrics.instance, stats, exc)
            stats.lag = None
            continue
        stats.lag = (info.num_pending or 0) + (info.num_ack_pending or 0)
    metrics.refresh_rates(time.monotonic())


async def run_heartbeat(
    js: JetStreamContext,
    store: Store,
    metrics: ActorMetrics,
    interval: float,
    clock: Callable[[], datetime],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Heartbeat every ``interval`` seconds until cancelled (see the module doc)."""
    key = status_key(metrics.instance, socket.gethostname(), os.getpid())
    # Inside the start-up retry: a cluster may still be electing its leader.
    bucket = partial(js.key_value, STATUS.bucket)
    kv = await answered(f"{key}: bucket {STATUS.bucket}", bucket)
    task_status.started()
    try:
        while True:
            try:
                with anyio.fail_after(max(interval, 2.0)):
                    await _refresh(js, store, metrics)
                    record = metrics.heartbeat(at=clock(), interval=interval)
                    await kv.put(key, encode(record))
                    metrics.heartbeat_at = record.at.timestamp()
            except (nats.errors.Error, TimeoutError) as exc:
                log.warning(
                    "%s: heartbeat not written: %s", metrics.instance, describe(exc)
                )
            await anyio.sleep(interval)
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(GRACE):
            record = metrics.heartbeat(at=clock(), interval=interval, stopped=True)
            try:
                await kv.put(key, encode(record))
            except (nats.errors.Error, TimeoutError) as exc:
                log.debug(
                    "%s: final heartbeat not written: %s",
                    metrics.instance,
                    describe(exc),
                )

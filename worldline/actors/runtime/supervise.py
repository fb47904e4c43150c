"""Run several actors in one process under one task group (the embedded default)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import anyio

from worldline.actors.runtime.consume import Clock, run_actor, utcnow
from worldline.actors.runtime.endpoint import serve_metrics
from worldline.actors.runtime.metrics import Registry

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from anyio.abc import TaskStatus

    from worldline.actors.runtime.spec import ActorSpec

__all__ = ["run_actors"]


async def run_actors(
    specs: Sequence[ActorSpec],
    *,
    url: str,
    data: Path,
    clock: Clock = utcnow,
    metrics: Registry | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Start every actor, report started once all consume, run until cancelled.

    If one actor fails, the task group cancels the others and the error propagates:
    a half-running world is worse than a stopped one with a clear error.

    All actors count into one ``metrics`` registry; with ``metrics_port`` (0: a free
    port, then in ``metrics.port``) it is served on ``GET /metrics``, every sample
    labelled with its ``actor`` instance.
    """
    registry = metrics or Registry()
    registry.expected += len(specs)  # /readyz waits for every one
    async with anyio.create_task_group() as tg:
        if metrics_port is not None:
            await tg.start(
                partial(serve_metrics, registry, host=metrics_host, port=metrics_port)
            )
        for spec in specs:
            await tg.start(
                partial(
                    run_actor, spec, url=url, data=data, clock=clock, metrics=registry
                )
            )
        task_status.started()

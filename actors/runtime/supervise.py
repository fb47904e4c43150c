"""Run several actors in one process under one task group (the embedded default)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import anyio

from actors.runtime.consume import Clock, run_actor, utcnow

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from anyio.abc import TaskStatus

    from actors.runtime.spec import ActorSpec

__all__ = ["run_actors"]


async def run_actors(
    specs: Sequence[ActorSpec],
    *,
    url: str,
    data: Path,
    clock: Clock = utcnow,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Start every actor, report started once all consume, run until cancelled.

    If one actor fails, the task group cancels the others and the error propagates:
    a half-running world is worse than a stopped one with a clear error.
    """
    async with anyio.create_task_group() as tg:
        for spec in specs:
            await tg.start(partial(run_actor, spec, url=url, data=data, clock=clock))
        task_status.started()

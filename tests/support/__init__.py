"""Test support shipped with the suite: a real nats-server and in-process actors."""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from worldline.actors.registry import ACTORS, build
from worldline.actors.runtime.supervise import run_actors

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from worldline.actors.runtime.spec import ActorSpec

__all__ = ["TRACES", "all_actors", "running", "unique_world"]


def unique_world(prefix: str = "t") -> str:
    """A fresh world name, so tests sharing one server never see each other's data."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def all_actors() -> list[ActorSpec]:
    return [build(name) for name in ACTORS]


@asynccontextmanager
async def running(
    specs: Sequence[ActorSpec], *, url: str, data: Path
) -> AsyncIterator[None]:
    """Run ``specs`` in this task until the block exits; every input is bound on
    entry."""
    async with anyio.create_task_group() as tg:
        await tg.start(partial(run_actors, specs, url=url, data=data))
        yield
        tg.cancel_scope.cancel()


# Real traces written by others (licenses and provenance in tests/data/README.md),
# shipped with the suite so a clone runs it on its own. Tests only read them.
TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"

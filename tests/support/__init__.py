"""Test support shipped with the suite: a real nats-server and in-process actors."""

from __future__ import annotations

import os
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

    import worldline
    from worldline.actors.runtime.spec import ActorSpec
    from worldline.protocols.base import Belief

__all__ = ["TRACES", "all_actors", "cli_env", "listed", "running", "unique_world"]


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


def cli_env(url: str, world: str, agent: str = "ada") -> dict[str, str]:
    """The environment a ``worldline`` command run by a test reads its bus, world
    and agent from."""
    return {
        **os.environ,
        "WORLDLINE_NATS": url,
        "WORLDLINE_WORLD": world,
        "WORLDLINE_AGENT": agent,
    }


async def listed(world: worldline.World, text: str, wait: float = 10) -> Belief:
    """The belief with ``text`` once ``world`` lists it (extraction is
    asynchronous); fails the test after ``wait`` seconds."""
    with anyio.fail_after(wait):
        while True:
            found = [b for b in await world.list() if b.text == text]
            if found:
                return found[0]
            await anyio.sleep(0.05)


# Real traces written by others (licenses and provenance in tests/data/README.md),
# shipped with the suite so a clone runs it on its own. Tests only read them.
TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"

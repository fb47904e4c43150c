"""What the console shows, read through the SDK and the operator's status read.

:func:`snapshot` reads every panel at once (beliefs, contradictions, sources,
calibration, agents, actors); a panel whose read fails carries its error instead of
failing the page. :func:`belief_detail` is one belief's trace (every evidence item and
how the confidence moved: its history). Both return plain JSON-ready dicts
(``msgspec.to_builtins``): the page renders them as they come.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from worldline.ops.status import gather
from worldline.protocols.world import agents_named

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from worldline.sdk.client import World

__all__ = ["BELIEF_LIMIT", "belief_detail", "snapshot"]

log = logging.getLogger("worldline.console")

BELIEF_LIMIT = 500  # beliefs on the page: the first the projector lists
_STATUS_WITHIN = 5.0  # seconds the actors' status read may take


def _plain(value: Any) -> Any:
    return msgspec.to_builtins(value)


async def _panel(
    name: str, read: Callable[[], Awaitable[Any]], out: dict[str, Any]
) -> None:
    """Run ``read`` into ``out[name]``, or its error into ``out["errors"]``."""
    try:
        out[name] = await read()
    except Exception as exc:  # a panel's failure is shown, never the page's
        log.debug("console panel %s: %s", name, exc)
        out[name] = None
        out["errors"][name] = f"{type(exc).__name__}: {exc}"


async def _beliefs(world: World) -> list[dict[str, Any]]:
    found = await world.list(status="any", limit=BELIEF_LIMIT)
    rows = sorted(found, key=lambda b: b.updated_at, reverse=True)
    return [_plain(belief) for belief in rows]


async def _agents(world: World, served: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every agent the world declares, is present, or the gateway serves: its
    presence, inbox depth and current (standing) worldview."""
    present = {p.agent: p for p in await world.who()}
    crew = await world.read_world(entity_type="none", beliefs=False)
    names = set(present) | set(served)
    if crew.declaration is not None:
        names |= agents_named(crew.declaration)
    ordered = sorted(names)
    views = await asyncio.gather(*(world.view(name) for name in ordered))
    rows: list[dict[str, Any]] = []
    for name, view in zip(ordered, views, strict=True):
        presence = present.get(name)
        standing = view.worldview if view is not None else None
        rows.append(
            {
                "agent": name,
                "present": presence is not None,
                "status": presence.status if presence else "",
                "task": presence.task if presence else "",
                "seen_at": _plain(presence.at) if presence else None,
                "inbox_pending": view.inbox_pending if view is not None else 0,
                "work": [entity.id for entity in view.work] if view else [],
                "worldview": standing.prompt if standing is not None else "",
                "clarity": standing.clarity if standing is not None else None,
            }
        )
    return rows


async def _actors(url: str, creds: Path | None) -> list[dict[str, Any]]:
    with anyio.fail_after(_STATUS_WITHIN):
        report = await gather(url, now=datetime.now(UTC), creds=creds)
    rows: list[dict[str, Any]] = []
    for row in report.instances:
        lags = [i.lag for i in row.inputs if i.lag is not None]
        rows.append(
            {
                "actor": row.actor,
                "instance": row.instance,
                "state": row.state,
                "lag": sum(lags) if lags else None,
                "dead_letters": row.dlq,
                "heartbeat_age_seconds": row.heartbeat_age_seconds,
                "host": row.host,
            }
        )
    return rows


async def snapshot(
    world: World,
    *,
    url: str,
    served: tuple[str, ...],
    creds: Path | None = None,
) -> dict[str, Any]:
    """Every panel of the console, read at once (``url`` and ``creds``: the bus and
    the console's credentials, for the actors' status; ``served``: the agents the
    gateway serves)."""
    out: dict[str, Any] = {
        "world": world.world,
        "at": _plain(datetime.now(UTC)),
        "errors": {},
    }

    async def sources() -> Any:
        return _plain(await world.sources(limit=200))

    async def calibration() -> Any:
        return _plain(await world.calibration())

    async def contradictions() -> Any:
        return _plain(await world.contradictions(status="all", limit=200))

    async with anyio.create_task_group() as tg:
        tg.start_soon(_panel, "beliefs", lambda: _beliefs(world), out)
        tg.start_soon(_panel, "contradictions", contradictions, out)
        tg.start_soon(_panel, "sources", sources, out)
        tg.start_soon(_panel, "calibration", calibration, out)
        tg.start_soon(_panel, "agents", lambda: _agents(world, served), out)
        tg.start_soon(_panel, "actors", lambda: _actors(url, creds), out)
    return out


async def belief_detail(world: World, belief_id: str) -> dict[str, Any]:
    """One belief with its trace: each evidence item, its source, and the
    confidence before and after it (the belief's history), the weights applied and
    its edges.

    Raises:
        BadRequest: no belief with that id in this world.
    """
    return dict(_plain(await world.trace(belief_id)))

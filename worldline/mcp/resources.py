"""Each agent's worldview, startup view and inbox as MCP resources, and the
resource-updated notifications that tell subscribed clients when they change.

The URIs name the agent (``worldline://agents/ada/worldview``, ``.../view``,
``.../inbox``): over HTTP one server serves several agents, and an agent reads only
its own (another's is refused). :func:`follow` drives the notifications from the
SDK's :meth:`~worldline.sdk.client.World.watch`: the projector pushes an agent's view
(with its standing worldview and its inbox's pending count and recent ids) whenever
its bytes change; each push is compared part by part with the one before, and each
part that changed is published as ``notifications/resources/updated`` to the clients
listening for that URI (``subscriptions/listen``).
"""

from __future__ import annotations

import hashlib
import logging
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.resources import FunctionResource
from mcp.server.subscriptions import ResourceUpdated, SubscriptionBus

from worldline.actors.runtime.errors import ActorError
from worldline.mcp.common import Agents, as_json
from worldline.mcp.reads import _views, fingerprint
from worldline.sdk.errors import WorldlineError

if TYPE_CHECKING:
    from worldline.protocols.rpc import AgentView
    from worldline.sdk.client import World

__all__ = ["RESOURCES", "follow", "resource_uri", "resources"]

log = logging.getLogger("worldline.mcp")

RESOURCES = ("worldview", "view", "inbox")
_RETRY = 1.0  # seconds before watching again after the bus failed the watch


def resource_uri(agent: str, part: str) -> str:
    return f"worldline://agents/{agent}/{part}"


def _digest(value: Any) -> str:
    return hashlib.sha256(msgspec.json.encode(value, order="sorted")).hexdigest()


def parts(view: AgentView) -> dict[str, str]:
    """A digest of each resource's part of a pushed view."""
    return {
        "worldview": fingerprint(view.worldview),
        "view": _digest(view),
        "inbox": _digest([view.inbox_pending, view.inbox_recent]),
    }


async def follow(agent: str, world: World, bus: SubscriptionBus) -> None:
    """Publish an update for each of ``agent``'s resources whose part of its pushed
    view changed, until cancelled; a failed watch (the bus went away) is logged
    and started again."""
    last: dict[str, str] | None = None
    while True:
        try:
            async with aclosing(_views(world)) as views:
                async for view in views:
                    now = parts(view)
                    if last is not None:
                        for part, digest in now.items():
                            if last.get(part) != digest:
                                uri = resource_uri(agent, part)
                                await bus.publish(ResourceUpdated(uri=uri))
                    last = now
        except (WorldlineError, ActorError) as exc:
            log.warning("watching %s's view: %s; again in %gs", agent, exc, _RETRY)
        await anyio.sleep(_RETRY)


def _own(agents: Agents, agent: str) -> World:
    caller = agents.caller()
    if caller != agent:
        raise ResourceError(
            f"{resource_uri(agent, '...')} is {agent}'s; you are {caller}: read "
            f"{resource_uri(caller, '...')}"
        )
    return agents.worlds[agent]


def resources(agents: Agents) -> list[FunctionResource]:
    """The three resources of every agent the server acts for."""
    found: list[FunctionResource] = []
    for agent in agents.names:
        found += _agent_resources(agents, agent)
    return found


def _agent_resources(agents: Agents, agent: str) -> list[FunctionResource]:
    async def worldview() -> str:
        view = await _own(agents, agent).view()
        standing = view.worldview if view is not None else None
        return msgspec.json.encode(standing, order="sorted").decode()

    async def startup_view() -> str:
        view = await _own(agents, agent).view()
        return msgspec.json.encode(view, order="sorted").decode()

    async def inbox() -> str:
        world = _own(agents, agent)
        items = await world.inbox(wait=0.2)
        try:
            messages = [{"seq": i.seq, **as_json(i.message)} for i in items]
        finally:
            for item in items:
                await item.release()
        return msgspec.json.encode({"messages": messages}).decode()

    def make(fn: Any, part: str, title: str, description: str) -> FunctionResource:
        return FunctionResource.from_function(
            fn,
            uri=resource_uri(agent, part),
            name=f"{agent}-{part}",
            title=f"{title} ({agent})",
            description=description,
            mime_type="application/json",
        )

    return [
        make(
            worldview,
            "worldview",
            "Standing worldview",
            "Your standing worldview (your goals and work as the query): beliefs "
            "in play, gaps, policy, allowed actions and ranked moves; null before "
            "the world is declared.",
        ),
        make(
            startup_view,
            "view",
            "Startup view",
            "Yourself, what you are linked to, your open work, inbox summary, what "
            "you may write, goals, constraints and principals.",
        ),
        make(
            inbox,
            "inbox",
            "Inbox",
            "Your unacknowledged inbox messages, oldest first (reading does not "
            "acknowledge them; the inbox tool with ack does).",
        ),
    ]

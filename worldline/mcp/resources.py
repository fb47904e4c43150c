"""Each agent's worldview, startup view and inbox as MCP resources, and the
resource-updated notifications that tell subscribed clients when they change.

The URIs name the agent (``worldline://agents/ada/worldview``, ``.../view``,
``.../inbox``): over HTTP one server serves several agents, and an agent sees only its
own: ``resources/list`` lists the caller's three, and reading, subscribing to or
listening for any other URI (another agent's, or one that names no agent the server
serves) is refused with the same message, so a caller learns nothing of the roster.
:func:`follow` drives the notifications from the SDK's
:meth:`~worldline.sdk.client.World.watch`: the projector pushes an agent's view (with
its standing worldview and its inbox's pending count and recent ids) whenever its
bytes change; each push is compared part by part with the one before, and each
part that changed is published as ``notifications/resources/updated`` to the clients
listening for that URI (``subscriptions/listen``, 2026-era) or subscribed to it
(``resources/subscribe``, 2025-era).
"""

from __future__ import annotations

import hashlib
import logging
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.resources import FunctionResource
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ResourceUpdated,
)
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    EmptyResult,
    ListResourcesResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    UnsubscribeRequestParams,
)

from worldline.actors.runtime.errors import ActorError
from worldline.mcp.common import Agents, as_json
from worldline.mcp.reads import _views, fingerprint
from worldline.sdk.errors import WorldlineError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mcp.server.context import ServerRequestContext
    from mcp.server.mcpserver import MCPServer
    from mcp.server.session import ServerSession
    from mcp.types import (
        InputRequiredResult,
        ReadResourceResult,
        SubscriptionsListenResult,
    )

    from worldline.protocols.rpc import AgentView
    from worldline.sdk.client import World

__all__ = ["RESOURCES", "Updates", "follow", "resource_uri", "resources"]

log = logging.getLogger("worldline.mcp")

RESOURCES = ("worldview", "view", "inbox")
_RETRY = 1.0  # seconds before watching again after the bus failed the watch


def resource_uri(agent: str, part: str) -> str:
    return f"worldline://agents/{agent}/{part}"


def _digest(value: Any) -> str:
    return hashlib.sha256(msgspec.json.encode(value, order="sorted")).hexdigest()


def parts(view: AgentView | None) -> dict[str, str]:
    """A digest of each resource's part of a pushed view (all "" for none)."""
    if view is None:
        return dict.fromkeys(RESOURCES, "")
    return {
        "worldview": fingerprint(view.worldview),
        "view": _digest(view),
        "inbox": _digest([view.inbox_pending, view.inbox_recent]),
    }


class Updates:
    """Where resource-updated notifications go: the ``subscriptions/listen``
    streams of 2026-era clients (the SDK's subscription bus), and the connections
    of 2025-era clients that asked with ``resources/subscribe`` (their own URIs
    only: another agent's is refused)."""

    def __init__(self, agents: Agents) -> None:
        self.agents = agents
        self.bus = InMemorySubscriptionBus()
        # uri -> {connection key: its session (notifies on the connection's channel)}
        self._subscribed: dict[str, dict[str, ServerSession]] = {}

    def install(self, server: MCPServer) -> None:
        """Serve ``resources/subscribe`` and ``resources/unsubscribe`` (2025-era
        wire; MCPServer leaves them to the low-level server), and scope to the
        caller what MCPServer serves for every agent alike: ``resources/list``,
        ``resources/read`` and ``subscriptions/listen``."""
        lowlevel = server._lowlevel_server
        lowlevel.add_request_handler(
            "resources/subscribe", SubscribeRequestParams, self._subscribe
        )
        lowlevel.add_request_handler(
            "resources/unsubscribe", UnsubscribeRequestParams, self._unsubscribe
        )

        async def listed(
            ctx: ServerRequestContext[Any], params: PaginatedRequestParams
        ) -> ListResourcesResult:
            own = self._own_uris("list")
            every = await server.list_resources()
            return ListResourcesResult(
                resources=[r for r in every if str(r.uri) in own]
            )

        async def read(
            ctx: ServerRequestContext[Any], params: ReadResourceRequestParams
        ) -> ReadResourceResult | InputRequiredResult:
            self._check("read", [params.uri])
            return await server._handle_read_resource(ctx, params)

        listen = ListenHandler(self.bus)

        async def listened(
            ctx: ServerRequestContext[Any], params: SubscriptionsListenRequestParams
        ) -> SubscriptionsListenResult:
            self._check("listen for", params.notifications.resource_subscriptions or [])
            return await listen(ctx, params)

        lowlevel.add_request_handler("resources/list", PaginatedRequestParams, listed)
        lowlevel.add_request_handler("resources/read", ReadResourceRequestParams, read)
        lowlevel.add_request_handler(
            "subscriptions/listen", SubscriptionsListenRequestParams, listened
        )

    def _own_uris(self, verb: str) -> frozenset[str]:
        """The caller's resource URIs (over HTTP, a request without a known token
        is refused)."""
        try:
            caller = self.agents.caller()
        except ToolError as exc:  # the HTTP layer refuses those first
            raise MCPError(INVALID_PARAMS, f"cannot {verb}: {exc}") from exc
        return frozenset(resource_uri(caller, part) for part in RESOURCES)

    def _check(self, verb: str, uris: Sequence[str]) -> None:
        """Refuse any URI that is not the caller's: one message for another agent's
        and for one that names no agent served, so none learns who else is."""
        own = self._own_uris(verb)
        for uri in uris:
            if str(uri) not in own:
                caller = self.agents.caller()
                raise MCPError(
                    INVALID_PARAMS,
                    f"cannot {verb} {uri}: you are {caller}; your resources are "
                    f"{resource_uri(caller, '{worldview,view,inbox}')}",
                )

    async def _subscribe(
        self, ctx: ServerRequestContext[Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        self._check("subscribe to", [params.uri])
        self._subscribed.setdefault(params.uri, {})[_connection(ctx)] = ctx.session
        return EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        self._subscribed.get(params.uri, {}).pop(_connection(ctx), None)
        return EmptyResult()

    async def publish(self, uri: str) -> None:
        await self.bus.publish(ResourceUpdated(uri=uri))
        for key, session in list(self._subscribed.get(uri, {}).items()):
            try:
                await session.send_resource_updated(uri)
            except Exception as exc:  # a client gone: forget it
                log.info("dropping a subscriber of %s: %r", uri, exc)
                self._subscribed[uri].pop(key, None)


def _connection(ctx: ServerRequestContext[Any]) -> str:
    """Which client connection a request came on: its HTTP session id, or the one
    stdio pipe."""
    headers = getattr(ctx.request, "headers", None)
    return str(headers.get("mcp-session-id", "")) if headers is not None else ""


async def follow(agent: str, world: World, updates: Updates) -> None:
    """Publish an update for each of ``agent``'s resources whose part of its pushed
    view changed, until cancelled; a failed watch (the bus went away) is logged
    and started again."""
    # From "no view": the first push after the server starts (or after the bus
    # came back) is compared with what was seen last, so no change is missed; at
    # worst a client hears of one it has already read.
    last = parts(None)
    failed = ""  # the last failure, said once (not every retry)
    while True:
        try:
            async with aclosing(_views(world)) as views:
                async for view in views:
                    now = parts(view)
                    for part, digest in now.items():
                        if last.get(part) != digest:
                            await updates.publish(resource_uri(agent, part))
                    last = now
        except (WorldlineError, ActorError) as exc:
            said, failed = failed, str(exc)
            level = logging.DEBUG if failed == said else logging.WARNING
            log.log(level, "watching %s's view: %s; again in %gs", agent, exc, _RETRY)
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

"""One deployable gateway: MCP over streamable HTTP (``/mcp``), the console
(``/console/``), and what an orchestrator and Prometheus ask of a process:

- ``GET /healthz``: 200 while the process serves HTTP (liveness);
- ``GET /readyz``: 200 once the console's bus connection is up and it follows the
  change feed, else 503 naming what is missing (readiness);
- ``GET /metrics``: Prometheus text from ``prometheus_client`` (a registry of the
  gateway's own): requests by route and code, their latency, open console streams,
  changes seen on the feed, the bus connection, and the library's process metrics.

:func:`gateway` is the hook :func:`worldline.mcp.server.serve_http` calls with the
MCP app: it opens the console's bus connection (``--console-creds``, else the
process's ``--creds`` or ``$WORLDLINE_CREDS``: an operator's or a reader's, never an
agent's), starts following the feed, and returns the whole ASGI app.
"""

from __future__ import annotations

import logging
import time
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.process_collector import ProcessCollector
from starlette.responses import Response
from starlette.routing import Route

from worldline.actors.runtime.bus import connect as bus_connect
from worldline.actors.runtime.errors import ActorError
from worldline.console.app import console_off, console_routes
from worldline.console.feed import Feed
from worldline.sdk.client import connect
from worldline.sdk.errors import WorldlineError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from nats.aio.client import Client as NATS
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from worldline.mcp.auth import Tokens
    from worldline.mcp.common import Agents

__all__ = ["CONSOLE_AGENT", "GatewayMetrics", "gateway", "route_of"]

log = logging.getLogger("worldline.gateway")

CONSOLE_AGENT = "console"  # the name the console's own connection reads as


def route_of(path: str) -> str:
    """The metrics label of a request path: its first segment (bounded: never an
    id)."""
    first = path.strip("/").split("/", 1)[0]
    return (
        first
        if first in {"mcp", "console", "healthz", "readyz", "metrics"}
        else "other"
    )


class GatewayMetrics:
    """The gateway's Prometheus registry and the families it keeps."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self.requests = Counter(
            "worldline_gateway_requests",
            "HTTP requests answered, by route and status code",
            ["route", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "worldline_gateway_request_seconds",
            "Time to answer an HTTP request (a stream: until it closed)",
            ["route"],
            registry=self.registry,
        )
        self.streams = Gauge(
            "worldline_gateway_console_streams",
            "Console event streams open now",
            registry=self.registry,
        )
        self.changes = Gauge(
            "worldline_gateway_feed_changes",
            "Changes seen on the world's change feed since the gateway started",
            registry=self.registry,
        )
        self.connected = Gauge(
            "worldline_gateway_bus_connected",
            "1 while the console's bus connection is up",
            registry=self.registry,
        )

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app``, counting and timing each HTTP request."""

        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            route = route_of(scope.get("path", ""))
            code = 500
            began = time.perf_counter()
            stream = scope.get("path") == "/console/api/events"

            async def sending(message: Message) -> None:
                nonlocal code
                if message["type"] == "http.response.start":
                    code = int(message["status"])
                    if stream and code == 200:
                        self.streams.inc()
                await send(message)

            try:
                await app(scope, receive, sending)
            finally:
                if stream and code == 200:
                    self.streams.dec()
                self.requests.labels(route, str(code)).inc()
                self.latency.labels(route).observe(time.perf_counter() - began)

        return counted


def _ready(nc: NATS | None, feed: Feed, off: str) -> tuple[bool, str]:
    """Whether the gateway is ready, and why (not)."""
    if nc is None:  # MCP serves; the console says why it cannot
        return True, f"ready (console off: {off})"
    if not nc.is_connected:
        return False, "the console's bus connection is down"
    if not feed.following:
        return False, "the console does not follow the change feed yet"
    return True, "ready"


@asynccontextmanager
async def gateway(
    agents: Agents,
    mcp_app: Starlette,
    *,
    url: str,
    tokens: Tokens,
    creds: Path | None = None,
) -> AsyncIterator[ASGIApp]:
    """The whole gateway around ``mcp_app``, for as long as the block runs. The
    console reads with ``creds`` (default ``$WORLDLINE_CREDS``); when the bus
    refuses them (or there are none on a secured bus), MCP still serves and the
    console's data routes answer 503 naming the cause and the fix."""
    metrics = GatewayMetrics()
    feed = Feed()
    async with AsyncExitStack() as stack:
        nc: NATS | None = None
        off = ""
        try:
            world = await stack.enter_async_context(
                connect(url, world=agents.world, agent=CONSOLE_AGENT, creds=creds)
            )
            nc = await bus_connect(url, name="worldline-console-feed", creds=creds)
        except (WorldlineError, ActorError) as exc:
            off = (
                f"{exc}; give the console an operator's or a reader's credentials "
                "(--console-creds FILE, or --creds / WORLDLINE_CREDS)"
            )
            log.warning("console off: %s", off)
        if nc is not None:
            stack.push_async_callback(_close, nc)
        tg = await stack.enter_async_context(anyio.create_task_group())

        async def follow(bus: NATS) -> None:
            while True:
                try:
                    await feed.follow(bus, agents.world)
                except Exception as exc:  # the bus refused or lost the consumer
                    log.warning("console: change feed: %s; again in 2s", exc)
                await anyio.sleep(2)

        async def healthz(request: Request) -> Response:
            return Response("ok\n", media_type="text/plain")

        async def readyz(request: Request) -> Response:
            ok, why = _ready(nc, feed, off)
            return Response(
                f"{why}\n", status_code=200 if ok else 503, media_type="text/plain"
            )

        async def scrape(request: Request) -> Response:
            up = nc is not None and nc.is_connected
            metrics.connected.set(1 if up else 0)
            metrics.changes.set(feed.version)
            return Response(
                generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST
            )

        routes: list[Any] = [
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", scrape),
        ]
        if nc is not None:
            routes += console_routes(
                world, feed, tokens, url=url, served=agents.names, creds=creds
            )
            tg.start_soon(follow, nc)
        else:
            routes += console_off(tokens, off)
        mcp_app.router.routes[:0] = routes  # before the MCP app's own
        try:
            yield metrics.wrap(mcp_app)
        finally:  # the follower stops with the server, however it stopped
            tg.cancel_scope.cancel()


async def _close(nc: NATS) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(2):
        await nc.close()

"""The console's HTTP routes: the page, its data and its live event stream.

``/console/`` is a static page (HTML, one small script, one stylesheet: no data, so
it needs no token; a browser cannot attach a header to a page load). Every data route
needs the bearer token of an agent of the gateway's tokens file, as ``/mcp`` does
(:mod:`worldline.mcp.auth`), and answers 401 without one:

- ``GET /console/api/snapshot``: every panel (:func:`worldline.console.data.snapshot`);
- ``GET /console/api/beliefs/{id}``: one belief's trace and history;
- ``GET /console/api/events``: server-sent events, one ``change`` per burst of the
  world's change feed (:mod:`worldline.console.feed`), a comment every 15 s.

The page takes the token from its address's fragment (``/console/#token=…``, never
sent to the server nor logged) or a form, keeps it for the browser tab only, and sends
it as ``Authorization: Bearer``. The console only reads: it has no route that writes.
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from worldline.console.data import belief_detail, snapshot
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from starlette.requests import Request

    from worldline.console.feed import Feed
    from worldline.mcp.auth import Tokens
    from worldline.sdk.client import World

__all__ = ["DEBOUNCE", "KEEPALIVE", "SHARED", "console_off", "console_routes"]

DEBOUNCE = 0.2  # seconds: a burst of changes is one event
KEEPALIVE = 15.0  # seconds between comments on an idle event stream
SHARED = 0.5  # seconds one read of the panels serves every viewer (feed unchanged)
_STATIC = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def _static(name: str) -> bytes:
    return files("worldline.console").joinpath("static", name).read_bytes()


def _json(value: Any, status: int = 200) -> Response:
    return Response(
        msgspec.json.encode(value),
        status_code=status,
        media_type="application/json",
        headers=_HEADERS,
    )


def _unauthorized() -> Response:
    return JSONResponse(
        {
            "error": "unauthorized",
            "detail": "send `Authorization: Bearer TOKEN`, the token of an agent "
            "of the gateway's --tokens file",
        },
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer realm="worldline"', **_HEADERS},
    )


def _agent(request: Request, tokens: Tokens) -> str | None:
    """The agent whose bearer token ``request`` carries, or None."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    entry = tokens.agent_for(token.strip())
    return entry.agent if entry is not None else None


def _pages() -> list[Route]:
    """The static page, its script and stylesheet (no data: no token needed)."""
    pages = {name: _static(name) for name in _STATIC}  # read once, at start

    async def page(request: Request) -> Response:
        name = request.path_params.get("name") or "index.html"
        if name not in pages:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response(pages[name], media_type=_STATIC[name], headers=_HEADERS)

    async def redirect(request: Request) -> Response:
        return Response(status_code=308, headers={"Location": "/console/"})

    return [
        Route("/console", redirect),
        Route("/console/", page),
        Route("/console/{name}", page),
    ]


def console_routes(
    world: World,
    feed: Feed,
    tokens: Tokens,
    *,
    url: str,
    served: tuple[str, ...],
    creds: Path | None = None,
) -> list[Route]:
    """The console's routes, reading through ``world`` (the console's own bus
    connection) and woken by ``feed``."""

    lock = anyio.Lock()
    last: dict[str, Any] = {"version": -1, "read": -SHARED, "body": {}}

    async def shared() -> dict[str, Any]:
        """One read of every panel for every viewer asking within ``SHARED``
        seconds while the feed stands still."""
        async with lock:
            now = anyio.current_time()
            if last["version"] != feed.version or now - last["read"] >= SHARED:
                version = feed.version
                body = await snapshot(world, url=url, served=served, creds=creds)
                last.update(version=version, read=now, body=body)
            return dict(last["body"])

    async def api_snapshot(request: Request) -> Response:
        viewer = _agent(request, tokens)
        if viewer is None:
            return _unauthorized()
        body = await shared()
        body["viewer"] = viewer
        body["feed_version"] = feed.version
        return _json(body)

    async def api_belief(request: Request) -> Response:
        if _agent(request, tokens) is None:
            return _unauthorized()
        try:
            return _json(await belief_detail(world, request.path_params["belief"]))
        except BadRequest as exc:
            return _json({"error": "not found", "detail": str(exc)}, status=404)

    async def api_events(request: Request) -> Response:
        if _agent(request, tokens) is None:
            return _unauthorized()

        async def stream() -> AsyncIterator[str]:
            seen = feed.version
            yield f"retry: 2000\nevent: hello\ndata: {json.dumps({'v': seen})}\n\n"
            while True:
                if not await feed.wait_past(seen, within=KEEPALIVE):
                    yield ": keepalive\n\n"
                    continue
                await feed.wait_past(feed.version, within=DEBOUNCE)  # the burst
                seen = feed.version
                kinds, feed.kinds = sorted(feed.kinds), set()
                data = json.dumps({"v": seen, "kinds": kinds})
                yield f"event: change\ndata: {data}\n\n"

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={**_HEADERS, "X-Accel-Buffering": "no"},
        )

    return [
        Route("/console/api/snapshot", api_snapshot),
        Route("/console/api/beliefs/{belief}", api_belief),
        Route("/console/api/events", api_events),
        *_pages(),
    ]


def console_off(tokens: Tokens, why: str) -> list[Route]:
    """The console's routes when it has no bus connection: the page, and data
    routes that answer 503 with ``why`` (401 first, without a token)."""

    async def unavailable(request: Request) -> Response:
        if _agent(request, tokens) is None:
            return _unauthorized()
        return _json({"error": "console unavailable", "detail": why}, status=503)

    return [
        Route("/console/api/{rest:path}", unavailable),
        *_pages(),
    ]

"""``worldline mcp``: an agent's world model as an MCP server, over stdio or streamable
HTTP.

An MCP-capable agent (a coding agent, a desktop assistant) starts this process (stdio)
or connects to it (``--http``), and gets tools for the turn loop (``before`` at the
start of a turn, ``after`` with its output at the end), for beliefs (``add``,
``evidence``, ``retract``, ``resolve``, ``relate``, ``trust``, ``get``, ``list``,
``search``, ``trace``), for the crew world (``read``, ``write``, ``view``, ``inbox``,
``watch``) and ``forecast``: what really followed actions like a move, from the
simulator's index. Each tool calls the async SDK (:class:`worldline.sdk.client.World`)
as the calling agent, on a NATS connection held for the server's lifetime; input
schemas come from the SDK's own types, output schemas from the structs it returns
(:mod:`worldline.mcp.schemas`), and unknown arguments are refused.

Over stdio the server acts for one agent (``--agent``, ``--creds``). Over HTTP it acts
for every agent of a tokens file (:mod:`worldline.mcp.auth`), each on a connection
made with that agent's own credentials file; a request is the agent whose bearer token
it carries, and a request without one is refused (401).

The agent's worldview, startup view and inbox are resources
(:mod:`worldline.mcp.resources`), with update notifications (``subscriptions/listen``
streams, or ``resources/subscribe``); the ``turn`` prompt starts a turn with the
worldview.

An SDK error (a bad id, a rejected write, an unreachable bus) becomes an MCP tool error
carrying the SDK's message, and the server keeps serving. Over stdio, stdout is the
protocol: logs go to stderr.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl

from worldline.mcp.common import Agents, tool_errors
from worldline.mcp.hosts import (
    ALLOWED_HOSTS_FIX,
    LOOPBACK_NAMES,
    allowed_host,
    bracketed,
    loopback,
)
from worldline.mcp.judgment import judgment_tools
from worldline.mcp.reads import read_tools
from worldline.mcp.resources import Updates, follow, resources
from worldline.mcp.writes import write_tools
from worldline.sdk.client import connect
from worldline.sdk.errors import BadRequest, BusUnavailable

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from contextlib import AbstractAsyncContextManager

    from worldline.mcp.auth import Tokens
    from worldline.sdk.client import World

__all__ = [
    "TOOLS",
    "build_server",
    "serve",
    "serve_http",
    "server_version",
    "transport_security",
]

log = logging.getLogger("worldline.mcp")

TOOLS = (
    "before",
    "after",
    "observe",
    "add",
    "evidence",
    "retract",
    "resolve",
    "relate",
    "unrelate",
    "trust",
    "search",
    "list",
    "get",
    "trace",
    "read",
    "write",
    "view",
    "watch",
    "inbox",
    "forecast",
    "sources",
    "assess_sources",
    "contradictions",
    "settle",
    "calibration",
)
_tool_errors = tool_errors  # the name tests/runtime/test_errors.py imports

READ_ONLY = frozenset(
    {
        "before",
        "search",
        "list",
        "get",
        "trace",
        "read",
        "view",
        "watch",
        "forecast",
        "sources",
        "contradictions",
        "calibration",
    }
)

INSTRUCTIONS = """\
worldline is the crew's shared world model: what is true here, how sure we are, and
what to do next. At the start of every turn call `before` with the move you are about
to make and read its prompt; at the end call `after` with your turn's output, so your
claims, risks and open questions become beliefs the whole crew reads. Use `search` to
find the beliefs that answer a question (ranked, each with its scores and evidence),
`get`/`list` to read beliefs, `evidence` to support or refute a belief by id,
`retract`/`resolve` to close one, `relate` to link two, `trace` to see why a belief
reads as it does, `write` for crew fields (with the version you read), `inbox` for work
addressed to you, `view` for your startup view and `watch` to wait until your standing
worldview changes. `forecast` (and `before` with `forecast: true` for its top moves)
returns what really followed actions like a move in recorded traces, with how many
transitions support each outcome, or "no grounding": it never guesses."""

TURN = (
    "Your bounded worldview for `task` (the beliefs in play, goals, gaps, policy "
    "and ranked moves), with the turn loop's rule: report your output with the "
    "`after` tool when the turn ends."
)


def server_version() -> str:
    """worldline's installed version (pyproject), which the server reports."""
    try:
        return version("worldline")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


class _Verifier:
    """Bearer tokens to agents (the SDK's ``TokenVerifier``)."""

    def __init__(self, tokens: Tokens) -> None:
        self._tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        entry = self._tokens.agent_for(token)
        if entry is None:
            return None
        return AccessToken(token=token, client_id=entry.agent, scopes=[])


def build_server(
    agents: Agents,
    *,
    updates: Updates | None = None,
    tokens: Tokens | None = None,
    url: str = "",
) -> MCPServer:
    """An MCP server whose tools act as the calling agent of ``agents``; with
    ``tokens``, HTTP callers authenticate with a bearer token (``url``: the
    server's own address, its OAuth issuer name)."""
    auth: dict[str, Any] = {}
    if tokens is not None:
        auth = {
            "token_verifier": _Verifier(tokens),
            "auth": AuthSettings(issuer_url=AnyHttpUrl(url), resource_server_url=None),
        }
    updates = updates or Updates(agents)
    # Over HTTP every caller gets the same serverInfo: it names no agent (nor how
    # many the server serves); a caller learns its own name from its tools.
    who = "" if agents.authenticated else f" as {agents.names[0]}"
    server: MCPServer = MCPServer(
        name="worldline",
        title=f"worldline: {agents.world}{who}",
        instructions=INSTRUCTIONS,
        version=server_version(),
        tools=[*read_tools(agents), *write_tools(agents), *judgment_tools(agents)],
        resources=list(resources(agents)),
        subscriptions=updates.bus,
        log_level="WARNING",
        **auth,
    )
    updates.install(server)

    @server.prompt(title="Start a turn with the worldview", description=TURN)
    async def turn(task: str) -> str:
        """Your bounded worldview for ``task`` (the beliefs in play, goals, gaps,
        policy and ranked moves), with the turn loop's rule: report your output
        with the `after` tool when the turn ends."""
        with tool_errors("turn"):
            view = await agents.current().before(task)
        return (
            f"{view.prompt}\n\nTask: {task}\n\nWhen this turn ends, call the `after` "
            "tool with your output so the crew reads what you found."
        )

    return server


async def serve(
    url: str, *, world: str, agent: str, request_timeout: float = 10.0
) -> None:
    """Serve MCP over stdin/stdout until the client closes it, on one connection
    (credentials: ``$WORLDLINE_CREDS``, as ``--creds`` sets it).

    Raises:
        BadRequest: the world or agent name is not a valid subject token.
        BusUnavailable: NATS cannot be reached at ``url``.
    """
    async with connect(
        url, world=world, agent=agent, request_timeout=request_timeout
    ) as handle:
        agents = Agents(world, {agent: handle})
        updates = Updates(agents)
        server = build_server(agents, updates=updates)
        log.info("serving world %r as %r over stdio (nats %s)", world, agent, url)
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow, agent, handle, updates)
            await server.run_stdio_async()
            tg.cancel_scope.cancel()


def transport_security(host: str, allowed: Sequence[str]) -> TransportSecuritySettings:
    """The Host/Origin checks (DNS-rebinding protection) for a server bound to
    ``host``: the loopback names, ``host`` itself when it is loopback, and each of
    ``allowed`` (a name without a port: any port, or none, as behind a proxy; with
    one: that port only).

    Raises:
        BadRequest: ``host`` is not loopback and ``allowed`` is empty (the MCP SDK
            would turn the checks off).
        ValueError: an entry of ``allowed`` is not a host (:func:`allowed_host`).
    """
    if not loopback(host) and not allowed:
        raise BadRequest(f"--host {host} is not loopback: {ALLOWED_HOSTS_FIX}")
    names = [*LOOPBACK_NAMES, *([bracketed(host)] if loopback(host) else [])]
    exact: list[str] = []
    for entry in allowed:
        name, port = allowed_host(entry)
        if port:
            exact.append(f"{name}:{port}")
        else:
            names.append(name)
    names = list(dict.fromkeys(names))
    hosts = [*names, *(f"{name}:*" for name in names), *exact]
    origins = [f"{scheme}://{h}" for scheme in ("http", "https") for h in hosts]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=origins,
    )


async def serve_http(
    url: str,
    *,
    world: str,
    tokens: Tokens,
    host: str = "127.0.0.1",
    port: int = 8765,
    allowed_hosts: Sequence[str] = (),
    request_timeout: float = 10.0,
    gateway: Callable[..., AbstractAsyncContextManager[Any]] | None = None,
) -> None:
    """Serve MCP over streamable HTTP at ``http://host:port/mcp`` until interrupted:
    one bus connection per agent of ``tokens``, each with its own credentials.

    Requests whose Host (or Origin) header names none of the loopback names and
    ``allowed_hosts`` are refused (421, 403): a non-loopback ``host`` needs
    ``allowed_hosts`` (:func:`transport_security`).

    ``gateway`` (``worldline.console.gateway.gateway``) wraps the MCP app into the
    whole gateway (console, health, readiness, metrics) for the server's lifetime.
    Uvicorn logs through the root logger, so ``--log-format json`` covers its lines.

    Raises:
        BadRequest: a bad world or agent name, a credentials file that holds
            no key, or a non-loopback ``host`` without ``allowed_hosts``.
        BusUnavailable: NATS cannot be reached, or refused an agent's credentials.
    """
    import uvicorn  # the mcp extra brings it; only the HTTP transport needs it

    security = transport_security(host, allowed_hosts)  # before any connection
    async with AsyncExitStack() as stack:
        worlds: dict[str, World] = {}
        for entry in tokens.entries:
            try:
                worlds[entry.agent] = await stack.enter_async_context(
                    connect(
                        url,
                        world=world,
                        agent=entry.agent,
                        creds=entry.creds,
                        request_timeout=request_timeout,
                    )
                )
            except (BadRequest, BusUnavailable) as exc:  # name the tokens entry
                raise type(exc)(f"[agents.{entry.agent}] of --tokens: {exc}") from exc
        shown = f"[{host}]" if ":" in host else host  # an IPv6 address
        address = f"http://{shown}:{port}"
        agents = Agents(world, worlds, authenticated=True)
        updates = Updates(agents)
        server = build_server(agents, updates=updates, tokens=tokens, url=address)
        app: Any = server.streamable_http_app(host=host, transport_security=security)
        if gateway is not None:
            app = await stack.enter_async_context(
                gateway(agents, app, url=url, tokens=tokens)
            )
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="on",
            log_config=None,
        )
        if not loopback(host):
            log.warning(
                "serving on %s: bearer tokens cross the network in clear text "
                "unless a TLS proxy fronts this port",
                host,
            )
        log.warning(
            "serving world %r for %s at %s/mcp%s (nats %s)",
            world,
            ", ".join(worlds),
            address,
            f", the console at {address}/console/" if gateway is not None else "",
            url,
        )
        async with anyio.create_task_group() as tg:
            for agent, handle in worlds.items():
                tg.start_soon(follow, agent, handle, updates)
            await uvicorn.Server(config).serve()
            tg.cancel_scope.cancel()

"""``worldline mcp --http`` as a remote agent meets it: the official MCP client over
streamable HTTP, against a nats-server that requires the credentials ``worldline
creds`` wrote, the actors each as its own user, and the example crew declared by the
operator. Each bearer token is one agent, whose every call runs with that agent's own
bus credentials; a call without a (known) token is refused."""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp.types import TextContent

from tests.security.secured import (
    PILOT,
    Secured,
    actors_as_own_users,
    declared_by_the_operator,
    secured_server,
)
from worldline.mcp.resources import resource_uri
from worldline.mcp.server import READ_ONLY, TOOLS, server_version

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

pytestmark = [pytest.mark.cli, pytest.mark.nats]

WORLDLINE = str(Path(sys.executable).parent / "worldline")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    with secured_server(tmp_path, "mcphttp") as s:
        yield s


@pytest.fixture
def tokens(secured: Secured, tmp_path: Path) -> dict[str, str]:
    """A bearer token for spock and one for scotty, their hashes in a tokens file
    next to their credentials."""
    found = {agent: secrets.token_hex(32) for agent in ("spock", "scotty")}
    lines = []
    for agent, token in found.items():
        digest = hashlib.sha256(token.encode()).hexdigest()
        creds = secured.creds(agent)
        lines += [f"[agents.{agent}]", f'token_sha256 = "{digest}"']
        lines += [f'creds = "{creds}"', ""]
    (tmp_path / "tokens.toml").write_text("\n".join(lines))
    return found


@asynccontextmanager
async def _serving(secured: Secured, tmp_path: Path) -> AsyncIterator[str]:
    """``worldline mcp --http`` serving the crew world; yields its endpoint."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}
    command = [WORLDLINE, "mcp", "--http", "--port", str(port)]
    command += ["--tokens", str(tmp_path / "tokens.toml")]
    command += ["--nats", secured.url, "--world", secured.world]
    log = tmp_path / "mcp-stderr.log"
    with log.open("w") as errlog:
        server = await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=None, stderr=errlog, env=env
        )
    try:
        with anyio.fail_after(30):
            while True:
                assert server.returncode is None, log.read_text()
                try:
                    probe = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    await anyio.sleep(0.05)
                else:
                    await probe.aclose()
                    break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.terminate()
        with anyio.fail_after(10):
            await server.wait()
    assert "Traceback" not in log.read_text()


@asynccontextmanager
async def _as(endpoint: str, token: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(endpoint, http_client=http)) as client,
    ):
        yield client


async def _ok(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_unauthenticated_calls_are_refused(
    secured: Secured, tokens: dict[str, str], tmp_path: Path
) -> None:
    async with _serving(secured, tmp_path) as endpoint:
        await _refused(endpoint)


async def _refused(endpoint: str) -> None:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient() as http:
        for headers in ({}, {"Authorization": "Bearer " + "0" * 64}):
            refused = await http.post(endpoint, json=hello, headers=accept | headers)
            assert refused.status_code == 401, refused.text
    # The official client, without a token and with a wrong one: the HTTP 401
    # reaches it as an error response; it never gets a session.
    for token in (None, "0" * 64):
        with pytest.raises(BaseException) as failed:  # noqa: PT011  (a group)
            await _session(endpoint, token)
        (leaf,) = _leaves(failed.value)
        assert isinstance(leaf, MCPError), leaf
        assert "error response" in str(leaf)


async def _session(endpoint: str, token: str | None) -> None:
    """Open an MCP session (with ``token``, or none) and close it."""
    if token is None:
        async with Client(endpoint):
            return
    async with _as(endpoint, token):
        return


def _leaves(error: BaseException) -> list[BaseException]:
    """An error, or for a group every error in it."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


async def test_each_token_acts_as_its_agent_with_its_credentials(
    secured: Secured,
    tokens: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with actors_as_own_users(secured, monkeypatch):
        await declared_by_the_operator(secured)
        async with (
            _serving(secured, tmp_path) as endpoint,
            _as(endpoint, tokens["spock"]) as spock,
            _as(endpoint, tokens["scotty"]) as scotty,
        ):
            assert spock.server_info is not None
            assert spock.server_info.version == server_version() != ""
            listed = {tool.name: tool for tool in (await spock.list_tools()).tools}
            assert set(listed) == set(TOOLS)
            for name, tool in listed.items():
                assert tool.title
                assert tool.annotations is not None
                assert tool.annotations.read_only_hint is (name in READ_ONLY)
                assert tool.output_schema is not None
                assert tool.input_schema.get("additionalProperties") is False

            # Who calls is who writes: each belief's author is the token's agent.
            mine = await _ok(spock, "add", text="Acme TPA reprices stop-loss in Q3")
            theirs = await _ok(scotty, "add", text="The claims API p99 is 180 ms")
            assert (mine["author"], theirs["author"]) == ("spock", "scotty")

            await _notified_of_new_work(spock, scotty)

            # The bus's authority, not the MCP layer's: spock holds no grant on
            # project.phase, scotty does.
            refused = await spock.call_tool(
                "write", {"entity": PILOT, "field": "phase", "value": "sla"}
            )
            assert refused.is_error
            assert "rejected: unauthorized" in _text(refused)

            # An agent reads its own resources, never another's.
            own = await spock.read_resource(resource_uri("spock", "view"))
            assert '"agent":"spock"' in str(own.contents[0])
            with pytest.raises(Exception, match="you are spock"):
                await spock.read_resource(resource_uri("scotty", "view"))
            unknown = await spock.call_tool("get", {"belief_id": "b-x", "as": "ada"})
            assert unknown.is_error
            assert "unknown argument(s) 'as'" in _text(unknown)
            await _legacy(endpoint, tokens["spock"])


async def _legacy(endpoint: str, token: str) -> None:
    """A 2025-era client (the initialize handshake) over the same HTTP endpoint:
    the same identity, and resources/subscribe for its own resources only."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(endpoint, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        hello = await session.initialize()
        assert hello.capabilities.resources is not None
        assert hello.capabilities.resources.subscribe is True
        view = await session.call_tool("view", {})
        assert not view.is_error
        assert isinstance(view.structured_content, dict)
        assert view.structured_content["agent"] == "spock"
        with pytest.warns(MCPDeprecationWarning):
            await session.subscribe_resource(resource_uri("spock", "inbox"))
        with pytest.warns(MCPDeprecationWarning), pytest.raises(MCPError) as refused:
            await session.subscribe_resource(resource_uri("scotty", "inbox"))
        assert "you are spock" in str(refused.value)


async def _notified_of_new_work(spock: Client, scotty: Client) -> None:
    """scotty moves the pilot's phase; the rule sends a re-plan request to its
    collaborators, spock among them: spock's listen stream hears that its view and
    inbox changed (nothing else had reached spock's inbox), and its inbox holds the
    request."""
    wanted = {resource_uri("spock", part) for part in ("view", "inbox")}
    async with spock.listen(resource_subscriptions=sorted(wanted)) as events:
        written = await _ok(scotty, "write", entity=PILOT, field="phase", value="sla")
        assert written["version"] > 0
        heard: set[str] = set()
        with anyio.move_on_after(20):
            async for event in events:
                if isinstance(event, ResourceUpdated):
                    heard.add(event.uri)
                if wanted <= heard:
                    break
        assert wanted <= heard, f"heard only {sorted(heard)} in 20 s"
    inbox = await _ok(spock, "inbox", wait=2.0)
    work = [m for m in inbox["messages"] if m["kind"] == "inbox.work_assigned.v1"]
    assert [m["work_kind"] for m in work] == ["replan_request"], inbox
    assert PILOT in work[0]["goal"]

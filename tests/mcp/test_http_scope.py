"""What ``worldline mcp --http`` shows a caller and whom it answers (issue 23).

Each bearer token is one agent: ``resources/list`` lists that agent's resources only
(not the roster of every agent the server serves), and reading, subscribing to or
listening for another URI is refused with one message whether or not it names an
agent the server serves. A non-loopback bind must name the hosts clients use
(``--allowed-hosts``); the Host and Origin checks that stop DNS rebinding stay on for
them.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import httpx2
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from worldline.mcp.hosts import allowed_host
from worldline.mcp.resources import RESOURCES, resource_uri
from worldline.mcp.server import transport_security
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

WORLDLINE = str(Path(sys.executable).parent / "worldline")
AGENTS = ("spock", "scotty", "uhura")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tokens(tmp_path: Path) -> dict[str, str]:
    """A token per agent, their hashes in tokens.toml (an open bus: no creds)."""
    found = {agent: secrets.token_hex(32) for agent in AGENTS}
    lines = []
    for agent, token in found.items():
        digest = hashlib.sha256(token.encode()).hexdigest()
        lines += [f"[agents.{agent}]", f'token_sha256 = "{digest}"', ""]
    (tmp_path / "tokens.toml").write_text("\n".join(lines))
    return found


def _command(tmp_path: Path, nats_url: str, port: int, *extra: str) -> list[str]:
    return [
        WORLDLINE,
        "mcp",
        "--http",
        "--port",
        str(port),
        "--tokens",
        str(tmp_path / "tokens.toml"),
        "--nats",
        nats_url,
        "--world",
        "enterprise",
        *extra,
    ]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}


@asynccontextmanager
async def _serving(
    tmp_path: Path, nats_url: str, *extra: str
) -> AsyncIterator[tuple[str, int]]:
    """``worldline mcp --http`` on a free port; yields its endpoint and port."""
    port = _free_port()
    log = tmp_path / "mcp-stderr.log"
    with log.open("w") as errlog:
        server = await anyio.open_process(
            _command(tmp_path, nats_url, port, *extra),
            stdin=subprocess.DEVNULL,
            stdout=None,
            stderr=errlog,
            env=_env(),
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
        yield f"http://127.0.0.1:{port}/mcp", port
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


@pytest.mark.cli
@pytest.mark.nats
async def test_a_caller_lists_and_reaches_only_its_own_resources(
    nats_url: str, tmp_path: Path
) -> None:
    tokens = _tokens(tmp_path)
    async with (
        _serving(tmp_path, nats_url) as (endpoint, _),
        _as(endpoint, tokens["spock"]) as spock,
    ):
        listed = {str(r.uri) for r in (await spock.list_resources()).resources}
        assert listed == {resource_uri("spock", part) for part in RESOURCES}
        # serverInfo is the same for every caller: no agent's name, no head count.
        assert spock.server_info is not None
        assert spock.server_info.title == "worldline: enterprise"

        # Another agent's resource and one that names no agent served are refused
        # alike: the answer does not tell who else the server serves.
        refusals = []
        for uri in (resource_uri("scotty", "view"), resource_uri("nobody", "view")):
            with pytest.raises(MCPError) as refused:
                await spock.read_resource(uri)
            message = str(refused.value)
            assert "you are spock" in message
            refusals.append(message.replace(uri, "URI"))
        assert refusals[0] == refusals[1]

        # subscriptions/listen (2026-era) for another's resource is refused, not
        # silently honoured (it would hear when scotty's inbox changes).
        for uris in (
            [resource_uri("scotty", "inbox")],
            [resource_uri("spock", "inbox"), resource_uri("uhura", "view")],
        ):
            with pytest.raises(MCPError, match="you are spock"):
                async with spock.listen(resource_subscriptions=uris):
                    pass
        async with spock.listen(
            resource_subscriptions=[resource_uri("spock", "inbox")]
        ) as own:
            assert own.honored.resource_subscriptions == [
                resource_uri("spock", "inbox")
            ]

    async with _serving(tmp_path, nats_url) as (endpoint, _):
        await _legacy(endpoint, tokens["scotty"])


async def _legacy(endpoint: str, token: str) -> None:
    """A 2025-era client: resources/list and resources/subscribe are scoped too."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(endpoint, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed = {str(r.uri) for r in (await session.list_resources()).resources}
        assert listed == {resource_uri("scotty", part) for part in RESOURCES}
        for uri in (resource_uri("spock", "inbox"), resource_uri("nobody", "inbox")):
            with (
                pytest.warns(MCPDeprecationWarning),
                pytest.raises(MCPError, match="you are scotty"),
            ):
                await session.subscribe_resource(uri)


@pytest.mark.cli
@pytest.mark.nats
def test_a_non_loopback_bind_needs_allowed_hosts(nats_url: str, tmp_path: Path) -> None:
    _tokens(tmp_path)
    command = _command(tmp_path, nats_url, _free_port(), "--host", "0.0.0.0")
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=30, check=False, env=_env()
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "--host 0.0.0.0 is not loopback" in lines[0]
    assert "--allowed-hosts" in lines[0]
    # Without --http the option means nothing: refused rather than ignored.
    stdio = [WORLDLINE, "mcp", "--allowed-hosts", "a.example", "--nats", nats_url]
    result = subprocess.run(
        stdio, capture_output=True, text=True, timeout=30, check=False, env=_env()
    )
    assert result.returncode == 2
    assert "--allowed-hosts is for --http only" in result.stderr


def _hello() -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }


@pytest.mark.cli
@pytest.mark.nats
async def test_listed_hosts_keep_the_host_and_origin_checks(
    nats_url: str, tmp_path: Path
) -> None:
    tokens = _tokens(tmp_path)
    extra = ("--host", "0.0.0.0", "--allowed-hosts", "mcp.example.org,10.9.8.7:443")
    async with _serving(tmp_path, nats_url, *extra) as (endpoint, port):
        auth = {
            "Authorization": f"Bearer {tokens['uhura']}",
            "Accept": "application/json, text/event-stream",
        }

        async def status(host: str, origin: str | None = None) -> int:
            headers = auth | {"Host": host}
            if origin is not None:
                headers["Origin"] = origin
            async with httpx2.AsyncClient() as http:
                answer = await http.post(endpoint, json=_hello(), headers=headers)
                return answer.status_code

        # The listed names (any port, or none behind a proxy; a listed port only
        # that one), and loopback, pass.
        for host in ("mcp.example.org", f"mcp.example.org:{port}", "10.9.8.7:443"):
            assert await status(host) == 200, host
        assert await status(f"127.0.0.1:{port}") == 200
        assert (
            await status(host="mcp.example.org", origin="https://mcp.example.org")
            == 200
        )
        # A name that resolves here only by rebinding, or a port not listed: 421.
        for host in (f"evil.example:{port}", "evil.example", "10.9.8.7:80"):
            assert await status(host) == 421, host
        # A page of another origin posting to a listed host: 403.
        assert await status("mcp.example.org", origin="http://evil.example") == 403


def test_allowed_host_entries_are_checked() -> None:
    assert allowed_host("MCP.example.org") == ("mcp.example.org", "")
    assert allowed_host("mcp.example.org:8443") == ("mcp.example.org", "8443")
    assert allowed_host("::1") == ("[::1]", "")
    assert allowed_host("[fe80::1]:8765") == ("[fe80::1]", "8765")
    for bad in ("", "*", "*.example.org", "http://a.example", "a.example/mcp", "a:b"):
        with pytest.raises(ValueError, match="not a host name"):
            allowed_host(bad)
    with pytest.raises(BadRequest, match="--allowed-hosts"):
        transport_security("0.0.0.0", ())
    on = transport_security("127.0.0.1", ())
    assert on.enable_dns_rebinding_protection
    assert "localhost:*" in on.allowed_hosts
    listed = transport_security("0.0.0.0", ("a.example",))
    assert listed.enable_dns_rebinding_protection
    assert {"a.example", "a.example:*"} <= set(listed.allowed_hosts)
    assert "https://a.example" in listed.allowed_origins

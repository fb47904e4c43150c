"""The gateway on a bus that requires credentials: the console reads with its own
(``--console-creds``, an operator's here); without them MCP still serves, the gateway
is ready, and the console's data routes say why they cannot answer (503) and how to
fix it, after the token check (401)."""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import TYPE_CHECKING

import anyio
import pytest

from tests.console.serving import gateway, get
from tests.security.secured import (
    Secured,
    actors_as_own_users,
    declared_by_the_operator,
    secured_server,
)
from worldline.protocols.world import OPERATOR

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = [pytest.mark.cli, pytest.mark.nats]


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    with secured_server(tmp_path, "console") as s:
        yield s


@pytest.mark.timeout(90)
async def test_the_console_reads_with_its_own_credentials_or_says_why_not(
    secured: Secured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = secrets.token_hex(32)
    digest = hashlib.sha256(token.encode()).hexdigest()
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        f'[agents.spock]\ntoken_sha256 = "{digest}"\n'
        f'creds = "{secured.creds("spock")}"\n'
    )
    async with actors_as_own_users(secured, monkeypatch):
        await declared_by_the_operator(secured)
        log = tmp_path / "off.log"
        async with gateway(secured.url, secured.world, tokens, log) as base:
            code, body = await anyio.to_thread.run_sync(get, f"{base}/readyz")
            assert code == 200
            assert b"console off" in body
            code, _ = await anyio.to_thread.run_sync(
                get, f"{base}/console/api/snapshot"
            )
            assert code == 401
            code, body = await anyio.to_thread.run_sync(
                get, f"{base}/console/api/snapshot", token
            )
            assert code == 503
            detail = json.loads(body)["detail"]
            assert "--console-creds" in detail
            assert "anonymous" in detail  # the bus's own words: who was refused
        operator = str(secured.creds(OPERATOR))
        log = tmp_path / "on.log"
        async with gateway(
            secured.url,
            secured.world,
            tokens,
            log,
            "--console-creds",
            operator,
            verb=("console",),  # the same gateway, by the console's own verb
        ) as base:
            code, body = await anyio.to_thread.run_sync(
                get, f"{base}/console/api/snapshot", token
            )
            assert code == 200
            snap = json.loads(body)
            assert snap["errors"] == {}, snap["errors"]
            assert "spock" in {row["agent"] for row in snap["agents"]}

"""Credentials that do not fit the call are named at once, on a real nats-server run
with the generated ``auth.conf``: a write or an inbox read with another agent's
credentials raises :class:`PermissionDenied` naming the subject and whose credentials
these are (it said "is this server running worldline?" after the timeout, and
``inbox`` retried for minutes); the CLI prints it as one line and exits 2. And an
agent's own credentials, which no longer carry a right to fusion's dead letters,
still learn at once why fusion refused their op."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

import worldline
from tests.security.secured import PILOT, Secured, actors_as_own_users, secured_server
from worldline.protocols.subjects import ops
from worldline.sdk.errors import PermissionDenied, Rejected, WorldlineError

if TYPE_CHECKING:
    from collections.abc import Iterator


pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).parent / "worldline")


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    with secured_server(tmp_path, "perm") as s:
        yield s


async def test_another_agents_credentials_are_named_at_once(secured: Secured) -> None:
    s = secured
    async with worldline.connect(
        s.url, world=s.world, agent="spock", creds=s.creds("scotty"), request_timeout=8
    ) as spock:
        started = time.monotonic()
        with pytest.raises(PermissionDenied) as write:
            await spock.write(PILOT, "phase", "sla")
        with pytest.raises(PermissionDenied) as inbox:
            await spock.inbox()
        waited = time.monotonic() - started
    assert waited < 4, f"took {waited:.1f}s to name the refusal (timeout 8 s)"
    message = str(write.value)
    assert message.startswith(
        f"permission denied publishing to {ops(s.world, 'spock')}: these credentials "
        "are for agent scotty"
    )
    assert str(s.creds("scotty")) in message
    assert "use the agent's own credentials" in message
    assert "permission denied" in str(inbox.value)
    assert "agent scotty" in str(inbox.value)
    assert isinstance(write.value, WorldlineError)


def test_the_cli_prints_the_refusal_as_one_line_and_exits_2(secured: Secured) -> None:
    s = secured
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}
    for verb in (["write", PILOT, "phase", "sla"], ["inbox"]):
        started = time.monotonic()
        scotty = ["--creds", str(s.creds("scotty")), "--timeout", "8"]
        where = ["--nats", s.url, "--world", s.world, "--agent", "spock"]
        result = subprocess.run(
            [WORLDLINE, *verb, *where, *scotty],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
        assert time.monotonic() - started < 6, result.stderr
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()  # no traceback, no log noise
        assert line.startswith("worldline: permission denied publishing to "), line
        assert "agent scotty" in line


async def test_an_agent_learns_why_fusion_refused_without_the_dead_letters(
    secured: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = secured
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(actors_as_own_users(s, monkeypatch))
        ada = await stack.enter_async_context(
            worldline.connect(
                s.url,
                world=s.world,
                agent="ada",
                creds=s.creds("ada"),
                request_timeout=8,
            )
        )
        belief = await ada.add("Soteria pilots convert at 40%", confidence=0.6)
        with anyio.fail_after(4):  # answered, not waited out
            with pytest.raises(Rejected) as unknown:
                await ada.evidence(
                    "b-unknown", direction="supports", kind="citation", source="crm"
                )
            again = await ada.evidence(
                belief.id, direction="supports", kind="citation", source="crm", id="e1"
            )
            retried = await ada.evidence(
                belief.id, direction="supports", kind="citation", source="crm", id="e1"
            )
    assert unknown.value.code == "unknown_belief"
    assert retried.evidence_count == again.evidence_count == 1

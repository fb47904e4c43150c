"""Errors that name the real cause, on a real nats-server: client mistakes answered to
the client (not dead-lettered), a retried evidence id answered at once, a server
without worldline's streams, a JetStream API error (storage full), and the SDK's one
error root. The CLI is run as a user runs it: one line on stderr, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import nats
import nats.js.errors
import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.actors.runtime.declare import ensure_streams
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.protocols.subjects import DLQ, STREAMS, dlq, ops
from worldline.sdk.errors import (
    BusRefused,
    BusUnavailable,
    NoWorldline,
    Rejected,
    WorldlineError,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).parent / "worldline")


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}
    return subprocess.run(
        [WORLDLINE, *args, "--nats", url, "--timeout", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


async def _dead_letters(url: str, world: str) -> int:
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(
            DLQ.name, subjects_filter=dlq(world, "*")
        )
    finally:
        await nc.close()
    return sum((info.state.subjects or {}).values())


async def test_client_mistakes_are_answered_to_the_client_not_dead_lettered(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("mistake")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada", request_timeout=8) as ada,
        worldline.connect(nats_url, world=world, agent="bob", request_timeout=8) as bob,
    ):
        belief = await ada.add("The SLA template is final", confidence=0.6)
        with pytest.raises(Rejected) as unknown:
            await ada.evidence(
                "b-unknown", direction="supports", kind="citation", source="x"
            )
        assert unknown.value.code == "unknown_belief"
        assert "no belief b-unknown" in unknown.value.reason
        with pytest.raises(Rejected) as taken:
            await bob.add("Another statement", id=belief.id)
        assert taken.value.code == "conflict"
        with pytest.raises(Rejected) as unauthorized:  # no grant, not its own
            await ada.trust("lab", 0.5, lock=True)
        assert unauthorized.value.code == "unauthorized"
        assert "may not set the trust of 'lab'" in unauthorized.value.reason
        await ada.trust("agent:ada", 0.9)  # lowering itself: allowed
        await ada.retract(belief.id, "the template changed")
        with pytest.raises(Rejected) as closed:
            await ada.evidence(
                belief.id, direction="supports", kind="citation", source="x"
            )
        assert closed.value.code == "closed"
        assert "retracted" in closed.value.reason
        # The dead-letter queue is the operator's: none of this landed there.
        assert await _dead_letters(nats_url, world) == 0
        # What is really broken still does.
        nc = await nats.connect(nats_url)
        try:
            await nc.jetstream().publish(ops(world, "mallory"), b"\xc1 not msgpack")
        finally:
            await nc.close()
        with anyio.fail_after(10):
            while True:  # dead-lettered by fusion and by the materializer
                if await _dead_letters(nats_url, world) == 2:
                    break
                await anyio.sleep(0.1)


async def test_a_retried_evidence_id_is_answered_at_once_as_already_applied(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("retry")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada", request_timeout=8) as ada,
    ):
        belief = await ada.add("Pilots convert at 40%", confidence=0.5)
        first = await ada.evidence(
            belief.id, direction="supports", kind="citation", source="crm", id="ev-1"
        )
        started = time.monotonic()
        again = await ada.evidence(
            belief.id, direction="supports", kind="citation", source="crm", id="ev-1"
        )
        waited = time.monotonic() - started
    assert waited < 3, f"a retried evidence id took {waited:.1f}s (timeout 8 s)"
    assert again.evidence_count == first.evidence_count == 1
    assert again.version == first.version  # the same belief: nothing changed
    assert again.confidence == first.confidence


async def test_a_server_without_worldline_streams_is_named(nats_url: str) -> None:
    world = unique_world("bare")
    async with worldline.connect(
        nats_url, world=world, agent="ada", request_timeout=3
    ) as ada:
        with pytest.raises(NoWorldline, match=f"no worldline streams on {nats_url}"):
            await ada.add("Anything")
        with pytest.raises(NoWorldline, match="start `worldline up`"):
            await ada.observe("An artifact")
        with pytest.raises(NoWorldline):
            await ada.inbox()
        with pytest.raises(NoWorldline):
            await ada.set_presence("busy")
        with pytest.raises(NoWorldline):
            await ada.presence("bob")
        with pytest.raises(NoWorldline):
            await ada.stored_view()
        with pytest.raises(NoWorldline):
            await anext(ada.watch())
    for verb in (["add", "x"], ["trust", "lab", "0.5"], ["presence", "busy"]):
        args = [*verb, "--world", world]
        result = await anyio.to_thread.run_sync(partial(_cli, nats_url, *args))
        assert result.returncode == 4, result.stderr
        line = _one_line(result)
        assert f"no worldline streams on {nats_url}" in line
        assert "`worldline up`" in line


def test_every_error_the_sdk_raises_is_a_worldline_error() -> None:
    from worldline.actors.runtime.errors import BusUnavailable as RuntimeBusUnavailable

    assert issubclass(BusUnavailable, WorldlineError)
    assert issubclass(BusUnavailable, RuntimeBusUnavailable)  # still caught as one
    assert worldline.WorldlineError is WorldlineError  # the one root, exported
    for name in worldline.__all__:
        member = getattr(worldline, name)
        if isinstance(member, type) and issubclass(member, Exception):
            assert issubclass(member, WorldlineError), name

    async def unreachable() -> None:
        async with worldline.connect("nats://127.0.0.1:1", agent="ada"):
            pass  # pragma: no cover - the connect fails

    with pytest.raises(WorldlineError, match=r"cannot reach NATS at nats://127\.0"):
        anyio.run(unreachable, backend="asyncio")


@pytest.fixture
def full_server(tmp_path: Path) -> Iterator[str]:
    """A server whose JetStream storage is full: worldline's streams exist, and a
    stream of filler took the rest of its ``max_file_store``."""
    config = tmp_path / "small.conf"
    config.write_text("jetstream { max_file_store: 256KB }\n")
    with EmbeddedNats(tmp_path / "nats", config=config) as server:

        async def fill() -> None:
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            try:
                await ensure_streams(js, STREAMS)
                await js.add_stream(name="FILLER", subjects=["filler"])
                full = None
                for _ in range(100):
                    try:
                        await js.publish("filler", b"x" * 16_000)
                    except nats.js.errors.ServiceUnavailableError as exc:
                        full = exc
                        break
                assert full is not None, "the filler never filled the storage"
            finally:
                await nc.close()

        anyio.run(fill, backend="asyncio")
        yield server.url


def test_a_jetstream_api_error_is_one_line_with_its_fix(full_server: str) -> None:
    world = unique_world("full")

    async def write() -> None:
        async with worldline.connect(full_server, world=world, agent="ada") as ada:
            await ada.add("Anything")

    with pytest.raises(BusRefused, match="storage is full") as refused:
        anyio.run(write, backend="asyncio")
    assert isinstance(refused.value, WorldlineError)
    for verb in (["add", "x"], ["write", "project:p", "phase", "sla"]):
        result = _cli(full_server, *verb, "--world", world)
        assert result.returncode == 4, result.stderr
        line = _one_line(result)
        assert "insufficient resources" in line
        assert "storage is full" in line
        assert "Free disk space" in line


def test_an_mcp_tool_reports_a_permission_refusal_as_a_tool_error() -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    from worldline.mcp.server import _tool_errors
    from worldline.sdk.errors import PermissionDenied

    refusal = "permission denied publishing to wl.w.ops.a: these credentials are for b"
    with pytest.raises(ToolError) as caught, _tool_errors("write"):
        raise PermissionDenied(refusal)
    assert str(caught.value) == refusal

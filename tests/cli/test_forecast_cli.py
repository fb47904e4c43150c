"""``worldline forecast``, ``worldline before --forecast`` and the MCP ``forecast``
tool (and ``before`` with ``forecast``), as subprocesses against a real nats-server,
a real simulator with a small index, and the projector's writers."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

import worldline
from tests.runtime.test_forecast import ASK, SEARCH, make_index
from tests.support import running, unique_world
from worldline.actors.registry import build

if TYPE_CHECKING:
    from mcp.types import CallToolResult

pytestmark = [pytest.mark.cli, pytest.mark.nats]

WORLDLINE = str(Path(sys.executable).parent / "worldline")
FAR = "Quarterly revenue grew in the northern region"


def _specs(tmp_path: Path) -> list[Any]:
    writers = [build(n) for n in ("fusion", "materializer", "projector")]
    return [*writers, build("simulator", sim_index=make_index(tmp_path))]


async def _cli(
    nats_url: str, world: str, *argv: str
) -> subprocess.CompletedProcess[str]:
    command = [WORLDLINE, *argv, "--nats", nats_url, "--world", world, "--agent", "ada"]
    run = partial(
        subprocess.run, command, capture_output=True, text=True, timeout=60, check=False
    )
    return await anyio.to_thread.run_sync(run)


async def test_the_forecast_verb_and_before_forecast(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("cliforecast")
    async with running(_specs(tmp_path), url=nats_url, data=tmp_path / "actors"):
        async with worldline.connect(nats_url, world=world, agent="ada") as ada:
            await ada.add(ASK, type="gap")
        said = await _cli(nats_url, world, "forecast", ASK)
        as_json = await _cli(nats_url, world, "forecast", SEARCH, "--k", "3", "--json")
        far = await _cli(nats_url, world, "forecast", FAR)
        far_json = await _cli(nats_url, world, "forecast", FAR, "--json")
        excluded = await _cli(
            nats_url, world, "forecast", "--exclude", "lin-a", ASK, "--json"
        )
        unknown = await _cli(nats_url, world, "forecast", ASK, "--exclude", "lin-x")
        before = await _cli(nats_url, world, "before", ASK, "--forecast")
        before_json = await _cli(nats_url, world, "before", ASK, "--forecast", "--json")
    assert said.returncode == 0, said.stderr
    lines = said.stdout.splitlines()
    assert lines[0] == f"forecast for the message {ASK!r}:"
    assert lines[1] == "  2x  To Lisbon, please."
    assert lines[2] == "      similarity 1.000, lineages: lin-a, lin-c"
    assert "1x  Madrid." in said.stdout
    assert as_json.returncode == 0, as_json.stderr
    reply = json.loads(as_json.stdout)
    assert reply["grounded"] is True
    assert reply["move_kind"] == "tool"
    assert reply["outcomes"][0]["support"] == 2
    assert reply["outcomes"][0]["lineages"] == ["lin-a", "lin-c"]
    assert far.returncode == 0, far.stderr  # no grounding is an answer, not a failure
    assert "no grounding:" in far.stdout
    assert "x  " not in far.stdout  # and no outcome is shown
    # --json keeps every key, defaults too (issue 26.5): no outcomes, a message.
    ungrounded = json.loads(far_json.stdout)
    assert ungrounded["grounded"] is False
    assert ungrounded["outcomes"] == []
    assert ungrounded["move_kind"] == "message"
    kept = json.loads(excluded.stdout)  # --exclude did not swallow the move
    assert kept["move"] == ASK
    assert all("lin-a" not in o["lineages"] for o in kept["outcomes"])
    assert unknown.returncode == 3
    assert "unknown_lineage" in unknown.stderr
    assert before.returncode == 0, before.stderr
    section = before.stdout.split("\n\nForecasts for the top moves")[1]
    assert section.splitlines()[1:6] == [
        f"1. Answer the open question: {ASK}",
        "   2x  To Lisbon, please.",
        "       similarity 1.000, lineages: lin-a, lin-c",
        "   1x  Madrid.",
        "       similarity 1.000, lineages: lin-b",
    ]
    assert section.splitlines()[6].startswith(
        "   (3 of 3 nearest real transitions score above 0.50: 2 distinct outcomes;"
    )
    annotated = json.loads(before_json.stdout)
    assert annotated["view"]["moves"][0]["text"].endswith(ASK)
    assert annotated["forecasts"][0]["forecast"]["grounded"] is True


def _data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def test_the_mcp_forecast_tool_and_before_with_forecast(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("mcpforecast")
    server = StdioServerParameters(
        command=WORLDLINE,
        args=["mcp", "--agent", "ada", "--world", world, "--nats", nats_url],
    )
    with (tmp_path / "mcp-stderr.log").open("w") as errlog:
        async with (
            running(_specs(tmp_path), url=nats_url, data=tmp_path / "actors"),
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            async with worldline.connect(nats_url, world=world, agent="ada") as ada:
                await ada.add(ASK, type="gap")
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            schema = tools["forecast"].input_schema
            assert schema["required"] == ["move"]
            k = schema["properties"]["k"]
            assert (k["minimum"], k["maximum"]) == (1, 10)
            assert schema["properties"]["move"]["maxLength"] == 4096
            assert "forecast" in tools["before"].input_schema["properties"]
            said = _data(await session.call_tool("forecast", {"move": ASK}))
            far = _data(await session.call_tool("forecast", {"move": FAR}))
            bad = await session.call_tool("forecast", {"move": ASK, "k": 11})
            refused = await session.call_tool(
                "forecast", {"move": ASK, "exclude_lineages": ["lin-x"]}
            )
            plain = _data(await session.call_tool("before", {"query": ASK}))
            annotated = _data(
                await session.call_tool("before", {"query": ASK, "forecast": True})
            )
    assert said["grounded"] is True
    assert [(o["observation"], o["support"]) for o in said["outcomes"]] == [
        ("To Lisbon, please.", 2),
        ("Madrid.", 1),
    ]
    assert far["grounded"] is False
    assert far["outcomes"] == []
    assert far["note"].startswith("no grounding:")
    assert bad.is_error
    assert refused.is_error
    assert "unknown_lineage" in str(refused.content)
    assert "forecasts" not in plain
    top = annotated["forecasts"][0]
    assert top["asked"] == ASK
    assert top["forecast"]["outcomes"][0]["lineages"] == ["lin-a", "lin-c"]
    assert "Traceback" not in (tmp_path / "mcp-stderr.log").read_text()

"""``worldline mcp`` as an MCP client runs it: a subprocess over stdio, driven by the
official MCP client against a real nats-server and the five actors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

import worldline
from tests.support import all_actors, running, unique_world
from worldline.actors.extractor.text import belief_id
from worldline.mcp.server import TOOLS
from worldline.sdk.declaration import load_declaration

pytestmark = [pytest.mark.cli, pytest.mark.nats]

WORLDLINE = str(Path(sys.executable).parent / "worldline")
CREW_TOML = Path(__file__).resolve().parents[2] / "examples" / "crew.toml"
PILOT = "project:soteria-pilot-conversion"
OUTPUT = (
    "Authentication is enforced at the API middleware.\n"
    "A schema change to the sessions table risks logging every user out.\n"
    "Is the export route reachable from outside the VPC?\n"
)


def _text(result: CallToolResult, index: int = 0) -> str:
    block = result.content[index]
    assert isinstance(block, TextContent)
    return block.text


async def _ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, _text(result)
    data = result.structured_content
    assert isinstance(data, dict)
    return data


async def test_mcp_tools_read_and_change_the_world(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("mcp")
    server = StdioServerParameters(
        command=WORLDLINE,
        args=["mcp", "--agent", "ada", "--world", world, "--nats", nats_url],
    )
    with (tmp_path / "mcp-stderr.log").open("w") as errlog:
        async with (
            running(all_actors(), url=nats_url, data=tmp_path / "actors"),
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            async with worldline.connect(nats_url, world=world, agent="ada") as ada:
                decl = load_declaration(CREW_TOML)  # the example crew, renamed
                await ada.declare(
                    msgspec.structs.replace(
                        decl, world=msgspec.structs.replace(decl.world, id=world)
                    )
                )
            await _drive(session, world)
    assert "Traceback" not in (tmp_path / "mcp-stderr.log").read_text()


async def _drive(session: ClientSession, world: str) -> None:
    """Every tool once, in the order an agent would use them, and bad calls."""
    await session.initialize()
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) == set(TOOLS)
    required = {
        name: set(tool.input_schema.get("required", [])) for name, tool in tools.items()
    }
    assert required["before"] == {"query"}
    assert required["after"] == {"output"}
    assert required["add"] == {"text"}
    assert required["evidence"] == {"belief_id", "direction", "kind", "source"}
    assert required["trace"] == {"belief_id"}
    assert required["write"] == {"entity", "field", "value"}
    assert required["read"] == required["inbox"] == set()
    assert required["search"] == {"query"}
    search_props = tools["search"].input_schema["properties"]
    assert (search_props["limit"]["minimum"], search_props["limit"]["maximum"]) == (
        1,
        200,
    )
    assert search_props["query"]["minLength"] == 1
    evidence_props = tools["evidence"].input_schema["properties"]
    assert "measurement" in json.dumps(evidence_props["kind"])
    assert "refutes" in json.dumps(evidence_props["direction"])

    # Seed a belief, then move its posterior with evidence.
    seeded = await _ok(session, "add", text="Market size is $4.2B", confidence=0.85)
    moved = await _ok(
        session,
        "evidence",
        belief_id=seeded["id"],
        direction="refutes",
        kind="measurement",
        source="sec-filing",
    )
    assert moved["id"] == seeded["id"]
    assert moved["confidence"] < seeded["confidence"]

    # A turn's output: what was extracted, applied.
    extracted = await _ok(session, "after", output=OUTPUT)
    assert extracted["applied"] is True
    claim = belief_id(world, "Authentication is enforced at the API middleware.")
    assert extracted["claims"] == [claim]
    assert len(extracted["risks"]) == 1
    assert len(extracted["gaps"]) == 1

    # The next worldview reads it: prompt text, then canonical JSON.
    result = await session.call_tool("before", {"query": "review billing auth"})
    assert not result.is_error
    prompt, canonical = _text(result, 0), _text(result, 1)
    view = json.loads(canonical)
    assert view["query"] == "review billing auth"
    assert view["agent"] == "ada"
    assert prompt == view["prompt"]
    assert canonical == json.dumps(view, sort_keys=True, separators=(",", ":"))
    traced = {i for leaf in view.get("current", []) for i in leaf.get("trace", [])}
    assert claim in traced or extracted["gaps"][0] in traced

    state = await _ok(session, "read")
    ids = {b["id"] for b in state["beliefs"]} | {g["id"] for g in state["gaps"]}
    assert {seeded["id"], claim, *extracted["gaps"]} <= ids
    await _search(session, seeded["id"], {seeded["id"], claim, *extracted["risks"]})
    chain = await _ok(session, "trace", belief_id=claim)
    assert [s["evidence"]["artifact"] for s in chain["steps"]] == [extracted["obs_id"]]

    # Bad calls are tool errors with the SDK's message; the server goes on.
    missing = await session.call_tool("trace", {"belief_id": "b-nope"})
    assert missing.is_error
    assert "no belief 'b-nope'" in _text(missing)
    too_sure = await session.call_tool(
        "add", {"text": "Churn is low", "confidence": 1.5}
    )
    assert too_sure.is_error
    assert "confidence" in _text(too_sure)
    assert "less than or equal to 1" in _text(too_sure)
    goal_prior = await session.call_tool(
        "add", {"text": "Ship the SLA memo", "type": "goal", "confidence": 0.5}
    )
    assert goal_prior.is_error
    assert "a goal carries no probability" in _text(goal_prior)
    stale = await session.call_tool(
        "write",
        {
            "entity": PILOT,
            "field": "phase",
            "value": "sla",
            "expect_version": 0,
        },
    )
    assert stale.is_error
    assert "rejected: version_conflict" in _text(stale)
    assert "value 'pilot'" in _text(stale)
    written = await _ok(session, "write", entity=PILOT, field="phase", value="sla")
    assert written["version"] > 0

    # The refusal also waits in ada's inbox; acking it empties the inbox.
    first = await _ok(session, "inbox", ack=True, wait=2.0)
    assert [m["kind"] for m in first["messages"]] == ["inbox.rejection.v1"]
    assert (await _ok(session, "inbox"))["messages"] == []
    again = await _ok(session, "trace", belief_id=seeded["id"])
    assert len(again["steps"]) == 1


async def _search(session: ClientSession, seeded: str, found: set[str]) -> None:
    """The search tool: the exact words first, with channels and trace; pages that
    walk every hit once; a bad cursor and an out-of-bounds limit refused."""
    page = await _ok(session, "search", query="market size")
    first = page["hits"][0]
    assert (first["rank"], first["belief"]["id"]) == (1, seeded)
    assert first["channels"]["lexical"] > 0
    assert any("sec-filing" in entry for entry in first["trace"])
    assert "next_cursor" in page
    assert "embedder" in page

    query = "market size authentication middleware schema sessions table"
    whole = await _ok(session, "search", query=query, limit=200)
    ids = [hit["belief"]["id"] for hit in whole["hits"]]
    assert found <= set(ids)
    assert not whole["next_cursor"]
    walked: list[str] = []
    cursor = ""
    while True:
        part = await _ok(session, "search", query=query, limit=1, cursor=cursor)
        assert len(part["hits"]) <= 1
        walked += [hit["belief"]["id"] for hit in part["hits"]]
        cursor = part["next_cursor"]
        if not cursor:
            break
    assert walked == ids  # each hit once, in rank order

    bad = await session.call_tool("search", {"query": query, "cursor": "not-mine"})
    assert bad.is_error
    assert "bad request" in _text(bad)
    assert "next_cursor" in _text(bad)
    too_many = await session.call_tool("search", {"query": query, "limit": 500})
    assert too_many.is_error
    assert "less than or equal to 200" in _text(too_many)

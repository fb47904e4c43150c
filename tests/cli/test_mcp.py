"""``worldline mcp`` as an MCP client runs it: a subprocess over stdio, driven by the
official MCP client against a real nats-server and the five actors."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.stdio import get_default_environment
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import (
    CallToolResult,
    ReadResourceResult,
    ResourceUpdatedNotification,
    TextContent,
    TextResourceContents,
)

import worldline
from tests.support import all_actors, running, unique_world
from worldline.actors.extractor.text import belief_id
from worldline.mcp.resources import resource_uri
from worldline.mcp.server import TOOLS, server_version
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


def _resource_text(result: ReadResourceResult) -> str:
    block = result.contents[0]
    assert isinstance(block, TextResourceContents)
    return block.text


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
    updated = _Updated()
    server = StdioServerParameters(
        command=WORLDLINE,
        args=["mcp", "--agent", "ada", "--world", world, "--nats", nats_url],
        # The code under test (a worktree on PYTHONPATH), not only the install.
        env={
            **get_default_environment(),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        },
    )
    with (tmp_path / "mcp-stderr.log").open("w") as errlog:
        async with (
            running(all_actors(), url=nats_url, data=tmp_path / "actors"),
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write, message_handler=updated.hear) as session,
        ):
            hello = await session.initialize()
            assert hello.server_info.version == server_version() != ""
            assert hello.capabilities.resources is not None
            assert hello.capabilities.resources.subscribe is True
            await _watch(session, nats_url, world, updated)
            await _drive(session, world)
    assert "Traceback" not in (tmp_path / "mcp-stderr.log").read_text()


class _Updated:
    """The resource-updated notifications a (2025-era) client hears."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self._heard = anyio.Event()

    async def hear(self, message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            self.uris.append(str(message.params.uri))
            self._heard.set()

    async def until(self, uri: str) -> None:
        with anyio.fail_after(15):
            while uri not in self.uris:
                self._heard = anyio.Event()
                await self._heard.wait()


async def _watch(
    session: ClientSession, url: str, world: str, updated: _Updated
) -> None:
    """`watch` before the world exists times out unchanged, with no worldview; once
    the crew is declared, a watch from that empty fingerprint returns ada's new
    standing worldview, and a client subscribed to ada's view resource hears that
    it changed; `view` then reads ada's startup view."""
    mine = resource_uri("ada", "view")
    listed = {str(r.uri) for r in (await session.list_resources()).resources}
    assert listed == {resource_uri("ada", p) for p in ("worldview", "view", "inbox")}
    with pytest.warns(MCPDeprecationWarning):  # removed in the 2026 protocol only
        await session.subscribe_resource(mine)
    with pytest.warns(MCPDeprecationWarning), pytest.raises(MCPError, match="you are"):
        await session.subscribe_resource(resource_uri("bob", "view"))
    idle = await _ok(session, "watch", timeout=0.3)
    assert idle == {"changed": False, "fingerprint": "", "worldview": None}
    not_yet = await session.call_tool("view", {})
    assert not_yet.is_error
    assert "is not declared" in _text(not_yet)
    async with worldline.connect(url, world=world, agent="ada") as ada:
        decl = load_declaration(CREW_TOML)  # the example crew, renamed
        await ada.declare(
            msgspec.structs.replace(
                decl, world=msgspec.structs.replace(decl.world, id=world)
            )
        )
    changed = await _ok(session, "watch", since="", timeout=20)
    assert changed["changed"] is True
    assert changed["worldview"]["agent"] == "ada"
    assert len(changed["fingerprint"]) == 16
    same = await _ok(session, "watch", since=changed["fingerprint"], timeout=0.2)
    assert same["changed"] is False
    await updated.until(mine)
    view = await _ok(session, "view")
    assert (view["world"], view["agent"]) == (world, "ada")
    read = await session.read_resource(mine)
    assert json.loads(_resource_text(read))["agent"] == "ada"
    prompts = (await session.list_prompts()).prompts
    assert [(p.name, [a.name for a in p.arguments or []]) for p in prompts] == [
        ("turn", ["task"])
    ]
    turn = await session.get_prompt("turn", {"task": "plan the SLA memo"})
    block = turn.messages[0].content
    assert isinstance(block, TextContent)
    assert "Task: plan the SLA memo" in block.text
    assert "call the `after` tool" in block.text
    assert view["me"]["id"] == "agent:ada"


async def _drive(session: ClientSession, world: str) -> None:
    """Every tool once, in the order an agent would use them, and bad calls."""
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
    seeded = await _ok(
        session,
        "add",
        text="Market size is $4.2B",
        confidence=0.85,
        label="load-bearing",
    )
    assert seeded["label"] == "load-bearing"
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

    await _beliefs(session, seeded, moved, claim, extracted)
    await _judgment(session)

    # Bad calls are tool errors with the SDK's message; the server goes on.
    missing = await session.call_tool("trace", {"belief_id": "b-nope"})
    assert missing.is_error
    assert "no belief 'b-nope'" in _text(missing)
    # As of a time before it was added, the seeded belief is not found.
    early = {"belief_id": seeded["id"], "as_of": "2000-01-01T00:00:00+00:00"}
    for tool in ("get", "trace"):
        gone = await session.call_tool(tool, early)
        assert gone.is_error
        assert "as of 2000-01-01" in _text(gone)
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
    bad_label = await session.call_tool("add", {"text": "x", "label": "two words"})
    assert bad_label.is_error
    assert "is not a label: use 1-64 letters" in _text(bad_label)
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
    unknown = await session.call_tool("read", {"scope": "all"})
    assert unknown.is_error
    assert "unknown argument(s) 'scope': read takes as_of" in _text(unknown)


async def _beliefs(
    session: ClientSession,
    seeded: dict[str, Any],
    moved: dict[str, Any],
    claim: str,
    extracted: dict[str, Any],
) -> None:
    """get, list, trust, relate, resolve and retract, each read back."""
    got = await _ok(session, "get", belief_id=seeded["id"])
    assert got["id"] == seeded["id"]
    assert got["confidence"] == pytest.approx(moved["confidence"], abs=1e-6)
    missing = await session.call_tool("get", {"belief_id": "b-nope"})
    assert missing.is_error
    assert "no belief 'b-nope'" in _text(missing)

    claims = await _ok(session, "list", type="claim")
    assert {seeded["id"], claim} <= {b["id"] for b in claims["beliefs"]}
    assert claims["total"] == len(claims["beliefs"])
    first = await _ok(session, "list", type="claim", limit=1)
    assert len(first["beliefs"]) == 1
    assert first["next_cursor"]

    # Halving the refuting source's trust moves the posterior back toward the prior.
    trusted = await _ok(session, "trust", source="sec-filing", value=0.5)
    assert trusted["seq"] > 0
    after_trust = await _ok(session, "get", belief_id=seeded["id"])
    assert moved["confidence"] < after_trust["confidence"] < seeded["confidence"]

    risk = extracted["risks"][0]
    edge = await _ok(session, "relate", source=claim, target=risk, type="supports")
    assert edge["seq"] > 0
    with anyio.fail_after(10):  # fusion links it just after the materializer
        while True:
            linked = await _ok(session, "trace", belief_id=claim)
            if edge["edge_id"] in {e["id"] for e in linked.get("edges", [])}:
                break
            await anyio.sleep(0.05)
    again = await _ok(session, "relate", source=claim, target=risk, type="supports")
    assert again["edge_id"] == edge["edge_id"]  # the same content: the same edge
    removed = await _ok(session, "unrelate", edge_id=edge["edge_id"])
    assert (removed["id"], removed["removed"]) == (edge["edge_id"], True)
    with anyio.fail_after(10):  # the trace leaves it out once fusion applied it
        while True:
            traced = await _ok(session, "trace", belief_id=claim)
            if edge["edge_id"] not in {e["id"] for e in traced.get("edges", [])}:
                break
            await anyio.sleep(0.05)
    unknown = await session.call_tool("unrelate", {"edge_id": "e-nope"})
    assert unknown.is_error
    assert "no belief edge 'e-nope'" in _text(unknown)

    gap = extracted["gaps"][0]
    resolved = await _ok(session, "resolve", belief_id=gap, reason="it is internal")
    assert (resolved["id"], resolved["status"]) == (gap, "resolved")
    wrong = await session.call_tool("resolve", {"belief_id": claim})
    assert wrong.is_error
    assert "true or false" in _text(wrong)  # a claim needs its outcome

    gone = await _ok(session, "retract", belief_id=risk, reason="no schema change")
    assert gone["status"] == "retracted"
    again = await _ok(session, "retract", belief_id=risk)  # idempotent, as annotated
    assert again["status"] == "retracted"
    active = await _ok(session, "list", type="risk")
    assert risk not in {b["id"] for b in active["beliefs"]}

    # A reply observed with the turn it answers as its context is found through it.
    reply = "Chandler Bing: Every last bite."
    context = "Rachel Green: Did Joey finish the lasagna?"
    seen = await _ok(session, "observe", text=reply, source="scene", context=context)
    assert seen["applied"]
    hits = await _ok(session, "search", query="Joey lasagna")
    assert reply in {h["belief"]["text"] for h in hits["hits"]}
    # A turn observed with its session's date is observed then.
    turn = "Caroline: I went to the LGBTQ support group yesterday."
    day = "2023-05-08T13:56:00Z"
    seen = await _ok(session, "observe", text=turn, source="s1", observed_at=day)
    assert seen["applied"]
    (went,) = seen["claims"]
    chain = await _ok(session, "trace", belief_id=went)
    assert [step["evidence"]["observed_at"] for step in chain["steps"]] == [day]


async def _judgment(session: ClientSession) -> None:
    """Rival answers through add's slot, then assess_sources, sources,
    contradictions and a refused settle."""
    asked = "who wrote The Hobbit"
    right = await _ok(session, "add", text="Tolkien", slot=asked)
    wrong = await _ok(session, "add", text="Lewis", slot=asked)
    assert right["slot"] == wrong["slot"] == asked
    for store in ("shop-a", "shop-b"):
        await _ok(
            session,
            "evidence",
            belief_id=right["id"],
            direction="supports",
            kind="citation",
            source=store,
        )
    rival = await _ok(session, "get", belief_id=wrong["id"])
    assert rival["confidence"] < 0.5  # the other answer's support counts against it
    assessed = await _ok(session, "assess_sources")
    assert assessed["seq"] > 0
    # The shops are declared for nobody: what ada says of them is ada's one voice.
    assert "agent:ada" in {s["source"] for s in assessed["sources"]}
    assert not {"shop-a", "shop-b"} & {s["source"] for s in assessed["sources"]}
    listed = await _ok(session, "sources", source="agent:ada")
    assert listed["sources"][0]["accuracy"] > 0.5
    assert isinstance((await _ok(session, "contradictions"))["contradictions"], list)
    refused = await session.call_tool(
        "settle", {"contradiction_id": "c-nope", "reason": "checked"}
    )
    assert refused.is_error


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

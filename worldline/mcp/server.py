"""``worldline mcp``: one agent's world model as an MCP server over stdio.

An MCP-capable agent (a coding agent, a desktop assistant) starts this process, and
gets tools for the turn loop (``before`` at the start of a turn, ``after`` with its
output at the end) and for the belief state and crew world (``observe``, ``add``,
``evidence``, ``search``, ``trace``, ``read``, ``write``, ``inbox``), and
``forecast``: what really followed actions like a move, from the simulator's index.
Each tool calls the async SDK (:class:`worldline.sdk.client.World`) over one NATS
connection held for the server's lifetime; input schemas come from the SDK's own
types (belief types, evidence kinds, confidence 0-1...).

An SDK error (a bad id, a rejected write, an unreachable bus) becomes an MCP tool error
carrying the SDK's message, and the server keeps serving. stdout is the protocol: logs
go to stderr.
"""

# No `from __future__ import annotations`: the MCP SDK reads these signatures at
# run time (pydantic) to build each tool's input schema.

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Any

import msgspec
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from worldline.actors.runtime.errors import ActorError
from worldline.protocols.beliefs import Direction, EvidenceKind
from worldline.protocols.messages import BeliefType
from worldline.protocols.world import Value
from worldline.sdk.client import World, connect
from worldline.sdk.errors import (
    BadRequest,
    NotApplied,
    Rejected,
    SimulationError,
    WorldlineError,
)
from worldline.sdk.hooks import Extracted, observed, reported
from worldline.sdk.paging import SEARCH_PAGE
from worldline.sdk.sim import FORECAST_MOVES

__all__ = ["TOOLS", "build_server", "serve"]

log = logging.getLogger("worldline.mcp")

TOOLS = (
    "before",
    "after",
    "observe",
    "add",
    "evidence",
    "search",
    "trace",
    "read",
    "write",
    "inbox",
    "forecast",
)

INSTRUCTIONS = """\
worldline is the crew's shared world model: what is true here, how sure we are, and
what to do next. At the start of every turn call `before` with the move you are about
to make and read its prompt; at the end call `after` with your turn's output, so your
claims, risks and open questions become beliefs the whole crew reads. Use `search` to
find the beliefs that answer a question (ranked, each with its scores and evidence),
`evidence` to support or refute a belief by id, `trace` to see why a belief reads as it
does, `write` for crew fields (with the version you read), and `inbox` for work
addressed to you. `forecast` (and `before` with `forecast: true` for its top moves)
returns what really followed actions like a move in recorded traces, with how many
transitions support each outcome, or "no grounding": it never guesses."""

BeliefId = Annotated[str, Field(description="a belief id, e.g. b-3f2a...")]
Confidence = Annotated[
    float, Field(ge=0.0, le=1.0, description="a weak prior, 0-1 (not for goals/gaps)")
]
Wait = Annotated[
    float,
    Field(ge=0.0, le=60.0, description="seconds to wait until it is applied"),
]


def _json(value: Any) -> Any:
    return msgspec.to_builtins(value)


def _result(data: dict[str, Any], *text: str) -> CallToolResult:
    """A tool result: ``text`` blocks for the model (default: the data as JSON), and
    the same data as structured content."""
    blocks = text or (msgspec.json.encode(data).decode(),)
    return CallToolResult(
        content=[TextContent(type="text", text=t) for t in blocks],
        structured_content=data,
    )


def _extracted(found: Extracted) -> CallToolResult:
    grouped = found.by_type()
    data = {
        "obs_id": found.obs_id,
        "applied": found.applied,
        "claims": grouped.get("claim", []),
        "assumptions": grouped.get("assumption", []),
        "risks": grouped.get("risk", []),
        "gaps": grouped.get("gap", []),
        "goals": grouped.get("goal", []),
        "evidence": grouped.get("evidence", []),
        "statements": _json(found.statements),
    }
    return _result(data)


@contextmanager
def _tool_errors(tool: str) -> Iterator[None]:
    """SDK errors become MCP tool errors with the SDK's message (the model reads it
    and can correct the call); anything else is a crash the server logs."""
    try:
        yield
    except BadRequest as exc:
        raise ToolError(f"bad request: {exc}") from exc
    except Rejected as exc:
        detail = ""
        if exc.current_version is not None:
            detail = (
                f" (current version {exc.current_version}, value {exc.current_value!r})"
            )
        raise ToolError(f"rejected: {exc.reason}{detail}") from exc
    except SimulationError as exc:
        raise ToolError(f"simulator refused: {exc}") from exc
    except NotApplied as exc:
        raise ToolError(f"not applied: {exc}") from exc
    except ActorError as exc:  # BusUnavailable and the runtime's own errors
        log.warning("%s: %s", tool, exc)
        raise ToolError(f"unavailable: {exc}") from exc
    except WorldlineError as exc:  # PermissionDenied: the message names the fix
        raise ToolError(str(exc)) from exc


def build_server(world: World) -> MCPServer:
    """An MCP server whose tools act as ``world.agent`` in ``world.world``."""
    server: MCPServer = MCPServer(
        name="worldline",
        title=f"worldline: {world.world} as {world.agent}",
        instructions=INSTRUCTIONS,
    )

    @server.tool()
    async def before(
        query: Annotated[str, Field(description="the move you are about to make")],
        at: Annotated[
            datetime | None, Field(description="evaluate at this ISO time")
        ] = None,
        forecast: Annotated[
            bool,
            Field(
                description=f"also forecast the top {FORECAST_MOVES} moves from real "
                "transitions (the simulator's index), or say 'no grounding'"
            ),
        ] = False,
    ) -> CallToolResult:
        """Read the bounded worldview before a move: beliefs in play, goals, gaps,
        policy, allowed actions and ranked next moves, each traced to belief ids.
        Returns the prompt text, then the worldview as canonical JSON; with
        ``forecast``, also ``forecasts``: for each top move, the real outcomes
        that followed actions like it (support, lineages) or "no grounding"."""
        with _tool_errors("before"):
            if forecast:
                annotated = await world.before_with_forecasts(query, at=at)
                view = annotated.view
            else:
                view = await world.before(query, at=at)
        canonical = msgspec.json.encode(view, order="sorted").decode()
        data: dict[str, Any] = {
            "prompt": view.prompt,
            "worldview": msgspec.json.decode(canonical),
        }
        if not forecast:
            return _result(data, view.prompt, canonical)
        data["forecasts"] = _json(annotated.forecasts)
        forecasts = msgspec.json.encode(data["forecasts"]).decode()
        return _result(data, view.prompt, canonical, forecasts)

    @server.tool()
    async def after(
        output: Annotated[str, Field(description="your turn's output text")],
        wait: Wait = 10.0,
    ) -> CallToolResult:
        """Report your turn's output: the claims, risks, assumptions and open
        questions in it become beliefs (or evidence for ones the world holds).
        Returns their ids by type once applied (``applied`` false if the wait ran
        out)."""
        with _tool_errors("after"):
            found = await reported(world, output, wait=wait)
        return _extracted(found)

    @server.tool()
    async def observe(
        text: Annotated[str, Field(description="the artifact: text, markdown, JSON")],
        source: Annotated[str, Field(description="where it came from")] = "",
        wait: Wait = 10.0,
    ) -> CallToolResult:
        """Hand an artifact (a document, a tool result) to the extractor; returns
        the belief ids read from it by type, once applied."""
        with _tool_errors("observe"):
            found = await observed(world, text, source=source, wait=wait)
        return _extracted(found)

    @server.tool()
    async def add(
        text: Annotated[str, Field(min_length=1, description="the statement")],
        confidence: Confidence | None = None,
        type: BeliefType = "claim",
    ) -> CallToolResult:
        """Seed a belief (a stated confidence is a weak prior); returns it with
        its id once every agent can read it."""
        with _tool_errors("add"):
            belief = await world.add(text, confidence=confidence, type=type)
        return _result(_json(belief))

    @server.tool()
    async def evidence(
        belief_id: BeliefId,
        direction: Direction,
        kind: EvidenceKind,
        source: Annotated[str, Field(description="who or what it came from")],
        text: Annotated[str, Field(description="what it says")] = "",
    ) -> CallToolResult:
        """Attach one piece of evidence to a belief; returns the belief as it now
        reads (its posterior moved by the evidence's kind and direction)."""
        with _tool_errors("evidence"):
            belief = await world.evidence(
                belief_id, direction=direction, kind=kind, source=source, text=text
            )
        return _result(_json(belief))

    @server.tool()
    async def search(
        query: Annotated[
            str,
            Field(min_length=1, max_length=4096, description="what to look for"),
        ],
        limit: Annotated[
            int, Field(ge=1, le=SEARCH_PAGE, description="hits on this page")
        ] = 10,
        type: BeliefType | None = None,
        cursor: Annotated[
            str,
            Field(
                max_length=4096,
                description="the next_cursor of the previous page ('' for the first)",
            ),
        ] = "",
        at: Annotated[
            datetime | None, Field(description="read at this ISO time")
        ] = None,
    ) -> CallToolResult:
        """Find the active beliefs that best answer ``query``, best first. Each hit
        has its rank, the belief (id, text, type, confidence...), its fused
        ``score``, each channel's own score (``channels``: lexical, semantic,
        prior) and its ``trace`` (evidence id and source per piece). Pass
        ``next_cursor`` back as ``cursor`` for the next page ("" when none)."""
        with _tool_errors("search"):
            page = await world.search(
                query, limit=limit, type=type, at=at, cursor=cursor
            )
        data = {
            "hits": [
                {"rank": rank, **_json(hit)} for rank, hit in enumerate(page.hits, 1)
            ],
            "embedder": page.embedder,
            "next_cursor": page.next_cursor,
        }
        return _result(data)

    @server.tool()
    async def trace(belief_id: BeliefId) -> CallToolResult:
        """A belief's provenance: every evidence item, its source and observation,
        and how the confidence moved at each step."""
        with _tool_errors("trace"):
            reply = await world.trace(belief_id)
        return _result(_json(reply))

    @server.tool()
    async def read() -> CallToolResult:
        """The whole world model: beliefs, gaps, goals, contradictions, edges, and
        the crew world (declaration, entities, typed edges)."""
        with _tool_errors("read"):
            reply = await world.read()
        return _result(_json(reply))

    @server.tool()
    async def write(
        entity: Annotated[str, Field(description="type:name, e.g. project:soteria")],
        field: str,
        value: Value,
        expect_version: Annotated[
            int | None,
            Field(ge=0, description="the version you read (0: must not exist yet)"),
        ] = None,
    ) -> CallToolResult:
        """Write one crew field through authority and optimistic concurrency;
        returns its version. A stale ``expect_version`` is rejected with the
        current version and value."""
        with _tool_errors("write"):
            version = await world.write(
                entity, field, value, expect_version=expect_version
            )
        return _result({"entity": entity, "field": field, "version": version})

    @server.tool()
    async def inbox(
        ack: Annotated[
            bool, Field(description="acknowledge what is returned (else kept)")
        ] = False,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
        wait: Annotated[float, Field(ge=0.0, le=30.0)] = 0.5,
    ) -> CallToolResult:
        """Your durable inbox: work requests, field-change notifications and
        rejections, oldest first. Unacknowledged messages come back next time."""
        with _tool_errors("inbox"):
            items = await world.inbox(wait=wait, limit=limit)
            try:
                messages = [{"seq": i.seq, **_json(i.message)} for i in items]
            finally:
                if ack:
                    await world.ack(items)
                else:
                    for item in items:
                        await item.release()
        return _result({"messages": messages, "acked": ack})

    @server.tool()
    async def forecast(
        move: Annotated[
            str,
            Field(
                min_length=1,
                max_length=4096,
                description="the action: a message, or a tool call name(arguments)",
            ),
        ],
        context: Annotated[
            str,
            Field(max_length=262_144, description="the conversation before the move"),
        ] = "",
        k: Annotated[int, Field(ge=1, le=10, description="neighbours retrieved")] = 5,
        exclude_lineages: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=128)]],
            Field(max_length=64, description="lineages or groups to keep out"),
        ] = [],  # noqa: B006  (pydantic copies defaults; the schema shows [])
    ) -> CallToolResult:
        """What really followed actions like ``move`` in recorded traces: each
        distinct real observation with its ``support`` (how many of the nearest
        transitions gave it), ``lineages``, ``transitions`` and best
        ``similarity``; or ``grounded`` false and a ``note`` "no grounding: ..."
        when nothing is close enough. Never a guess."""
        with _tool_errors("forecast"):
            reply = await world.forecast(
                move, context=context, k=k, exclude_lineages=exclude_lineages
            )
        data = _json(reply)
        data.setdefault("outcomes", [])  # "no grounding" says so with an empty list
        return _result(data)

    return server


async def serve(
    url: str, *, world: str, agent: str, request_timeout: float = 10.0
) -> None:
    """Serve MCP over stdin/stdout until the client closes it, on one connection.

    Raises:
        BadRequest: the world or agent name is not a valid subject token.
        BusUnavailable: NATS cannot be reached at ``url``.
    """
    async with connect(
        url, world=world, agent=agent, request_timeout=request_timeout
    ) as handle:
        log.info("serving world %r as %r over stdio (nats %s)", world, agent, url)
        await build_server(handle).run_stdio_async()

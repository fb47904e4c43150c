"""The MCP tools that only read: the turn loop's ``before``, ``search``, ``list``,
``get``, ``trace``, ``read``, ``view``, ``watch`` and ``forecast``. Each calls the SDK
as the calling agent."""

# No `from __future__ import annotations`: the MCP SDK reads these signatures at
# run time (pydantic) to build each tool's input schema.

import hashlib
from collections.abc import AsyncGenerator
from contextlib import aclosing
from datetime import datetime
from typing import Annotated, Any, cast

import anyio
import msgspec
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult
from pydantic import Field

from worldline.mcp.common import Agents, as_json, result, tool_errors
from worldline.mcp.schemas import shape, struct_schema, tool
from worldline.protocols.base import Belief
from worldline.protocols.messages import BeliefType
from worldline.protocols.rpc import (
    AgentView,
    BeliefListReply,
    SearchHit,
    SimForecastReply,
    TraceReply,
    WorldReply,
)
from worldline.protocols.worldview import Worldview
from worldline.sdk.client import World
from worldline.sdk.paging import SEARCH_PAGE, Flag, Status
from worldline.sdk.sim import FORECAST_MOVES, MoveForecast

__all__ = ["fingerprint", "read_tools"]

BeliefId = Annotated[str, Field(description="a belief id, e.g. b-3f2a...")]
At = Annotated[datetime | None, Field(description="read at this ISO time")]
AsOf = Annotated[
    datetime | None,
    Field(description="as the world had been told by this ISO time (recorded time)"),
]
Cursor = Annotated[
    str,
    Field(
        max_length=4096,
        description="the next_cursor of the previous page ('' for the first)",
    ),
]
_STR = {"type": "string"}
_NOT_DECLARED = (
    "world {world!r} is not declared (or its projector has not built your view "
    "yet): declare it first (`worldline world load FILE --world {world}`)"
)


def fingerprint(view: Worldview | None) -> str:
    """A short digest of a worldview's canonical bytes ("" for none)."""
    if view is None:
        return ""
    encoded = msgspec.json.encode(view, order="sorted")
    return hashlib.sha256(encoded).hexdigest()[:16]


def read_tools(agents: Agents) -> list[Tool]:
    """The read-only tools, acting as the caller (``agents.current()``)."""

    async def before(
        query: Annotated[str, Field(description="the move you are about to make")],
        at: At = None,
        as_of: AsOf = None,
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
        world = agents.current()
        with tool_errors("before"):
            if forecast:
                annotated = await world.before_with_forecasts(query, at=at, as_of=as_of)
                view = annotated.view
            else:
                view = await world.before(query, at=at, as_of=as_of)
        canonical = msgspec.json.encode(view, order="sorted").decode()
        data: dict[str, Any] = {
            "prompt": view.prompt,
            "worldview": msgspec.json.decode(canonical),
        }
        if not forecast:
            return result(data, view.prompt, canonical)
        data["forecasts"] = as_json(annotated.forecasts)
        forecasts = msgspec.json.encode(data["forecasts"]).decode()
        return result(data, view.prompt, canonical, forecasts)

    async def search(
        query: Annotated[
            str,
            Field(min_length=1, max_length=4096, description="what to look for"),
        ],
        limit: Annotated[
            int, Field(ge=1, le=SEARCH_PAGE, description="hits on this page")
        ] = 10,
        type: BeliefType | None = None,
        cursor: Cursor = "",
        at: At = None,
        as_of: AsOf = None,
    ) -> CallToolResult:
        """Find the active beliefs that best answer ``query``, best first. Each hit
        has its rank, the belief (id, text, type, confidence...), its fused
        ``score``, each channel's own score (``channels``: lexical, semantic,
        prior) and its ``trace`` (evidence id and source per piece). Pass
        ``next_cursor`` back as ``cursor`` for the next page ("" when none)."""
        with tool_errors("search"):
            page = await agents.current().search(
                query, limit=limit, type=type, at=at, cursor=cursor, as_of=as_of
            )
        data = {
            "hits": [
                {"rank": rank, **as_json(hit)} for rank, hit in enumerate(page.hits, 1)
            ],
            "embedder": page.embedder,
            "next_cursor": page.next_cursor,
        }
        return result(data)

    async def list_beliefs(
        type: BeliefType | None = None,
        label: Annotated[str | None, Field(description="only this label")] = None,
        flag: Flag | None = None,
        status: Status = "active",
        limit: Annotated[
            int, Field(ge=1, le=1000, description="beliefs on this page")
        ] = 100,
        cursor: Cursor = "",
        at: At = None,
        as_of: AsOf = None,
    ) -> CallToolResult:
        """The beliefs (active by default, or a filtered part: type, label, flag,
        status), oldest first, one page at a time: ``total`` says how many match,
        ``next_cursor`` ("" when none follow) fetches the next page."""
        with tool_errors("list"):
            page = await agents.current().list_page(
                type=type,
                label=label,
                flag=flag,
                status=status,
                at=at,
                limit=limit,
                cursor=cursor,
                as_of=as_of,
            )
        data = as_json(page)
        data.setdefault("beliefs", [])  # an empty page says so with an empty list
        data.setdefault("total", 0)
        data.setdefault("next_cursor", "")
        return result(data)

    async def get(
        belief_id: BeliefId, at: At = None, as_of: AsOf = None
    ) -> CallToolResult:
        """One belief by id as every agent reads it now (or at ``at``; or as the
        world knew it at ``as_of``): text, type, confidence, evidence weight, label,
        flags and status."""
        world = agents.current()
        with tool_errors("get"):
            belief = await world.get(belief_id, at=at, as_of=as_of)
        if belief is None:
            when = "" if as_of is None else f" as of {as_of.isoformat()}"
            raise ToolError(
                f"bad request: no belief {belief_id!r} in {world.world!r}{when}"
            )
        return result(as_json(belief))

    async def trace(belief_id: BeliefId, as_of: AsOf = None) -> CallToolResult:
        """A belief's provenance: every evidence item, its source and observation,
        and how the confidence moved at each step (as known at ``as_of``)."""
        with tool_errors("trace"):
            reply = await agents.current().trace(belief_id, as_of=as_of)
        return result(as_json(reply))

    async def read(as_of: AsOf = None) -> CallToolResult:
        """The whole world model: beliefs, gaps, goals, contradictions, edges, and
        the crew world (declaration, entities, typed edges); with ``as_of``, as
        the world knew it then."""
        with tool_errors("read"):
            reply = await agents.current().read(as_of=as_of)
        return result(as_json(reply))

    async def view() -> CallToolResult:
        """Your startup view: yourself, what you are linked to, your open work,
        your inbox (pending count, recent ids), what you may write, your goals,
        constraints and principals, and your standing worldview."""
        world = agents.current()
        with tool_errors("view"):
            found = await world.view()
        if found is None:
            raise ToolError(_NOT_DECLARED.format(world=world.world))
        return result(as_json(found))

    async def watch(
        timeout: Annotated[  # noqa: ASYNC109  (the tool's bounded wait)
            float, Field(ge=0.0, le=300.0, description="seconds to wait at most")
        ] = 30.0,
        since: Annotated[
            str | None,
            Field(
                max_length=64,
                description="the fingerprint you last saw ('' for none): if yours "
                "differs now, the call returns at once; omit it to wait for the "
                "next change",
            ),
        ] = None,
    ) -> CallToolResult:
        """Wait (at most ``timeout`` seconds) for your standing worldview to change:
        ``changed`` true with the new ``worldview`` and its ``fingerprint``, or
        false (and the current ones) when the time ran out. Pass the fingerprint
        back as ``since`` so a change between two calls is never missed."""
        world = agents.current()
        with tool_errors("watch"):
            stored = await world.stored_view()
            latest = stored.worldview if stored else None
            seen = fingerprint(latest) if since is None else since
            if fingerprint(latest) != seen:
                return _watched(True, latest)
            with anyio.move_on_after(timeout):
                async with aclosing(_views(world)) as views:
                    async for pushed in views:
                        latest = pushed.worldview
                        if fingerprint(latest) != seen:
                            return _watched(True, latest)
        return _watched(False, latest)

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
        with tool_errors("forecast"):
            reply = await agents.current().forecast(
                move, context=context, k=k, exclude_lineages=exclude_lineages
            )
        data = as_json(reply)
        data.setdefault("outcomes", [])  # "no grounding" says so with an empty list
        return result(data)

    hit = struct_schema(SearchHit)
    hit["properties"] = {"rank": {"type": "integer"}, **hit["properties"]}
    hit["required"] = ["rank", *hit.get("required", [])]
    hit_defs = hit.pop("$defs", {})
    page = shape(
        {
            "hits": {"type": "array", "items": hit},
            "embedder": _STR,
            "next_cursor": _STR,
        }
    )
    page["$defs"] = {**page.get("$defs", {}), **hit_defs}
    worldview = shape(
        {
            "prompt": _STR,
            "worldview": Worldview,
            "forecasts": list[MoveForecast],
        },
        optional=("forecasts",),
    )
    watched = shape(
        {
            "changed": {"type": "boolean"},
            "fingerprint": _STR,
            "worldview": Worldview | None,
        }
    )
    return [
        tool(
            before,
            title="Read the worldview before a move",
            output=worldview,
            read_only=True,
        ),
        tool(search, title="Search beliefs", output=page, read_only=True),
        tool(
            list_beliefs,
            name="list",
            title="List beliefs",
            output=struct_schema(BeliefListReply),
            read_only=True,
        ),
        tool(get, title="Get a belief", output=struct_schema(Belief), read_only=True),
        tool(
            trace,
            title="Trace a belief's evidence",
            output=struct_schema(TraceReply),
            read_only=True,
        ),
        tool(
            read,
            title="Read the whole world model",
            output=struct_schema(WorldReply),
            read_only=True,
        ),
        tool(
            view,
            title="Your startup view",
            output=struct_schema(AgentView),
            read_only=True,
        ),
        tool(
            watch,
            title="Wait for your worldview to change",
            output=watched,
            read_only=True,
        ),
        tool(
            forecast,
            title="Forecast what follows a move",
            output=struct_schema(SimForecastReply),
            read_only=True,
        ),
    ]


def _views(world: World) -> AsyncGenerator[AgentView, None]:
    """The SDK's view watch, as the async generator it is (closed on exit)."""
    return cast("AsyncGenerator[AgentView, None]", world.watch())


def _watched(changed: bool, view: Worldview | None) -> CallToolResult:
    return result(
        {
            "changed": changed,
            "fingerprint": fingerprint(view),
            "worldview": as_json(view),
        }
    )

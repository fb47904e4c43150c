"""The MCP tools for judgment: how fusion weighs each source (``sources``), learning
it from the world's rival answers (``assess_sources``), and the world's
contradictions (``contradictions``, ``settle``), and its track record
(``calibration``). Each calls the SDK as the calling
agent."""

# No `from __future__ import annotations`: the MCP SDK reads these signatures at
# run time (pydantic) to build each tool's input schema.

from typing import Annotated, Literal

from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult
from pydantic import Field

from worldline.mcp.common import Agents, as_json, result, tool_errors
from worldline.mcp.schemas import shape, struct_schema, tool
from worldline.protocols.beliefs import Contradiction
from worldline.protocols.calibration import CalibrationReply
from worldline.protocols.rpc import SourcesReply, SourceStanding

__all__ = ["judgment_tools"]

_INT = {"type": "integer"}


def judgment_tools(agents: Agents) -> list[Tool]:
    """The judgment tools, acting as the caller (``agents.current()``)."""

    async def sources(
        source: Annotated[str, Field(description="only this source ('' for all)")] = "",
        limit: Annotated[int, Field(ge=1, le=1000, description="rows at most")] = 100,
    ) -> CallToolResult:
        """How fusion weighs each source, least weighed first: its declared trust
        (and lock), the accuracy and independence the last assessment learned, and
        the weight its evidence gets (trust x learned)."""
        with tool_errors("sources"):
            reply = await agents.current().sources(source, limit=limit)
        data = as_json(reply)
        data.setdefault("sources", [])
        data.setdefault("total", 0)
        return result(data)

    async def assess_sources() -> CallToolResult:
        """Learn how reliable each source is from how its answers to the world's
        rival-answer slots (beliefs added with a slot) agree with the others', and
        which sources copy which; their evidence is weighed by it from then on.
        Returns the op's sequence and the least weighed sources."""
        world = agents.current()
        with tool_errors("assess_sources"):
            seq = await world.assess_sources()
            reply = await world.sources(limit=10)
        return result({"seq": seq, "sources": as_json(reply).get("sources", [])})

    async def contradictions(
        status: Annotated[
            Literal["open", "resolved", "dissolved", "all"],
            Field(description="which to list"),
        ] = "open",
    ) -> CallToolResult:
        """The world's contradictions: id, kind (edge or split evidence), the
        beliefs at odds, strength and lifecycle. An open one widens its ends'
        uncertainty until settled."""
        with tool_errors("contradictions"):
            found = await agents.current().contradictions(status=status)
        return result({"contradictions": [as_json(c) for c in found]})

    async def settle(
        contradiction_id: Annotated[str, Field(description="an open one's id, c-...")],
        reason: Annotated[
            str, Field(min_length=1, max_length=4096, description="why it is settled")
        ],
        winner: Annotated[
            str | None, Field(description="the end judged right, or none")
        ] = None,
    ) -> CallToolResult:
        """Settle an open contradiction, naming the belief judged right (or
        none): it stops widening its ends' uncertainty. Returns the op's
        sequence."""
        with tool_errors("settle"):
            seq = await agents.current().resolve_contradiction(
                contradiction_id, reason, winner=winner
            )
        return result({"seq": seq})

    async def calibration(
        bins: Annotated[int, Field(ge=2, le=50, description="curve bins")] = 10,
        limit: Annotated[int, Field(ge=1, le=1000, description="groups each")] = 20,
    ) -> CallToolResult:
        """How well the world's confidence matched what turned out true: Brier
        score, expected calibration error and the reliability curve over every
        belief resolved true or false, for the world and by source, evidence kind
        and agent, and which recalibration the worldview applies."""
        with tool_errors("calibration"):
            reply = await agents.current().calibration(bins=bins, limit=limit)
        # Every key, the empty and default ones too (the wire omits defaults).
        return result(as_json({f: getattr(reply, f) for f in reply.__struct_fields__}))

    contradiction = struct_schema(Contradiction)
    listed = shape({"contradictions": {"type": "array", "items": contradiction}})
    listed["$defs"] = {**listed.get("$defs", {}), **contradiction.pop("$defs", {})}
    assessed = shape({"seq": _INT, "sources": list[SourceStanding]})
    return [
        tool(
            sources,
            title="How each source is weighed",
            output=struct_schema(SourcesReply),
            read_only=True,
        ),
        tool(
            assess_sources,
            title="Learn which sources to believe",
            output=assessed,
            idempotent=True,
        ),
        tool(
            contradictions,
            title="List contradictions",
            output=listed,
            read_only=True,
        ),
        tool(settle, title="Settle a contradiction", output=shape({"seq": _INT})),
        tool(
            calibration,
            title="The world's track record",
            output=struct_schema(CalibrationReply),
            read_only=True,
        ),
    ]

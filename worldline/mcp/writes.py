"""The MCP tools that change the world: the turn loop's ``after`` and ``observe``,
beliefs (``add``, ``evidence``, ``retract``, ``resolve``, ``relate``, ``trust``), crew
fields (``write``) and the inbox. Each calls the SDK as the calling agent."""

# No `from __future__ import annotations`: the MCP SDK reads these signatures at
# run time (pydantic) to build each tool's input schema.

from datetime import datetime
from typing import Annotated

from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult
from pydantic import Field

from worldline.mcp.common import Agents, as_json, result, tool_errors
from worldline.mcp.schemas import ARRAY_OF_IDS, shape, struct_schema, tool
from worldline.protocols.base import Belief
from worldline.protocols.beliefs import BeliefEdge, Direction, EdgeType, EvidenceKind
from worldline.protocols.messages import BeliefType
from worldline.protocols.world import Value
from worldline.sdk.hooks import Extracted, observed, reported
from worldline.sdk.turns import ExtractedStatement

__all__ = ["write_tools"]

BeliefId = Annotated[str, Field(description="a belief id, e.g. b-3f2a...")]
Confidence = Annotated[
    float, Field(ge=0.0, le=1.0, description="a weak prior, 0-1 (not for goals/gaps)")
]
Reason = Annotated[str, Field(max_length=4096, description="why (kept in the trace)")]
Wait = Annotated[
    float,
    Field(ge=0.0, le=60.0, description="seconds to wait until it is applied"),
]

BELIEF = struct_schema(Belief)
EDGE = struct_schema(BeliefEdge)
EXTRACTED = shape(
    {
        "obs_id": {"type": "string"},
        "applied": {"type": "boolean"},
        **dict.fromkeys(("claims", "assumptions", "risks"), ARRAY_OF_IDS),
        **dict.fromkeys(("gaps", "goals", "evidence"), ARRAY_OF_IDS),
        "statements": list[ExtractedStatement],
    }
)
_INT = {"type": "integer"}
_STR = {"type": "string"}


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
        "statements": as_json(found.statements),
    }
    return result(data)


def write_tools(agents: Agents) -> list[Tool]:
    """The mutating tools, acting as the caller (``agents.current()``)."""

    async def after(
        output: Annotated[str, Field(description="your turn's output text")],
        wait: Wait = 10.0,
    ) -> CallToolResult:
        """Report your turn's output: the claims, risks, assumptions and open
        questions in it become beliefs (or evidence for ones the world holds).
        Returns their ids by type once applied (``applied`` false if the wait ran
        out). The same output twice changes nothing."""
        with tool_errors("after"):
            found = await reported(agents.current(), output, wait=wait)
        return _extracted(found)

    async def observe(
        text: Annotated[str, Field(description="the artifact: text, markdown, JSON")],
        source: Annotated[str, Field(description="where it came from")] = "",
        wait: Wait = 10.0,
        context: Annotated[
            str,
            Field(
                max_length=4096,
                description="what came just before it (the previous turn): read "
                "beside its statements, so a reply is found through what it answers",
            ),
        ] = "",
        observed_at: Annotated[
            datetime | None,
            Field(
                description="when the artifact says it happened (ISO time, e.g. a "
                "conversation session's date); default now",
            ),
        ] = None,
    ) -> CallToolResult:
        """Hand an artifact (a document, a tool result) to the extractor; returns
        the belief ids read from it by type, once applied."""
        with tool_errors("observe"):
            found = await observed(
                agents.current(),
                text,
                source=source,
                wait=wait,
                context=context,
                observed_at=observed_at,
            )
        return _extracted(found)

    async def add(
        text: Annotated[str, Field(min_length=1, description="the statement")],
        confidence: Confidence | None = None,
        type: BeliefType = "claim",
        slot: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=256,
                description="the question it answers, when it is one of several "
                "rival answers (evidence for one then counts against the others)",
            ),
        ] = None,
        label: Annotated[
            str | None,
            Field(
                description="a category set by hand, once (load-bearing, "
                "limiting-belief: 1-64 letters, digits and _.:/-); list filters by it",
            ),
        ] = None,
    ) -> CallToolResult:
        """Seed a belief (a stated confidence is a weak prior); returns it with
        its id once every agent can read it. Adding the same statement again
        records your assertion as evidence for it."""
        with tool_errors("add"):
            belief = await agents.current().add(
                text, confidence=confidence, type=type, slot=slot, label=label
            )
        return result(as_json(belief))

    async def evidence(
        belief_id: BeliefId,
        direction: Direction,
        kind: EvidenceKind,
        source: Annotated[str, Field(description="who or what it came from")],
        text: Annotated[str, Field(description="what it says")] = "",
    ) -> CallToolResult:
        """Attach one piece of evidence to a belief; returns the belief as it now
        reads (its posterior moved by the evidence's kind and direction)."""
        with tool_errors("evidence"):
            belief = await agents.current().evidence(
                belief_id, direction=direction, kind=kind, source=source, text=text
            )
        return result(as_json(belief))

    async def retract(belief_id: BeliefId, reason: Reason = "") -> CallToolResult:
        """Retract a belief: it stops counting (no longer in worldviews, lists or
        search) but stays readable and traceable. Returns it with its new
        ``status`` "retracted". Only its author (who added or observed it), the
        operator, the world's admins and the agents of its ``[trust] close`` may."""
        with tool_errors("retract"):
            belief = await agents.current().retract(belief_id, reason)
        return result(as_json(belief))

    async def resolve(
        belief_id: Annotated[str, Field(description="a gap's or a claim's id")],
        reason: Reason = "",
        outcome: Annotated[
            bool | None,
            Field(description="a claim: true or false; a gap (answered): omit it"),
        ] = None,
    ) -> CallToolResult:
        """Mark an open question (a gap) resolved, or a claim resolved true or
        false (its confidence just before joins the calibration record); returns
        it closed. Any agent the world's declaration names may resolve a gap; a
        claim, whoever may retract it."""
        with tool_errors("resolve"):
            belief = await agents.current().resolve(belief_id, reason, outcome=outcome)
        return result(as_json(belief))

    async def relate(
        source: BeliefId,
        target: BeliefId,
        type: EdgeType,
        confidence: Annotated[
            float, Field(ge=0.0, le=1.0, description="how sure the link is")
        ] = 0.8,
    ) -> CallToolResult:
        """Link two beliefs with a typed edge (supports, contradicts, depends on...)
        with its own confidence; returns the edge id and its op sequence. The id
        comes from the type and ends: relating them again re-states that edge."""
        with tool_errors("relate"):
            world = agents.current()
            edge_id = world.edge_id(source, target, type=type)
            seq = await world.relate(
                source, target, type=type, confidence=confidence, id=edge_id
            )
        return result(
            {
                "edge_id": edge_id,
                "type": type,
                "source": source,
                "target": target,
                "confidence": confidence,
                "seq": seq,
            }
        )

    async def unrelate(
        edge_id: Annotated[str, Field(min_length=1, description="the edge's id")],
    ) -> CallToolResult:
        """Remove a belief edge (the id ``relate`` returned, or one ``trace``
        lists): the math stops reading it and ``trace`` leaves it out; it is kept,
        tombstoned (``removed``).
        Removing it again changes nothing; relating its ends again restores it.
        Only who may re-state it (its author, the operator, the world's admins)."""
        with tool_errors("unrelate"):
            edge = await agents.current().unrelate(edge_id)
        return result(as_json(edge))

    async def trust(
        source: Annotated[
            str,
            Field(
                min_length=1,
                description="the evidence source, agent:<name> for an agent's",
            ),
        ],
        value: Annotated[
            float, Field(ge=0.0, description="the weight: 1 as is, 0 ignores it")
        ],
        lock: Annotated[
            bool, Field(description="keep other agents from changing it")
        ] = False,
    ) -> CallToolResult:
        """Scale how much a source's evidence counts; returns once fusion applied
        it (a belief it moved reads with a ``version`` at or past the returned
        ``seq`` once the read replica has it, a moment later). Refused (``locked``)
        when another agent locked that source's trust."""
        with tool_errors("trust"):
            seq = await agents.current().trust(source, value, lock=lock)
        return result({"source": source, "trust": value, "locked": lock, "seq": seq})

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
        with tool_errors("write"):
            version = await agents.current().write(
                entity, field, value, expect_version=expect_version
            )
        return result({"entity": entity, "field": field, "version": version})

    async def inbox(
        ack: Annotated[
            bool, Field(description="acknowledge what is returned (else kept)")
        ] = False,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
        wait: Annotated[float, Field(ge=0.0, le=30.0)] = 0.5,
    ) -> CallToolResult:
        """Your durable inbox: work requests, field-change notifications and
        rejections, oldest first. Unacknowledged messages come back next time;
        ``ack`` removes what is returned from the inbox."""
        world = agents.current()
        with tool_errors("inbox"):
            items = await world.inbox(wait=wait, limit=limit)
            try:
                messages = [{"seq": i.seq, **as_json(i.message)} for i in items]
            finally:
                if ack:
                    await world.ack(items)
                else:
                    for item in items:
                        await item.release()
        return result({"messages": messages, "acked": ack})

    message = shape({"seq": _INT, "kind": _STR})
    return [
        tool(after, title="Report a turn's output", output=EXTRACTED, idempotent=True),
        tool(observe, title="Observe an artifact", output=EXTRACTED, idempotent=True),
        tool(add, title="Add a belief", output=BELIEF),
        tool(evidence, title="Add evidence to a belief", output=BELIEF),
        tool(
            retract,
            title="Retract a belief",
            output=BELIEF,
            destructive=True,
            idempotent=True,
        ),
        tool(
            resolve,
            title="Resolve an open question",
            output=BELIEF,
            destructive=True,
            idempotent=True,
        ),
        tool(
            relate,
            title="Link two beliefs",
            output=shape(
                {
                    "edge_id": _STR,
                    "type": _STR,
                    "source": _STR,
                    "target": _STR,
                    "confidence": {"type": "number"},
                    "seq": _INT,
                }
            ),
        ),
        tool(
            unrelate,
            title="Remove a belief edge",
            output=EDGE,
            destructive=True,
            idempotent=True,
        ),
        tool(
            trust,
            title="Set a source's trust",
            output=shape(
                {
                    "source": _STR,
                    "trust": {"type": "number"},
                    "locked": {"type": "boolean"},
                    "seq": _INT,
                }
            ),
            destructive=True,
            idempotent=True,
        ),
        tool(
            write,
            title="Write a crew field",
            output=shape({"entity": _STR, "field": _STR, "version": _INT}),
            destructive=True,
        ),
        tool(
            inbox,
            title="Read (and acknowledge) your inbox",
            output=shape(
                {
                    "messages": {"type": "array", "items": message},
                    "acked": {"type": "boolean"},
                }
            ),
        ),
    ]

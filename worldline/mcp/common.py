"""What every MCP tool module shares: who the caller is (:class:`Agents`), the SDK's
errors as MCP tool errors, and building results."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from worldline.actors.runtime.errors import ActorError
from worldline.sdk.errors import (
    BadRequest,
    NotApplied,
    Rejected,
    SimulationError,
    WorldlineError,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from worldline.sdk.client import World

__all__ = ["Agents", "as_json", "result", "tool_errors"]

log = logging.getLogger("worldline.mcp")


@dataclass(frozen=True)
class Agents:
    """The agents this server acts for, each on its own bus connection.

    Over stdio there is one, and every call is that agent's. Over HTTP there is one
    per token (``authenticated``): a call is the agent whose bearer token the
    request carried, and runs on that agent's connection (its own credentials).
    """

    world: str
    worlds: Mapping[str, World]
    authenticated: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.worlds)

    def caller(self) -> str:
        """The agent this request acts as.

        Raises:
            ToolError: over HTTP, a request with no (known) bearer token; the HTTP
                layer refuses those first, so this is a second lock.
        """
        if not self.authenticated:
            (only,) = self.worlds
            return only
        token = get_access_token()
        agent = token.client_id if token is not None else None
        if agent is None or agent not in self.worlds:
            raise ToolError("unauthenticated: send Authorization: Bearer <token>")
        return agent

    def current(self) -> World:
        """The caller's connection."""
        return self.worlds[self.caller()]


def as_json(value: Any) -> Any:
    return msgspec.to_builtins(value)


def result(data: dict[str, Any], *text: str) -> CallToolResult:
    """A tool result: ``text`` blocks for the model (default: the data as JSON), and
    the same data as structured content."""
    blocks = text or (msgspec.json.encode(data).decode(),)
    return CallToolResult(
        content=[TextContent(type="text", text=t) for t in blocks],
        structured_content=data,
    )


@contextmanager
def tool_errors(tool: str) -> Iterator[None]:
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

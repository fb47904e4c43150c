"""The simulator half of the SDK: bounded world-model sessions over the bus."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worldline.protocols.messages import (
    SimEnd,
    SimError,
    SimStart,
    SimStarted,
    SimStep,
    SimStepReply,
)
from worldline.sdk.errors import BadRequest, SimulationError
from worldline.sdk.paging import PagingMixin

if TYPE_CHECKING:
    from collections.abc import Sequence

    from worldline.protocols.messages import Message

__all__ = ["SimMixin"]


class SimMixin(PagingMixin):
    """Open a session, step it with candidate actions, end it."""

    async def _sim(self, verb: Any, request: Message) -> Message:
        reply = await self._request(verb, request)
        if isinstance(reply, SimError):
            raise SimulationError(reply.name, reply.message)
        return reply

    async def sim_start(
        self, task: str, *, context: str = "", exclude_lineages: Sequence[str] = ()
    ) -> SimStarted:
        """Open a session for ``task``; ``exclude_lineages`` stay out of retrieval."""
        request = SimStart(
            task=task, context=context, exclude_lineages=list(exclude_lineages)
        )
        reply = await self._sim("sim.start", request)
        if not isinstance(reply, SimStarted):
            raise BadRequest(f"unexpected reply to sim.start: {reply!r}")
        return reply

    async def sim_step(
        self, session_id: str, message: str | dict[str, Any]
    ) -> SimStepReply:
        """Send one assistant message (text, or an OpenAI-shaped dict); get the
        predicted user message and whether the episode ended.

        Raises:
            SimulationError: a named refusal (a limit, a tool call, an unknown or
                expired session, nothing to ground the prediction on).
        """
        if isinstance(message, str):
            message = {"role": "assistant", "content": message}
        reply = await self._sim(
            "sim.step", SimStep(session_id=session_id, message=message)
        )
        if not isinstance(reply, SimStepReply):
            raise BadRequest(f"unexpected reply to sim.step: {reply!r}")
        return reply

    async def sim_end(self, session_id: str) -> None:
        """Close the session; its transcript is dropped."""
        await self._sim("sim.end", SimEnd(session_id=session_id))

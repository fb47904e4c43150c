"""The simulator half of the SDK: bounded world-model sessions over the bus.

A step is an assistant message: text (the reply is the user's next message) or
OpenAI-style ``tool_calls`` (the reply holds one ``role: "tool"`` result per call,
keyed by ``tool_call_id``), so an agent loop can append ``reply.messages`` to its
history and go on as it would against real tools and users.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import nats.errors

from worldline.protocols.messages import (
    SimEnd,
    SimError,
    SimStart,
    SimStarted,
    SimStep,
    SimStepReply,
    encode,
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
        try:
            reply = await self._request(verb, request)
        except nats.errors.MaxPayloadError as exc:
            size = len(encode(request))
            limit = self._nc.max_payload
            raise BadRequest(
                f"the {verb} request is {size:,} bytes, over the bus's max_payload of "
                f"{limit:,} bytes: send less (a shorter message, context or task; "
                "sessions take at most 256 KiB of context and 64 KiB of task), or "
                "raise max_payload in the nats-server configuration"
            ) from exc
        if isinstance(reply, SimError):
            raise SimulationError(reply.name, reply.message)
        return reply

    async def sim_start(
        self, task: str, *, context: str = "", exclude_lineages: Sequence[str] = ()
    ) -> SimStarted:
        """Open a session for ``task``; ``exclude_lineages`` stay out of retrieval."""
        request = SimStart(
            task=task,
            context=context,
            exclude_lineages=list(exclude_lineages),
            agent=self.agent,
        )
        reply = await self._sim("sim.start", request)
        if not isinstance(reply, SimStarted):
            raise BadRequest(f"unexpected reply to sim.start: {reply!r}")
        return reply

    async def sim_step(
        self, session_id: str, message: str | dict[str, Any]
    ) -> SimStepReply:
        """Send one assistant message (text, or an OpenAI-shaped dict, with
        ``tool_calls`` or without); get what follows (``reply.messages``: the
        user's message, or one tool result per call keyed by ``tool_call_id``) and
        whether the episode ended.

        Raises:
            SimulationError: a named refusal (a limit, a malformed tool call, an
                unknown or expired session, nothing to ground the prediction on).
            BadRequest: the message is larger than the bus carries.
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

"""How the SDK weighs sources: ``trust`` (a declared weight, optionally locked),
``assess_sources`` (learn each source's reliability from the world's rival answers)
and ``sources`` (how fusion weighs each one). Mixed into
:class:`worldline.sdk.client.World` through :class:`~worldline.sdk.beliefs.BeliefMixin`.
"""

from __future__ import annotations

import anyio

from worldline.protocols.messages import (
    AssessSources,
    OpStatus,
    OpStatusReply,
    SetTrust,
    Sources,
    SourcesReply,
)
from worldline.sdk.backoff import Backoff
from worldline.sdk.crew import CrewMixin, new_id, utc_now, validated
from worldline.sdk.errors import BusUnavailable, NotApplied, Rejected, ServerError

__all__ = ["SourceMixin"]


class SourceMixin(CrewMixin):
    """Source verbs; the client supplies ``_request``, the crew mixin
    ``_publish_op``."""

    async def trust(self, source: str, value: float, *, lock: bool = False) -> int:
        """Scale ``source``'s contribution (``agent:<name>`` for an agent's) by
        ``value``; ``lock`` keeps others from changing it. Who may: the operator and
        the world's admins any source, an agent a ``[[trust.grants]]`` entry of the
        declaration names it for, and any agent its own ``agent:<self>``, lowering
        only (docs/crew.md, "Sources and trust"). Returns the op sequence
        once fusion applied it: the materializer then holds the posteriors it
        changed (fusion sends its verdict after them, and the materializer keeps
        both in order). A projector replica, which ``get``, ``list`` and
        ``before`` read, may be a moment behind: a belief it moved reads with a
        ``version`` at or past the returned sequence once the replica has it
        (docs/crew.md, "Read your own writes").

        One wait, on fusion's verdict through ``op_status``, polled with a backoff
        (20 ms up to 250 ms): a burst of calls in flight at once must not flood the
        materializer with status requests while fusion works through the burst.

        Raises:
            Rejected: fusion refused it (code ``locked``: another agent locked this
                source's trust; ``unauthorized``: this agent may not set it), with
                fusion's reason.
            NotApplied: recorded, but fusion did not answer within the timeout.
        """
        op = SetTrust(
            op_id=new_id("op"),
            author=self.agent,
            at=utc_now(),
            source=source,
            trust=value,
            lock=lock,
        )
        seq = await self._publish_op(validated(op))
        return await self._fusion_verdict(op.op_id, seq, "trust setting")

    async def assess_sources(self) -> int:
        """Learn how reliable each source is from how its answers to the world's
        rival-answer slots agree with the others' (and which sources copy which),
        and weigh their evidence by it. Returns the op sequence once fusion applied
        it (the materializer then holds the posteriors it moved; a projector
        replica may be a moment behind, as for :meth:`trust`); see :meth:`sources`.

        Raises:
            NotApplied: recorded, but fusion did not answer within the timeout.
        """
        op = AssessSources(op_id=new_id("op"), author=self.agent, at=utc_now())
        seq = await self._publish_op(validated(op))
        return await self._fusion_verdict(op.op_id, seq, "source assessment")

    async def sources(self, source: str = "", *, limit: int = 100) -> SourcesReply:
        """How fusion weighs each source: declared trust, learned accuracy and
        independence, and the resulting weight (least weighed first)."""
        reply = await self._request("sources", Sources(source=source, limit=limit))
        if not isinstance(reply, SourcesReply):
            raise ServerError(f"unexpected reply to sources: {type(reply).__name__}")
        return reply

    async def _fusion_verdict(self, op_id: str, seq: int, what: str) -> int:
        """Wait for fusion's verdict on the op ``op_id`` recorded at ``seq``."""
        backoff = Backoff()
        with anyio.move_on_after(self.timeout):
            while True:  # fusion answers every such op: applied or refused
                try:
                    reply = await self._request("op_status", OpStatus(seq=seq))
                except BusUnavailable:  # a materializer takeover: not yet
                    reply = None
                if isinstance(reply, OpStatusReply):
                    if reply.rejection is not None:
                        r = reply.rejection
                        raise Rejected(f"{r.code}: {r.reason}", code=r.code)
                    verdict = reply.verdict
                    if verdict is not None and verdict.op_id == op_id:
                        if verdict.outcome == "rejected":
                            raise Rejected(
                                f"{verdict.code}: {verdict.reason}",
                                code=verdict.code or "rejected",
                            )
                        if reply.state != "pending":
                            self._fence = max(self._fence, reply.fence)
                            return seq
                await backoff.pause()
        raise NotApplied(
            f"{what} {op_id} is recorded (seq {seq}) but fusion did not "
            f"answer it within {self.timeout:g}s; is fusion running (`worldline "
            "status`)?"
        )

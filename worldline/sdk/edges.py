"""Belief edges in the SDK: ``relate`` links two beliefs, ``unrelate`` removes the
link, ``edge_id`` names it. An edge's id is derived from its content (type and ends,
:func:`worldline.actors.belief_model.text.edge_id`) unless one is named, so relating
the same two beliefs the same way again re-states that edge instead of adding a second
one that would compound (docs/belief-math.md, "Edges"). Evidence about an edge and
its trace live with the belief verbs (:mod:`worldline.sdk.beliefs`). Mixed into
:class:`worldline.sdk.client.World` through :class:`~worldline.sdk.beliefs.BeliefMixin`.
"""

from __future__ import annotations

import anyio

from worldline.actors.belief_model import text
from worldline.protocols.beliefs import BeliefEdge, EdgeType
from worldline.protocols.messages import (
    LinkBeliefs,
    ReadWorld,
    TraceBelief,
    TraceReply,
)
from worldline.sdk.crew import CrewMixin, new_id, utc_now
from worldline.sdk.errors import BadRequest, NotApplied

__all__ = ["EdgeMixin"]


class EdgeMixin(CrewMixin):
    """Edge verbs, on top of the crew verbs (``_submit``); the client supplies
    ``_request``."""

    def edge_id(self, source: str, target: str, *, type: EdgeType) -> str:
        """The id :meth:`relate` gives the ``type`` edge from ``source`` to
        ``target`` when none is named: the same on every call, for every agent."""
        return text.edge_id(self.world, type, source, target)

    async def relate(
        self,
        source: str,
        target: str,
        *,
        type: EdgeType,
        confidence: float = 0.8,
        id: str | None = None,
    ) -> int:
        """Add a typed edge between two beliefs with its own confidence; return the
        op sequence once the materializer applied it.

        The edge is :meth:`edge_id` unless ``id`` names it, so a repeat re-states
        the same edge (its stated confidence: the last write wins) and never adds a
        second. Re-stating an edge is for whoever linked it first, the operator, the
        admins and ``[trust] close``; another agent who agrees adds evidence instead
        (:meth:`edge_evidence`). A removed edge related again is restored.

        Raises:
            Rejected: ``unauthorized`` (the edge is another agent's), or
                ``unknown_entity`` (an end is no belief of this world).
        """
        edge = BeliefEdge(
            id=id or self.edge_id(source, target, type=type),
            type=type,
            source=source,
            target=target,
            confidence=confidence,
        )
        op = LinkBeliefs(op_id=new_id("op"), author=self.agent, at=utc_now(), edge=edge)
        return await self._submit(op)

    async def unrelate(self, edge_id: str) -> BeliefEdge:
        """Remove the belief edge ``edge_id``: the math stops reading it (a
        ``depends_on`` edge no longer weighs on its source), and it stays, tombstoned,
        so ``trace_edge`` still shows it. Returns the edge as it now reads
        (``removed``). Removing a removed edge changes nothing; relating it again
        restores it. Who may: as for re-stating it (:meth:`relate`).

        Raises:
            BadRequest: no belief edge ``edge_id`` in this world.
            Rejected: ``unauthorized``: the edge is another agent's.
            NotApplied: recorded, but not readable within the timeout.
        """
        held = await self._edge(edge_id)
        if held is None and self._fence:  # linked just now? let a replica catch up
            await self._read_at_fence("read", ReadWorld(beliefs=False))
            held = await self._edge(edge_id)
        if held is None:
            raise BadRequest(
                f"no belief edge {edge_id!r} in world {self.world!r} to remove; "
                "`worldline trace BELIEF` lists the edges of a belief with their ids"
            )
        if held.removed:
            return held
        stated = held.confidence if held.stated is None else held.stated
        edge = BeliefEdge(
            id=held.id,
            type=held.type,
            source=held.source,
            target=held.target,
            confidence=stated,
            removed=True,
        )
        op = LinkBeliefs(op_id=new_id("op"), author=self.agent, at=utc_now(), edge=edge)
        seq = await self._submit(op)
        with anyio.move_on_after(self.timeout):
            while True:
                now = await self._edge(edge_id)
                if now is not None and now.version >= seq:
                    return now
                await anyio.sleep(0.02)
        raise NotApplied(
            f"op {op.op_id} removed edge {edge_id} (seq {seq}) but no projector "
            f"showed it within {self.timeout:g}s; are the actors running?"
        )

    async def _edge(self, edge_id: str) -> BeliefEdge | None:
        """The belief edge ``edge_id`` as the projector holds it (removed ones
        too), or None."""
        reply = await self._request("trace", TraceBelief(belief_id=edge_id))
        if not isinstance(reply, TraceReply) or reply.belief is not None:
            return None
        return next((e for e in reply.edges if e.id == edge_id), None)

"""The belief half of the SDK: add, evidence, observe/after, get/read/trace,
retract/resolve, edge evidence; relate/unrelate in :mod:`worldline.sdk.edges`; trust
and sources in :mod:`worldline.sdk.sources`; ``list`` and ``search`` page in
:mod:`worldline.sdk.paging`. Mixed into :class:`worldline.sdk.client.World`."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio

from worldline.actors.belief_model.text import answer_id
from worldline.protocols.beliefs import (
    BeliefEdge,
    Direction,
    EvidenceKind,
)
from worldline.protocols.messages import (
    AddBelief,
    AddEdgeEvidence,
    AddEvidence,
    Before,
    Belief,
    BeliefReply,
    BeliefType,
    CloseBelief,
    GetBelief,
    Message,
    Observe,
    OpStatus,
    OpStatusReply,
    OpVerdict,
    ReadWorld,
    TraceBelief,
    TraceReply,
    WorldReply,
    WorldviewReply,
)
from worldline.protocols.subjects import obs
from worldline.sdk.crew import evidence_item, new_id, utc_now, validated
from worldline.sdk.edges import EdgeMixin
from worldline.sdk.errors import BadRequest, BusUnavailable, NotApplied, Rejected
from worldline.sdk.labels import checked_label
from worldline.sdk.sources import SourceMixin

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from datetime import datetime

    from worldline.protocols.beliefs import (
        BeliefEdge,
        Direction,
        EvidenceKind,
    )
    from worldline.protocols.worldview import Worldview

__all__ = ["BeliefMixin", "observation_id"]

T = TypeVar("T")


class BeliefMixin(SourceMixin, EdgeMixin):
    """Belief verbs, on top of the crew verbs (``_submit``, ``_publish_op``); the
    client supplies ``_request`` and ``_publish``."""

    async def _publish(self, subject: str, message: Message, msg_id: str) -> None:
        raise NotImplementedError

    async def _verdict(self, seq: int, op_id: str) -> OpVerdict | None:
        """Fusion's verdict on the op ``op_id`` at OPS sequence ``seq``, once the
        materializer holds one. A materializer that does not answer (a takeover)
        only means: not yet."""
        try:
            reply = await self._request("op_status", OpStatus(seq=seq))
        except BusUnavailable:
            return None
        if not isinstance(reply, OpStatusReply) or reply.verdict is None:
            return None
        # Only a verdict on this very op counts (the id is random: unguessable).
        return reply.verdict if reply.verdict.op_id == op_id else None

    # --- writes through fusion -----------------------------------------------------

    async def _through_fusion(self, op: Any, belief_id: str) -> Belief:
        """Record ``op``; return the belief once fusion's posterior for it (or a
        later one) is readable, or as it reads when fusion found the op changes
        nothing (a repeat), or raise the reason fusion refused it.

        Fusion's verdict on an op that made no posterior reaches the client through
        the materializer's ``op_status`` (never through the dead-letter queue, which
        is the operator's)."""
        seq = await self._publish_op(validated(op))
        return await self._until_read(
            seq,
            op.op_id,
            lambda: self.get(belief_id),
            lambda belief: belief.version,
            f"belief {belief_id}",
        )

    async def _until_read(
        self,
        seq: int,
        op_id: str,
        read: Callable[[], Awaitable[T | None]],
        version: Callable[[T], int],
        what: str,
    ) -> T:
        """Poll ``read`` until what it reads reflects the op at ``seq`` (its
        ``version`` reached it), fusion found the op changes nothing (a repeat: as it
        reads), or fusion refused it (raised)."""
        with anyio.move_on_after(self.timeout):
            while True:
                held = await read()
                if held is not None and version(held) >= seq:
                    return held
                verdict = await self._verdict(seq, op_id)
                if verdict is not None and verdict.outcome == "rejected":
                    raise Rejected(
                        f"{verdict.code}: {verdict.reason}",
                        code=verdict.code or "rejected",
                    )
                if verdict is not None and held is not None:
                    return held  # unchanged: already applied, as it reads
                await anyio.sleep(0.02)
        raise NotApplied(
            f"op {op_id} is recorded (seq {seq}) but {what} did not "
            f"reflect it within {self.timeout:g}s; are the actors running?"
        )

    async def add(
        self,
        text: str,
        *,
        confidence: float | None = None,
        type: BeliefType = "claim",
        id: str | None = None,
        slot: str | None = None,
        label: str | None = None,
    ) -> Belief:
        """Seed a belief (a stated confidence is a weak prior) and return it applied.

        ``slot`` names the question it answers when it is one of several rival
        answers (``"author-of:isbn-0131103628"``): the answers of one slot are
        exclusive, so evidence for one counts against the others, and the same text
        in two slots is two beliefs. Adding the same statement again (same words, same
        slot) records it as the author's ``user-assertion`` evidence for it. ``label``
        (``"load-bearing"``) is set by hand, once; ``list`` filters by it.

        Raises:
            BadRequest: empty text, confidence outside 0-1, a confidence on a
                goal or gap, or a malformed label.
            Rejected: the world refused it (for example, the world already holds
                this statement with another label).
            NotApplied: recorded, but no actor applied it within the timeout.
        """
        if type in ("goal", "gap") and confidence is not None:
            raise BadRequest(f"a {type} carries no probability; drop the confidence")
        op = AddBelief(
            op_id=new_id("op"),
            author=self.agent,
            at=utc_now(),
            # By default the id is the normalized text's, so the extractor's later
            # restatements of it become evidence for this belief, not duplicates.
            belief_id=id or answer_id(self.world, slot, text),
            text=text,
            type=type,
            confidence=confidence,
            slot=slot,
            label=checked_label(label),
        )
        return await self._through_fusion(op, op.belief_id)

    async def evidence(
        self,
        belief_id: str,
        *,
        direction: Direction,
        kind: EvidenceKind,
        source: str,
        text: str = "",
        artifact: str = "",
        observed_at: datetime | None = None,
        id: str | None = None,
    ) -> Belief:
        """Attach one piece of evidence; return the belief as it now reads.

        Raises:
            BadRequest: an unknown direction or kind, or a malformed field.
            Rejected: no such belief, or the belief is retracted.
        """
        at = utc_now()
        item = evidence_item(
            belief_id,
            direction,
            kind,
            source,
            self.agent,
            at,
            text=text,
            artifact=artifact,
            observed_at=observed_at,
            id=id,
        )
        op = AddEvidence(op_id=new_id("op"), author=self.agent, at=at, evidence=item)
        return await self._through_fusion(op, belief_id)

    async def retract(self, belief_id: str, reason: str = "") -> Belief:
        """Tombstone a belief: it stops counting but stays readable and traceable.

        Raises:
            Rejected: no such belief (``unknown_belief``), a gap (``invalid``: it
                is resolved), or ``unauthorized``: only the belief's author (for
                an extracted one, the agent that observed it), the operator, the
                world's admins and the agents of its ``[trust] close`` may.
        """
        return await self._close(belief_id, "retracted", reason)

    async def resolve(
        self, belief_id: str, reason: str = "", *, outcome: bool | None = None
    ) -> Belief:
        """Mark a gap resolved (answered), or a claim, assumption, risk or evidence
        resolved ``outcome`` True or False: its confidence just before joins the
        world's calibration record (:meth:`calibration`).

        Raises:
            Rejected: no such belief; ``invalid``: a gap with an outcome, a claim
                without one, or a goal; ``unauthorized``: a gap's author, the
                operator, the admins, ``[trust] close`` and every agent the
                declaration names may resolve a gap; a claim, as for ``retract``.
        """
        return await self._close(belief_id, "resolved", reason, outcome)

    async def _close(
        self,
        belief_id: str,
        how: Literal["retracted", "resolved"],
        reason: str,
        outcome: bool | None = None,
    ) -> Belief:
        op = CloseBelief(
            op_id=new_id("op"),
            author=self.agent,
            at=utc_now(),
            belief_id=belief_id,
            how=how,
            reason=reason,
            outcome=outcome,
        )
        return await self._through_fusion(op, belief_id)

    async def edge_evidence(
        self,
        edge_id: str,
        *,
        direction: Direction,
        kind: EvidenceKind,
        source: str,
        text: str = "",
        artifact: str = "",
        observed_at: datetime | None = None,
        id: str | None = None,
    ) -> BeliefEdge:
        """Attach one piece of evidence to a belief edge ("A depends on B" can be
        cited, measured and refuted: ``supports`` says the relation holds,
        ``refutes`` that it does not); return the edge as it now reads, its
        ``confidence`` the posterior and ``stated`` the strength stated
        (docs/belief-math.md, "Edges").

        Raises:
            BadRequest: an unknown direction or kind, or a malformed field.
            Rejected: no such edge (link the beliefs first), or it is removed.
            NotApplied: recorded, but no actor applied it within the timeout.
        """
        at = utc_now()
        item = evidence_item(
            edge_id,
            direction,
            kind,
            source,
            self.agent,
            at,
            text=text,
            artifact=artifact,
            observed_at=observed_at,
            id=id,
        )
        op = AddEdgeEvidence(
            op_id=new_id("op"), author=self.agent, at=at, edge_id=edge_id, evidence=item
        )
        seq = await self._publish_op(validated(op))
        return await self._until_read(
            seq,
            op.op_id,
            lambda: self._edge(edge_id),
            lambda edge: edge.posterior_seq,
            f"edge {edge_id}",
        )

    async def trace_edge(
        self, edge_id: str, *, as_of: datetime | None = None
    ) -> TraceReply:
        """A belief edge's provenance: the edge (its posterior, the strength stated)
        and each evidence item with how the edge's confidence moved (with ``as_of``:
        the evidence recorded by then; nothing for an edge last written after).

        Raises:
            BadRequest: no belief edge with that id in this world (as of ``as_of``).
        """
        request = TraceBelief(belief_id=edge_id, as_of=as_of)
        reply = await self._request("trace", request)
        if not isinstance(reply, TraceReply):
            raise BadRequest(f"unexpected reply to trace: {reply!r}")
        if reply.belief is not None or not any(e.id == edge_id for e in reply.edges):
            raise BadRequest(f"no belief edge {edge_id!r} in world {self.world!r}")
        return reply

    # --- observations ---------------------------------------------------------------

    async def observe(
        self,
        text: str,
        *,
        source: str = "",
        role: Literal["artifact", "output", "tool"] = "artifact",
        media_type: Literal["text", "markdown", "json"] | None = None,
        context: str = "",
        observed_at: datetime | None = None,
    ) -> str:
        """Hand an artifact to the extractor; return the observation id.

        ``context`` is what came just before the artifact (the previous turn of a
        conversation, say): retrieval reads it beside the statements (a reply is
        found through the turn it answers), and it adds no statement itself.
        ``observed_at`` is when the artifact says it happened (a conversation's
        session date): its statements are observed then (a time without a zone is
        UTC; a time after now is now), and a worldview for a question that asks
        when shows that date beside them.

        The id is derived from the world and the content (:func:`observation_id`):
        observing the same artifact twice in one world changes nothing (the repeat's
        statements get the same op ids), in two worlds reaches both. The Msg-Id is
        random: one computed from the artifact let another agent, publishing it
        first, have this dropped as a stream-wide duplicate (issue 23, F11).
        """
        kind = media_type or _sniff(text)
        observation = validated(
            Observe(
                obs_id=observation_id(
                    self.world,
                    self.agent,
                    source,
                    role,
                    kind,
                    text,
                    context,
                    observed_at,
                ),
                author=self.agent,
                at=utc_now(),
                source=source,
                text=text,
                role=role,
                media_type=kind,
                context=context,
                observed_at=observed_at,
            )
        )
        await self._publish(obs(self.world, self.agent), observation, new_id("obs"))
        return observation.obs_id

    async def after(self, output: str) -> str:
        """Hand this agent's turn output to the extractor (claims it made, hedges,
        risks and open questions become beliefs and evidence)."""
        return await self.observe(output, source=f"agent:{self.agent}", role="output")

    # --- reads ----------------------------------------------------------------------

    async def get(
        self,
        belief_id: str,
        *,
        at: datetime | None = None,
        as_of: datetime | None = None,
    ) -> Belief | None:
        """One belief by id, read at valid time ``at`` (default: the world's one
        read clock, its newest belief change) as the world had been told by
        recorded time ``as_of`` (default: everything recorded); None when it did
        not exist by either (docs/belief-math.md, "Two time axes")."""
        request = GetBelief(belief_id=belief_id, at=at, as_of=as_of)
        reply = await self._request("get", request)
        if not isinstance(reply, BeliefReply):
            raise BadRequest(f"unexpected reply to get: {reply!r}")
        return reply.belief

    async def read(
        self, *, at: datetime | None = None, as_of: datetime | None = None
    ) -> WorldReply:
        """The whole world model: beliefs, edges, gaps, goals, contradictions, and the
        crew world (declaration, entities, typed edges), read a page at a time, at
        valid time ``at`` and recorded time ``as_of`` (as :meth:`get`)."""
        return await self._read_pages(ReadWorld(at=at, as_of=as_of), fenced=False)

    async def before(
        self, query: str, *, at: datetime | None = None, as_of: datetime | None = None
    ) -> Worldview:
        """The worldview for the move ``query``: six bounded, traced slices and the
        prompt rendered from them. The clock is this call's (or ``at``), passed to
        the projector, so the same state, query and clock give the same bytes. With
        ``as_of`` (recorded time), each belief as the world had been told by then
        (ranked from today's index; none created after)."""
        request = Before(agent=self.agent, query=query, at=at or utc_now(), as_of=as_of)
        reply = await self._request("before", request)
        if not isinstance(reply, WorldviewReply):
            raise BadRequest(f"unexpected reply to before: {reply!r}")
        return reply.view


def observation_id(
    world: str,
    agent: str,
    source: str,
    role: str,
    media_type: str,
    text: str,
    context: str = "",
    observed_at: datetime | None = None,
) -> str:
    """The idempotency id of an observation, with the agent the seed of its
    statements' op ids; not its ``Nats-Msg-Id``, since anyone can compute it. The
    world is part of it: the same artifact observed into two worlds is two
    observations (``tests/runtime/test_world_scoped_ids.py``).
    """
    parts: tuple[str, ...] = (world, agent, source, role, media_type, text)
    # The same text after another turn, or on another day, is another
    # observation; without a context or a date the id is what it always was.
    if context or observed_at is not None:
        parts = (*parts, context)
    if observed_at is not None:
        parts = (*parts, observed_at.isoformat())
    material = "\0".join(parts)
    return f"obs-{hashlib.sha256(material.encode()).hexdigest()[:24]}"


def _sniff(text: str) -> Literal["text", "markdown", "json"]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return "json"
    if any(line.lstrip().startswith(("#", "- ", "* ")) for line in text.splitlines()):
        return "markdown"
    return "text"

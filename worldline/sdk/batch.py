"""Batch writes in the SDK: ``load`` records many ``add`` and ``evidence`` ops at once
and waits once for all of them (issue 18: one call at a time, loading needed 32 calls
in flight to reach 500 ops/s).

Every op of a chunk is published pipelined (JetStream publishes in flight together,
each with its ``Nats-Msg-Id``, written to the connection in input order so the log
holds them in that order); then one wait covers the chunk: fusion works through the
log in order, so once the chunk's last op has its outcome every earlier one has too,
and each is then read once (fusion's verdict through ``op_status``, else the belief
at or past the op's sequence). One refused item does not fail the others: each gets
its own :class:`Loaded`, in input order. Mixed into :class:`worldline.sdk.client.World`.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING, Literal

import anyio
import msgspec
import nats.js.errors
from nats.js import api

from worldline.actors.belief_model.text import answer_id
from worldline.protocols.beliefs import Direction, EvidenceKind
from worldline.protocols.messages import (
    AddBelief,
    AddEvidence,
    Belief,
    BeliefType,
    OpStatus,
    OpStatusReply,
    encode,
)
from worldline.protocols.subjects import ops
from worldline.sdk.backoff import Backoff
from worldline.sdk.beliefs import BeliefMixin
from worldline.sdk.crew import evidence_item, new_id, utc_now, validated
from worldline.sdk.errors import BadRequest, BusUnavailable, bus_errors

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "CHUNK",
    "AddItem",
    "EvidenceItem",
    "LoadMixin",
    "Loaded",
    "Outcome",
    "build_op",
]

CHUNK = 500  # ops one chunk publishes before it waits
_READS = 64  # status reads in flight at once while a chunk is resolved

Outcome = Literal["applied", "unchanged", "rejected", "not_applied"]


class AddItem(msgspec.Struct, frozen=True, kw_only=True):
    """One belief to seed: the arguments of :meth:`BeliefMixin.add`."""

    text: str
    confidence: float | None = None
    type: BeliefType = "claim"
    id: str | None = None
    slot: str | None = None  # the question it answers, among rival answers


class EvidenceItem(msgspec.Struct, frozen=True, kw_only=True):
    """One piece of evidence: the arguments of :meth:`BeliefMixin.evidence`."""

    belief_id: str
    direction: Direction
    kind: EvidenceKind
    source: str
    text: str = ""
    artifact: str = ""
    observed_at: datetime | None = None
    id: str | None = None


class Loaded(msgspec.Struct, frozen=True, kw_only=True):
    """What became of one item: ``applied`` (``belief`` as it now reads),
    ``unchanged`` (a repeat: already applied), ``rejected`` (fusion's ``code`` and
    ``reason``), or ``not_applied`` (recorded, not answered within the timeout)."""

    index: int  # the item's position in the input
    op_id: str
    seq: int  # its OPS sequence
    belief_id: str
    outcome: Outcome
    belief: Belief | None = None
    code: str = ""
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in ("applied", "unchanged")


class LoadMixin(BeliefMixin):
    """``load``: many adds and evidence items, one wait."""

    def _load_op(
        self, item: AddItem | EvidenceItem, at: datetime
    ) -> AddBelief | AddEvidence:
        return build_op(item, world=self.world, agent=self.agent, at=at)

    async def load(
        self,
        items: Sequence[AddItem | EvidenceItem],
        *,
        chunk: int = CHUNK,
        at: datetime | None = None,
    ) -> list[Loaded]:
        """Record every item (an :class:`AddItem` or an :class:`EvidenceItem`) and
        return one :class:`Loaded` per item, in input order, once fusion has answered
        them all. Items go ``chunk`` at a time: a chunk's ops are published together
        (in order: evidence may name a belief added earlier in the same call), then
        one wait, bounded by the timeout, covers the chunk. The whole call is one
        instant, ``at`` (default: now): every op carries it, and so does every
        evidence item that states no ``observed_at``.

        Raises:
            BadRequest: an item is malformed (the message names its index); nothing
                is published then.
            BusUnavailable: JetStream refused or did not confirm the writes.
        """
        if chunk < 1:
            raise BadRequest(f"chunk {chunk} holds nothing; pass 1 or more")
        built: list[AddBelief | AddEvidence] = []
        # One load is one instant (``at``, default now): every op, and every item
        # observed at no stated time, carries it, so decay never tells apart items
        # loaded together (pass one ``at`` to calls that load one set in parts).
        at = at or utc_now()
        for index, item in enumerate(items):
            try:
                built.append(self._load_op(item, at))
            except BadRequest as exc:
                raise BadRequest(f"item {index}: {exc}") from exc
        results: list[Loaded] = []
        # The next chunk is published before the previous one is waited for: fusion
        # works on one while the other is read back (two chunks in flight at most).
        previous: tuple[list[AddBelief | AddEvidence], list[int], int] | None = None
        for start in range(0, len(built), chunk):
            part = built[start : start + chunk]
            seqs = await self._publish_many(part)
            if previous is not None:
                results += await self._resolve(*previous)
            previous = (part, seqs, start)
        if previous is not None:
            results += await self._resolve(*previous)
        return results

    async def _publish_many(self, part: Sequence[AddBelief | AddEvidence]) -> list[int]:
        """Publish every op without waiting in between; return their sequences."""
        subject = ops(self.world, self.agent)
        await self._check_world()
        with (
            self._permitted(subject),
            bus_errors(self._url, f"publishing to {subject}"),
        ):
            try:
                # One after another: each is on the wire before the next starts.
                pending: list[asyncio.Future[api.PubAck]] = [
                    await self._js.publish_async(
                        subject,
                        encode(op),
                        wait_stall=self.timeout,
                        headers={api.Header.MSG_ID: op.op_id},
                    )
                    for op in part
                ]
                async with asyncio.timeout(self.timeout):
                    acks = await asyncio.gather(*pending)
            except (TimeoutError, nats.js.errors.TooManyStalledMsgsError) as exc:
                raise BusUnavailable(
                    f"JetStream at {self._url} did not confirm {len(part)} writes on "
                    f"{subject} within {self.timeout:g}s; check `worldline status` "
                    "and retry (ops are de-duplicated by op id only: load again "
                    "what did not come back applied)"
                ) from exc
        return [int(ack.seq) for ack in acks]

    async def _resolve(
        self, part: Sequence[AddBelief | AddEvidence], seqs: Sequence[int], start: int
    ) -> list[Loaded]:
        found: dict[int, Loaded] = {}
        order = sorted(range(len(part)), key=lambda i: seqs[i])
        backoff = Backoff()
        limit = anyio.Semaphore(_READS)
        failed: list[Exception] = []

        async def read(i: int) -> None:
            try:
                async with limit:
                    outcome = await self._outcome(part, seqs, i, start)
            except Exception as exc:  # raised below, not as a group
                failed.append(exc)
                return
            if outcome is not None:
                found[i] = outcome

        with anyio.move_on_after(self.timeout):
            # A fusion answers the log in order: wait on the chunk's last op alone,
            # then read every item; any still open (a sharded fusion) is read again.
            while order and await self._outcome(part, seqs, order[-1], start) is None:
                await backoff.pause()
            backoff.reset()
            while len(found) < len(part):
                waiting = [i for i in range(len(part)) if i not in found]
                async with anyio.create_task_group() as group:
                    for i in waiting:
                        group.start_soon(read, i)
                if failed:
                    raise failed[0]
                if len(found) < len(part):
                    await backoff.pause()
        return [
            found.get(i)
            or Loaded(
                index=start + i,
                op_id=op.op_id,
                seq=seqs[i],
                belief_id=_named(op),
                outcome="not_applied",
                reason=f"recorded (seq {seqs[i]}) but not answered within "
                f"{self.timeout:g}s; are the actors running (`worldline status`)?",
            )
            for i, op in enumerate(part)
        ]

    async def _read_back(self, belief_id: str) -> Belief | None:
        """The belief as a projector reads it; None while no projector answers (a
        takeover, or no actors: the wait then ends in ``not_applied``)."""
        try:
            return await self.get(belief_id)
        except BusUnavailable:
            return None

    async def _outcome(
        self,
        part: Sequence[AddBelief | AddEvidence],
        seqs: Sequence[int],
        i: int,
        start: int,
    ) -> Loaded | None:
        """Item ``i``'s outcome, or None while fusion has not reached it."""
        op, seq = part[i], seqs[i]
        named = _named(op)
        try:
            reply = await self._request("op_status", OpStatus(seq=seq))
        except BusUnavailable:  # a materializer takeover: not yet
            return None

        def result(
            outcome: Outcome,
            belief: Belief | None = None,
            code: str = "",
            why: str = "",
        ) -> Loaded:
            return Loaded(
                index=start + i,
                op_id=op.op_id,
                seq=seq,
                belief_id=named,
                outcome=outcome,
                belief=belief,
                code=code,
                reason=why,
            )

        if isinstance(reply, OpStatusReply):
            if reply.state != "pending":
                self._fence = max(self._fence, reply.fence)
            if reply.rejection is not None:
                r = reply.rejection
                return result("rejected", code=r.code, why=r.reason)
            verdict = reply.verdict
            if verdict is not None and verdict.op_id == op.op_id:
                if verdict.outcome == "rejected":
                    code = verdict.code or "rejected"
                    return result("rejected", code=code, why=verdict.reason)
                belief = await self._read_back(named)
                return None if belief is None else result("unchanged", belief)
        belief = await self._read_back(named)
        if belief is not None and belief.version >= seq:
            return result("applied", belief)
        return None


def build_op(
    item: AddItem | EvidenceItem,
    *,
    world: str,
    agent: str,
    at: datetime | None = None,
) -> AddBelief | AddEvidence:
    """The op ``item`` becomes when ``agent`` loads it into ``world`` at ``at``
    (default: now).

    Raises:
        BadRequest: a malformed field, or a confidence on a goal or gap.
    """
    at = at or utc_now()
    if isinstance(item, AddItem):
        if item.type in ("goal", "gap") and item.confidence is not None:
            raise BadRequest(
                f"a {item.type} carries no probability; drop the confidence"
            )
        return validated(
            AddBelief(
                op_id=new_id("op"),
                author=agent,
                at=at,
                belief_id=item.id or answer_id(world, item.slot, item.text),
                text=item.text,
                type=item.type,
                confidence=item.confidence,
                slot=item.slot,
            )
        )
    evidence = evidence_item(
        item.belief_id,
        item.direction,
        item.kind,
        item.source,
        agent,
        at,
        text=item.text,
        artifact=item.artifact,
        observed_at=item.observed_at,
        id=item.id,
    )
    return validated(
        AddEvidence(op_id=new_id("op"), author=agent, at=at, evidence=evidence)
    )


def _named(op: AddBelief | AddEvidence) -> str:
    return op.belief_id if isinstance(op, AddBelief) else op.evidence.belief_id

"""The agent SDK: ``async with worldline.connect(url, world=, agent=) as world``.

Writes go to the OPS record on JetStream (acknowledged, de-duplicated by op id); reads
are request/reply to the projector queue group. ``add`` waits until the belief has gone
through fusion, the materializer and a projector, so what it returns is what every other
agent now reads.
"""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
import nats.errors
from nats.js import api

from actors.runtime.bus import connect as bus_connect
from protocols.messages import (
    FUSION_INBOX,
    MATERIALIZER_REPLY,
    PROJECTOR_REPLY,
    SIMULATOR_REPLY,
    AddBelief,
    Belief,
    BeliefListReply,
    BeliefReply,
    BeliefType,
    DeadLetter,
    GetBelief,
    ListBeliefs,
    Message,
    Observe,
    RpcError,
    encode,
)
from protocols.subjects import RpcVerb, check_name, dlq, obs, ops, rpc
from worldline.crew import CrewMixin, validated
from worldline.errors import BadRequest, BusUnavailable, NotApplied, Rejected

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from nats.aio.client import Client as NATS

__all__ = ["DEFAULT_URL", "World", "connect"]

DEFAULT_URL = "nats://127.0.0.1:4222"
_DEAD_LETTER = msgspec.msgpack.Decoder(DeadLetter)
_REPLIES: dict[str, Any] = {
    "op_status": MATERIALIZER_REPLY,
    "state_hash": MATERIALIZER_REPLY,
    "sim.status": SIMULATOR_REPLY,
}


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


class World(CrewMixin):
    """One agent's handle on one world. Build it with :func:`connect`."""

    def __init__(self, nc: NATS, *, world: str, agent: str, timeout: float) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self.world = world
        self.agent = agent
        self.timeout = timeout

    async def add(
        self,
        text: str,
        *,
        confidence: float | None = None,
        type: BeliefType = "claim",
        id: str | None = None,
    ) -> Belief:
        """Seed a belief (a given confidence is a weak prior) and return it once
        applied.

        Raises:
            BadRequest: empty text, confidence outside 0-1, or a confidence on a
            goal/gap. Rejected: the world refused the op (for example, the id is taken).
            NotApplied: the op is recorded but no actor applied it within the timeout.
            BusUnavailable: NATS went away.
        """
        if type in ("goal", "gap") and confidence is not None:
            raise BadRequest(f"a {type} carries no probability; drop the confidence")
        op = validated(
            AddBelief(
                op_id=_new_id("op"),
                author=self.agent,
                at=datetime.now(UTC),
                belief_id=id or _new_id("b"),
                text=text,
                type=type,
                confidence=confidence,
            )
        )
        rejections = await self._nc.subscribe(dlq(self.world, "fusion"))
        try:
            await self._publish(ops(self.world, self.agent), op, op.op_id)
            return await self._await_belief(op, rejections)
        finally:
            await rejections.unsubscribe()

    async def _await_belief(self, op: AddBelief, rejections: Any) -> Belief:
        with anyio.move_on_after(self.timeout):
            while True:
                belief = await self.get(op.belief_id)
                if belief is not None and belief.origin == op.op_id:
                    return belief
                # Absent, or created by another op: fusion will dead-letter ours.
                try:
                    msg = await rejections.next_msg(timeout=0.05)
                except nats.errors.TimeoutError:
                    continue
                letter = _DEAD_LETTER.decode(msg.data)
                try:
                    rejected = FUSION_INBOX.decode(letter.payload)
                except msgspec.MsgspecError:
                    continue
                if rejected.op_id == op.op_id:
                    raise Rejected(letter.reason)
        raise NotApplied(
            f"op {op.op_id} is recorded but belief {op.belief_id} was not applied "
            f"within {self.timeout:g}s; are the actors running (`worldline up`)?"
        )

    async def observe(self, text: str, *, source: str = "") -> str:
        """Hand an artifact to the extractor; return the observation id."""
        observation = validated(
            Observe(
                obs_id=_new_id("obs"),
                author=self.agent,
                at=datetime.now(UTC),
                source=source,
                text=text,
            )
        )
        await self._publish(
            obs(self.world, self.agent), observation, observation.obs_id
        )
        return observation.obs_id

    async def get(self, belief_id: str) -> Belief | None:
        """One belief by id, or None if the world holds none with that id."""
        reply = await self._request("get", GetBelief(belief_id=belief_id))
        if not isinstance(reply, BeliefReply):
            raise BadRequest(f"unexpected reply to get: {reply!r}")
        return reply.belief

    async def list(
        self, *, type: BeliefType | None = None, limit: int = 1000
    ) -> list[Belief]:
        """The active set, oldest first."""
        reply = await self._request("list", ListBeliefs(type=type, limit=limit))
        if not isinstance(reply, BeliefListReply):
            raise BadRequest(f"unexpected reply to list: {reply!r}")
        return list(reply.beliefs)

    async def _publish(self, subject: str, message: Message, msg_id: str) -> None:
        try:
            await self._js.publish(
                subject,
                encode(message),
                timeout=self.timeout,
                headers={api.Header.MSG_ID: msg_id},
            )
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as exc:
            raise BusUnavailable(
                f"JetStream did not accept the write on {subject} ({exc!r}); "
                "is this server running worldline (`worldline up`)?"
            ) from exc

    async def _request(self, verb: RpcVerb, message: Message) -> Message:
        subject = rpc(self.world, verb)
        try:
            msg = await self._nc.request(
                subject, encode(validated(message)), timeout=self.timeout
            )
        except nats.errors.NoRespondersError as exc:
            raise BusUnavailable(
                f"no projector answers {subject}; start the actors with `worldline up`"
            ) from exc
        except nats.errors.TimeoutError as exc:
            raise BusUnavailable(
                f"no answer on {subject} within {self.timeout:g}s"
            ) from exc
        decoder: Any = _REPLIES.get(verb, PROJECTOR_REPLY)
        reply: Message = decoder.decode(msg.data)
        if isinstance(reply, RpcError):
            raise BadRequest(reply.message)
        return reply


@asynccontextmanager
async def connect(
    url: str = DEFAULT_URL,
    *,
    world: str = "default",
    agent: str = "cli",
    request_timeout: float = 10.0,
) -> AsyncIterator[World]:
    """Connect to a worldline deployment as ``agent`` in ``world``.

    Raises:
        BadRequest: the world or agent name is not a valid subject token.
        BusUnavailable: NATS cannot be reached at ``url``.
    """
    try:
        check_name("world", world)
        check_name("agent", agent)
    except ValueError as exc:
        raise BadRequest(str(exc)) from exc
    nc = await bus_connect(url, name=f"worldline-sdk-{agent}")
    try:
        yield World(nc, world=world, agent=agent, timeout=request_timeout)
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await nc.close()

"""The agent SDK: ``async with worldline.connect(url, world=, agent=) as world``.

Writes go to the OPS record on JetStream (acknowledged, de-duplicated by op id); reads
are request/reply to the projector queue group. ``add`` waits until the belief has gone
through fusion, the materializer and a projector, so what it returns is what every other
agent now reads.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import nats.errors
from nats.js import api

from actors.runtime.auth import CredentialsError
from actors.runtime.bus import connect as bus_connect
from protocols.messages import (
    MATERIALIZER_REPLY,
    PROJECTOR_REPLY,
    SIMULATOR_REPLY,
    Message,
    RpcError,
    encode,
)
from protocols.subjects import RpcVerb, check_name, rpc
from worldline import hooks
from worldline.crew import validated
from worldline.errors import BadRequest, BusUnavailable
from worldline.sim import SimMixin

if TYPE_CHECKING:
    import os
    from collections.abc import AsyncIterator
    from contextlib import AbstractAsyncContextManager
    from datetime import datetime

    from nats.aio.client import Client as NATS

    from worldline.hooks import Turn

__all__ = ["DEFAULT_URL", "World", "connect"]

DEFAULT_URL = "nats://127.0.0.1:4222"
_REPLIES: dict[str, Any] = {
    "op_status": MATERIALIZER_REPLY,
    "state_hash": MATERIALIZER_REPLY,
    "sim.status": SIMULATOR_REPLY,
    "sim.start": SIMULATOR_REPLY,
    "sim.step": SIMULATOR_REPLY,
    "sim.end": SIMULATOR_REPLY,
}


class World(SimMixin):
    """One agent's handle on one world. Build it with :func:`connect`."""

    def __init__(self, nc: NATS, *, world: str, agent: str, timeout: float) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self.world = world
        self.agent = agent
        self.timeout = timeout

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

    def turn(
        self, query: str, *, at: datetime | None = None, wait: float | None = None
    ) -> AbstractAsyncContextManager[Turn]:
        """One turn of an agent loop: ``async with world.turn(query) as turn:``
        reads the worldview (``turn.worldview.prompt``); set ``turn.output`` and a
        clean exit reports it through ``after`` and waits until it is applied
        (``turn.extracted``). A turn that raises reports nothing. See
        :mod:`worldline.hooks`."""
        return hooks.turn(self, query, at=at, wait=wait)

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
    creds: str | os.PathLike[str] | None = None,
) -> AsyncIterator[World]:
    """Connect to a worldline deployment as ``agent`` in ``world``.

    ``creds`` is the agent's credentials file from ``worldline creds`` (default:
    ``$WORLDLINE_CREDS``, if set), for a server that requires them.

    Raises:
        BadRequest: the world or agent name is not a valid subject token, or the
            credentials file is missing or holds no user key.
        BusUnavailable: NATS cannot be reached at ``url``, or refused the credentials.
    """
    try:
        check_name("world", world)
        check_name("agent", agent)
    except ValueError as exc:
        raise BadRequest(str(exc)) from exc
    try:
        nc = await bus_connect(url, name=f"worldline-sdk-{agent}", creds=creds)
    except CredentialsError as exc:
        raise BadRequest(str(exc)) from exc
    try:
        yield World(nc, world=world, agent=agent, timeout=request_timeout)
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await nc.close()

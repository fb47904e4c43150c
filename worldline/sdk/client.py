"""The agent SDK: ``async with worldline.connect(world=, agent=) as world``.

``connect`` finds the bus as the CLI does (:func:`worldline.sdk.discovery.bus_url`):
the URL passed, else ``$WORLDLINE_NATS``, else the URL a local ``worldline up``
recorded in its data folder, else ``nats://127.0.0.1:4222``.

Writes go to the OPS record on JetStream (acknowledged, de-duplicated by op id); reads
are request/reply to the projector queue group. ``add`` waits until the belief has gone
through fusion, the materializer and a projector, so what it returns is what every other
agent now reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

import anyio
import nats.errors
import nats.js.errors
from nats.js import api

from worldline.protocols.errors import BusUnavailable as RuntimeBusUnavailable
from worldline.protocols.messages import (
    FUSION_REPLY,
    MATERIALIZER_REPLY,
    PROJECTOR_REPLY,
    SIMULATOR_REPLY,
    Message,
    RpcError,
    encode,
)
from worldline.protocols.subjects import OPS, PRESENCE, RpcVerb, check_name, rpc
from worldline.protocols.world import agents_named
from worldline.sdk.batch import LoadMixin
from worldline.sdk.crew import validated
from worldline.sdk.discovery import DEFAULT_URL, bus_url, default_agent
from worldline.sdk.errors import (
    BadRequest,
    BusUnavailable,
    PermissionDenied,
    ServerError,
    bus_errors,
)
from worldline.sdk.judgment import JudgmentMixin
from worldline.sdk.sim import SimMixin
from worldline.sdk.undecodable import decode_presence, decode_reply
from worldline.sdk.worlds import check_world, require_declared_default

if TYPE_CHECKING:
    import os
    from collections.abc import AsyncIterator, Callable, Iterator
    from contextlib import AbstractAsyncContextManager
    from datetime import datetime

    from nats.aio.client import Client as NATS

    from worldline.protocols.kv import Presence
    from worldline.sdk.export import ExportRecord, RawRecord
    from worldline.sdk.turns import Turn

__all__ = ["DEFAULT_URL", "World", "connect"]

_REPLIES: dict[str, Any] = {
    "op_status": MATERIALIZER_REPLY,
    "state_hash": MATERIALIZER_REPLY,
    "sim.status": SIMULATOR_REPLY,
    "sim.start": SIMULATOR_REPLY,
    "sim.step": SIMULATOR_REPLY,
    "sim.end": SIMULATOR_REPLY,
    "sim.forecast": SIMULATOR_REPLY,
    "sources": FUSION_REPLY,
}


# nats-py hands the server's -ERR to the error callback as "nats: permissions
# violation for publish to "<subject>"" (or "subscription to").
_VIOLATION = re.compile(
    r"permissions violation for (publish|subscription) to \"([^\"]*)\"", re.IGNORECASE
)


class _Violations:
    """The server's permissions violations on one connection, matched to the calls
    waiting on them: the server drops a forbidden publish and says so only on the
    error callback, so without this the call would wait for an answer that never
    comes (and ``inbox`` retried for minutes)."""

    def __init__(self, credentials: str) -> None:
        self.credentials = credentials  # whose they are, for the message
        self._watching: dict[int, tuple[Callable[[str], bool], anyio.CancelScope]] = {}
        self._found: dict[int, tuple[str, str]] = {}
        self._next = 0

    def report(self, exc: Exception) -> None:
        found = _VIOLATION.search(str(exc))
        if found is None:
            return
        # nats-py lower-cases the server's message: tests compare lower-cased too.
        kind, subject = found.group(1).lower(), found.group(2).lower()
        for token, (wanted, scope) in list(self._watching.items()):
            if wanted(subject):
                self._found.setdefault(token, (kind, subject))
                scope.cancel()

    @contextmanager
    def guard(
        self, wanted: Callable[[str], bool], named: str | None = None
    ) -> Iterator[None]:
        """Run the block; if the server reports a violation on a subject ``wanted``
        accepts (given lower-cased) meanwhile, stop it and raise
        :class:`PermissionDenied` naming ``named`` (else the server's subject)."""
        token, self._next = self._next, self._next + 1
        with anyio.CancelScope() as scope:
            self._watching[token] = (wanted, scope)
            try:
                yield
            finally:
                del self._watching[token]
        found = self._found.pop(token, None)
        if found is not None:
            kind, subject = found
            subject = named or subject
            verb = "publishing to" if kind == "publish" else "subscribing to"
            raise PermissionDenied(
                f"permission denied {verb} {subject}: these credentials are for "
                f"{self.credentials}; use the agent's own credentials (--creds FILE, "
                "env WORLDLINE_CREDS: `worldline creds` wrote one file per agent)"
            )


def _js_api(creds: str | os.PathLike[str] | None) -> str:
    """The JetStream API prefix these credentials reach JetStream through (an
    agent's own account: ``$JS.worldline.API``), or "" for the default."""
    from worldline.actors.runtime.auth import CredentialsError, load_credentials

    try:
        auth = load_credentials(creds)
    except CredentialsError:
        return ""  # connecting says what is wrong with the file
    return "" if auth is None else auth.js_api


def _credentials_label(creds: str | os.PathLike[str] | None) -> str:
    """Whose credentials these are, from the comment `worldline creds` writes."""
    from worldline.actors.runtime.auth import CredentialsError, load_credentials

    try:
        auth = load_credentials(creds)
    except CredentialsError:
        return "an unknown user"
    if auth is None:
        return "an anonymous client (no --creds)"
    first = auth.path.read_text(encoding="utf-8").splitlines()[:1]
    mark = "# worldline credentials: "
    if first and first[0].startswith(mark):
        return f"{first[0].removeprefix(mark)} ({auth.path})"
    return f"the user in {auth.path}"


class World(SimMixin, LoadMixin, JudgmentMixin):
    """One agent's handle on one world. Build it with :func:`connect`."""

    def __init__(
        self,
        nc: NATS,
        *,
        world: str,
        agent: str,
        timeout: float,
        violations: _Violations | None = None,
        js_api: str = "",
        require_declared: bool = False,
    ) -> None:
        self._nc = nc
        # An agent's own account reaches the actors' JetStream under its prefix
        # (its credentials file names it); it creates no consumer there.
        self._agent_account = bool(js_api)
        self._js = nc.jetstream(prefix=js_api) if js_api else nc.jetstream()
        self.world = world
        self.agent = agent
        self.timeout = timeout
        self._violations = violations or _Violations("this connection's user")
        url = nc.connected_url
        self._url = url.geturl() if url is not None else "the server"
        # Checked before the first write (worldline.sdk.worlds): a typo'd world.
        self.require_declared = require_declared
        self._world_checked = False

    async def _check_world(self, *, declaring: bool = False) -> None:
        """Warn of a new world named like a known one, or refuse an undeclared one
        under ``require_declared``; once per handle (:mod:`worldline.sdk.worlds`)."""
        if self._world_checked or self._agent_account:
            return
        try:  # credentials that may not read the stream's state: no check
            with self._permitted(lambda subject: ".stream.info." in subject):
                await check_world(
                    self._js,
                    self.world,
                    require_declared=self.require_declared,
                    declaring=declaring,
                    declared=self._declared,
                )
        except PermissionDenied:
            pass
        self._world_checked = True

    async def _declared(self) -> bool:
        """Whether a projector holds a declaration of this world (no entity has
        type ``-``: the reply is the declaration and the edges only)."""
        reply = await self.read_world(entity_type="-", beliefs=False)
        return reply.declaration is not None

    def _permitted(
        self, wanted: str | Callable[[str], bool]
    ) -> contextlib.AbstractContextManager[None]:
        """Fail at once with :class:`PermissionDenied`, naming the subject, if the
        server refuses these credentials a subject the block uses: ``wanted`` (one
        subject, or a test of one, given the subject lower-cased)."""
        if isinstance(wanted, str):
            lowered = wanted.lower()
            return self._violations.guard(lambda s: s == lowered, named=wanted)
        return self._violations.guard(wanted)

    async def _jetstream_publish(
        self, subject: str, payload: bytes, msg_id: str
    ) -> int:
        """Publish to the log and return its stream sequence, or raise an error
        naming the cause: a permissions violation, no worldline streams, a JetStream
        API error (storage full...), no answer."""
        await self._check_world()
        with (
            self._permitted(subject),
            bus_errors(self._url, f"publishing to {subject}"),
        ):
            try:
                ack = await self._js.publish(
                    subject,
                    payload,
                    timeout=self.timeout,
                    headers={api.Header.MSG_ID: msg_id},
                )
            except nats.errors.TimeoutError as exc:
                raise BusUnavailable(
                    f"JetStream at {self._url} did not confirm the write on {subject} "
                    f"within {self.timeout:g}s; check `worldline status` and retry"
                ) from exc
        return int(ack.seq)

    async def _publish(self, subject: str, message: Message, msg_id: str) -> None:
        await self._jetstream_publish(subject, encode(message), msg_id)

    async def who(self) -> list[Presence]:
        """Every agent present in this world (its presence, set with
        :meth:`set_presence`, not yet expired), by agent name.

        With an agent's own credentials (its own NATS account) the presence bucket
        cannot be listed, only read by key: the agents the world's declaration names
        (and this one) are read, all at once."""
        if self._agent_account:
            return await self._who_declared()
        present: list[Presence] = []
        with (
            self._permitted(lambda subject: PRESENCE.bucket in subject),
            bus_errors(self._url, "reading presence"),
        ):
            kv = await self._js.key_value(PRESENCE.bucket)
            watcher = await kv.watch(f"{self.world}.*", ignore_deletes=True)
        try:
            with anyio.move_on_after(self.timeout):
                async for entry in watcher:
                    if entry is None:  # every current entry has been seen
                        break
                    seen = (
                        decode_presence(entry.key, entry.value) if entry.value else None
                    )
                    if seen is not None:
                        present.append(seen)
        finally:
            with anyio.CancelScope(shield=True):
                await watcher.stop()  # type: ignore[no-untyped-call]
        return sorted(present, key=lambda p: p.agent)

    async def _who_declared(self) -> list[Presence]:
        """Presence of every agent the declaration names, and this one, by key."""
        crew = await self.read_world(entity_type="none", beliefs=False)
        names = {self.agent}
        if crew.declaration is not None:
            names |= agents_named(crew.declaration)
        # Read at once, not one round trip after another; a failure is raised as
        # the one-by-one read would have: the first in name order.
        found = await asyncio.gather(
            *(self.presence(name) for name in sorted(names)), return_exceptions=True
        )
        present: list[Presence] = []
        for result in found:
            if isinstance(result, BaseException):
                raise result
            if result is not None:
                present.append(result)
        return present

    async def backup(self) -> AsyncIterator[ExportRecord | RawRecord]:
        """See :meth:`worldline.sdk.export.ExportMixin.backup`. The op log is the
        operator's to read: credentials without that right (an agent's) are named
        at once, as the server's refusal of the log's stream."""
        with (
            self._permitted(lambda subject: OPS.name.lower() in subject.split(".")),
            bus_errors(self._url, "reading the op log"),
            contextlib.suppress(nats.js.errors.NotFoundError),  # said below
        ):
            await self._js.stream_info(OPS.name)
        async for record in super().backup():
            yield record

    def turn(
        self, query: str, *, at: datetime | None = None, wait: float | None = None
    ) -> AbstractAsyncContextManager[Turn]:
        """One turn of an agent loop: ``async with world.turn(query) as turn:``
        reads the worldview (``turn.worldview.prompt``); set ``turn.output`` and a
        clean exit reports it through ``after`` and waits until it is applied
        (``turn.extracted``). A turn that raises reports nothing. See
        :mod:`worldline.hooks`."""
        # Imported here: the hooks build on this client, and it does not build on them.
        from worldline.sdk.hooks import turn

        return turn(self, query, at=at, wait=wait)

    async def _request(self, verb: RpcVerb, message: Message) -> Message:
        """Ask ``verb``; a replica catching up after a restart (an error with
        ``retry_after``) is asked again until the timeout."""
        deadline = anyio.current_time() + self.timeout
        while True:
            reply = await self._request_once(verb, message)
            if not isinstance(reply, RpcError):
                return reply
            left = deadline - anyio.current_time()
            if reply.retry_after <= 0:
                if reply.code == "invalid":
                    raise BadRequest(reply.message)
                raise ServerError(reply.message)
            if left <= 0:
                raise BusUnavailable(
                    f"{reply.message} (still so after {self.timeout:g}s)"
                )
            await anyio.sleep(min(reply.retry_after, left))

    async def _request_once(self, verb: RpcVerb, message: Message) -> Message:
        subject = rpc(self.world, verb)
        try:
            with self._permitted(subject):
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
        reply: Message = decode_reply(decoder, msg.data, subject)
        return reply


@asynccontextmanager
async def connect(
    url: str | None = None,
    *,
    world: str = "default",
    agent: str | None = None,
    request_timeout: float = 10.0,
    creds: str | os.PathLike[str] | None = None,
    require_declared: bool | None = None,
) -> AsyncIterator[World]:
    """Connect to a worldline deployment as ``agent`` in ``world``.

    ``agent`` defaults as the CLI's ``--agent`` does: ``$WORLDLINE_AGENT``, else the
    login name, else ``cli`` (:func:`worldline.sdk.discovery.default_agent`).

    ``url`` is the NATS server; without it, ``$WORLDLINE_NATS``, else the URL a local
    ``worldline up`` recorded in its data folder (``$WORLDLINE_DATA``), else
    ``nats://127.0.0.1:4222`` (:func:`worldline.sdk.discovery.bus_url`).

    ``creds`` is the agent's credentials file from ``worldline creds`` (default:
    ``$WORLDLINE_CREDS``, if set), for a server that requires them.

    The first write to a world with no ops warns (:class:`~worldline.sdk.worlds.
    NewWorldWarning`) when a known world has a close name; ``require_declared``
    (default: ``$WORLDLINE_REQUIRE_DECLARED``) refuses writes to a world no
    declaration names instead (:mod:`worldline.sdk.worlds`).

    Raises:
        BadRequest: the world or agent name is not a valid subject token, or the
            credentials file is missing or holds no user key.
        BusUnavailable: NATS cannot be reached at ``url``, or refused the credentials.

    Later calls raise :class:`~worldline.sdk.errors.PermissionDenied` when the server
    refuses these credentials a subject the call needs (another agent's, say), and
    :class:`~worldline.sdk.errors.NoWorldline` when it holds no worldline streams.
    """
    agent = default_agent() if agent is None else agent
    try:
        check_name("world", world)
        check_name("agent", agent)
    except ValueError as exc:
        raise BadRequest(str(exc)) from exc
    # The connection and credentials load here, not with ``import worldline``: they
    # are light (nats-py, nkeys), and the rest of the runtime never loads in an agent.
    from worldline.actors.runtime.auth import CredentialsError
    from worldline.actors.runtime.bus import connect as bus_connect

    violations = _Violations(_credentials_label(creds))
    js_api = _js_api(creds)
    url = bus_url(url)
    try:
        nc = await bus_connect(
            url,
            name=f"worldline-sdk-{agent}",
            creds=creds,
            on_server_error=violations.report,
        )
    except CredentialsError as exc:
        raise BadRequest(str(exc)) from exc
    except RuntimeBusUnavailable as exc:  # the SDK's own, a WorldlineError too
        raise BusUnavailable(str(exc)) from exc
    try:
        yield World(
            nc,
            world=world,
            agent=agent,
            timeout=request_timeout,
            violations=violations,
            js_api=js_api,
            require_declared=(
                require_declared_default()
                if require_declared is None
                else require_declared
            ),
        )
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await nc.close()

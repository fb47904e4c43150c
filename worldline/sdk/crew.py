"""The crew-world half of the SDK: declare, write, link, file work, read the inbox,
views, presence (reading the whole log back: :mod:`worldline.sdk.export`). Mixed into
:class:`worldline.sdk.client.World`."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio
import msgspec
import nats.errors
import nats.js.errors

from worldline.protocols.beliefs import Direction, Evidence, EvidenceKind
from worldline.protocols.messages import (
    AckInbox,
    AddEdge,
    AgentView,
    DeclareWorld,
    GetView,
    InboxMessage,
    Message,
    OpStatus,
    OpStatusReply,
    Presence,
    PutWork,
    ReadWorld,
    RemoveEdge,
    SetField,
    StateHash,
    StateHashReply,
    UpsertEntity,
    ViewReply,
    WorldReply,
    encode,
)
from worldline.protocols.subjects import (
    INBOX as INBOX_STREAM,
)
from worldline.protocols.subjects import (
    PRESENCE,
    RpcVerb,
    bucket_key,
    inbox_in,
    ops,
)
from worldline.protocols.world import Edge, Value, WorldDecl
from worldline.sdk.errors import (
    BadRequest,
    BusUnavailable,
    NotApplied,
    Rejected,
    bus_errors,
    no_worldline,
)
from worldline.sdk.export import ExportMixin
from worldline.sdk.undecodable import decode_presence, readable_inbox
from worldline.sdk.views import ViewsMixin
from worldline.sdk.wording import explain

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Callable

    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext

    from worldline.protocols.subjects import ConsumerSpec

__all__ = [
    "CrewMixin",
    "InboxItem",
    "evidence_item",
    "new_id",
    "utc_now",
    "validated",
]

T = TypeVar("T", bound=msgspec.Struct)

log = logging.getLogger("worldline.sdk")
# JetStream's "consumer not found" (a missing stream is 10059).
_CONSUMER_NOT_FOUND = 10014


def new_id(prefix: str) -> str:
    """A fresh random id with a readable prefix (op-, ev-, b-...)."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def utc_now() -> datetime:
    """The client's clock: when an op or observation is made."""
    return datetime.now(UTC)


def validated(message: T) -> T:
    """msgspec checks constraints on decode, not on construction: round-trip once."""
    try:
        return msgspec.msgpack.decode(encode(message), type=type(message))
    except msgspec.ValidationError as exc:
        raise BadRequest(explain(str(exc), message=type(message))) from exc


@dataclass(frozen=True)
class InboxItem:
    """One inbox message, still unacknowledged on the bus."""

    message: InboxMessage
    seq: int  # its INBOX stream sequence
    _msg: Msg

    async def release(self) -> None:
        """Hand it back unacknowledged: the next ``inbox()`` sees it again."""
        await self._msg.nak()


class CrewMixin(ViewsMixin, ExportMixin):
    """Crew-world verbs; needs ``_nc``, ``_js``, ``world``, ``agent``, ``timeout``."""

    _nc: NATS
    _js: JetStreamContext
    _fence: int = 0  # read replicas must hold at least this OPS sequence
    _last_version: int = 0  # what the last applied write left its fields at
    _url: str = "the server"  # the server connected to, for error messages
    # Connected as an agent's own NATS account (worldline creds): it reads JetStream
    # by key only and creates no consumer.
    _agent_account: bool = False
    # The stream sequences of what the last inbox() skipped: not inbox messages
    # (logged and acknowledged; the rest was returned).
    inbox_skipped: list[int] = []  # noqa: RUF012 (reassigned, never changed in place)
    world: str
    agent: str
    timeout: float

    async def _request(self, verb: RpcVerb, message: Message) -> Message:
        raise NotImplementedError

    async def _jetstream_publish(
        self, subject: str, payload: bytes, msg_id: str
    ) -> int:
        raise NotImplementedError

    def _permitted(
        self, wanted: str | Callable[[str], bool]
    ) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    async def _check_world(self, *, declaring: bool = False) -> None:
        raise NotImplementedError

    async def _publish_op(self, message: Any) -> int:
        """Record ``message`` in the log; return its OPS sequence.

        Raises:
            PermissionDenied: these credentials may not publish as this agent.
            NoWorldline: the server holds no worldline streams.
            BusUnavailable: JetStream refused or did not confirm the write.
        """
        subject = ops(self.world, self.agent)
        return await self._jetstream_publish(subject, encode(message), message.op_id)

    async def _submit(self, op: Any) -> int:
        """Record ``op`` in the log, wait until the materializer has applied it, and
        return its sequence (the version it gave the fields it wrote).

        Raises:
            Rejected: the materializer refused it (code, reason, current version).
            NotApplied: no materializer reached it within the timeout.
        """
        seq = await self._publish_op(validated(op))
        with anyio.move_on_after(self.timeout):
            while True:
                reply = await self._request("op_status", OpStatus(seq=seq))
                if isinstance(reply, OpStatusReply) and reply.state != "pending":
                    break
                await anyio.sleep(0.02)
            self._fence = max(self._fence, reply.fence)
            self._last_version = reply.version
            if reply.rejection is not None:
                r = reply.rejection
                raise Rejected(
                    f"{r.code}: {r.reason}",
                    code=r.code,
                    current_version=r.current_version,
                    current_value=r.current_value,
                )
            return seq
        raise NotApplied(
            f"op {op.op_id} is recorded at sequence {seq} but was not applied within "
            f"{self.timeout:g}s; is the materializer running (`worldline up`)?"
        )

    async def sync(self) -> int:
        """Catch up with everyone's writes: later reads from replicas wait until they
        hold every change the materializer has applied so far. Returns that fence."""
        reply = await self._request("op_status", OpStatus(seq=0))
        if isinstance(reply, OpStatusReply):
            self._fence = max(self._fence, reply.fence)
        return self._fence

    async def declare(self, declaration: WorldDecl) -> int:
        """Declare the world (or re-declare it, as an admin); return the op sequence."""
        op = DeclareWorld(
            op_id=new_id("op"), author=self.agent, at=utc_now(), declaration=declaration
        )
        await self._check_world(declaring=True)  # a declaration needs none before it
        return await self._submit(op)

    async def write(
        self,
        entity: str,
        field: str,
        value: Value,
        *,
        expect_version: int | None = None,
    ) -> int:
        """Write one field through authority and optimistic concurrency.

        Returns the field's version after the write: the op's sequence when the value
        changed, the version it already had when the value was the same.
        ``expect_version=0`` means the field must not exist yet.

        Without ``expect_version`` the last writer wins: the write overwrites whatever
        the field holds when it is applied, whoever wrote it meanwhile, so concurrent
        read-modify-writes lose updates (the outside attack lost 413 of 500
        unconditional increments; with ``expect_version``, none). When the new value
        depends on the old one, pass the version you read and retry on
        :class:`Rejected` with code ``version_conflict`` (its ``current_version``
        and ``current_value`` say what is there now); docs/crew.md has the recipe."""
        op = SetField(
            op_id=new_id("op"),
            author=self.agent,
            at=utc_now(),
            entity=entity,
            field=field,
            value=value,
            expect_version=expect_version,
        )
        await self._submit(op)
        return self._last_version

    async def upsert(self, entity: str, fields: dict[str, Value]) -> int:
        """Create ``entity`` or set several of its fields."""
        op = UpsertEntity(
            op_id=new_id("op"),
            author=self.agent,
            at=utc_now(),
            entity=entity,
            fields=fields,
        )
        return await self._submit(op)

    async def link(self, edge_id: str, type: str, source: str, target: str) -> int:
        """Add a typed edge ``source -type-> target``."""
        edge = Edge(id=edge_id, type=type, source=source, target=target)
        op = AddEdge(op_id=new_id("op"), author=self.agent, at=utc_now(), edge=edge)
        return await self._submit(op)

    async def unlink(self, edge_id: str) -> int:
        """Remove an edge."""
        op = RemoveEdge(
            op_id=new_id("op"), author=self.agent, at=utc_now(), edge_id=edge_id
        )
        return await self._submit(op)

    async def put_work(
        self,
        work_id: str,
        *,
        kind: str,
        assigned_to: str,
        goal: str,
        priority: int = 3,
        due_at: datetime | None = None,
        status: Literal["open", "in_progress", "done", "cancelled"] = "open",
        requested_by: str | None = None,
        expect_version: int | None = None,
    ) -> int:
        """File or update a work request (``work:<work_id>``)."""
        op = PutWork(
            op_id=new_id("op"),
            author=self.agent,
            at=utc_now(),
            work_id=work_id,
            work_kind=kind,
            assigned_to=assigned_to,
            goal=goal,
            priority=priority,
            due_at=due_at,
            status=status,
            requested_by=requested_by or self.agent,
            expect_version=expect_version,
        )
        return await self._submit(op)

    async def read_world(
        self, *, entity_type: str | None = None, beliefs: bool = True
    ) -> WorldReply:
        """The declaration, entities and edges, from a projector replica; with
        ``beliefs``, also the beliefs, gaps, goals, contradictions and moves (these
        grow with the world: a reply is capped at the server's max payload)."""
        return await self._read_pages(
            ReadWorld(entity_type=entity_type, beliefs=beliefs), fenced=True
        )

    async def _read_pages(self, request: ReadWorld, *, fenced: bool) -> WorldReply:
        """Every page of a ``read``, joined: the projector answers a page at a time
        (each bounded in bytes, the first with the crew part and the moves)."""
        pages: list[WorldReply] = []
        while True:
            if fenced and not pages:
                reply = await self._read_at_fence("read", request)
            else:
                reply = await self._request("read", request)
            if not isinstance(reply, WorldReply):
                raise BadRequest(f"unexpected reply to read: {reply!r}")
            pages.append(reply)
            if not reply.next_cursor:
                break
            request = msgspec.structs.replace(request, cursor=reply.next_cursor)
        if len(pages) == 1:
            return pages[0]
        first = pages[0]
        return msgspec.structs.replace(
            first,
            version=min(p.version for p in pages),
            beliefs=[b for p in pages for b in p.beliefs],
            belief_edges=[e for p in pages for e in p.belief_edges],
            gaps=[b for p in pages for b in p.gaps],
            goals=[b for p in pages for b in p.goals],
            contradictions=[c for p in pages for c in p.contradictions],
            next_cursor="",
        )

    async def _read_at_fence(self, verb: RpcVerb, request: Message) -> Message:
        """Read your own writes: ask replicas until one holds every change this
        client has seen applied (the fence), within the timeout."""
        with anyio.move_on_after(self.timeout):
            while True:
                reply = await self._request(verb, request)
                if not isinstance(reply, WorldReply | ViewReply):
                    return reply
                if reply.version >= self._fence:
                    return reply
                await anyio.sleep(0.01)
        raise NotApplied(
            f"no projector replica reached op {self._fence} within {self.timeout:g}s; "
            "is the projector running?"
        )

    async def view(self, agent: str | None = None) -> AgentView | None:
        """An agent's startup view (yours by default), computed by a projector."""
        reply = await self._read_at_fence("view", GetView(agent=agent or self.agent))
        if not isinstance(reply, ViewReply):
            raise BadRequest(f"unexpected reply to view: {reply!r}")
        return reply.view

    async def state_hash(self) -> StateHashReply:
        """The live materializer's hash of this world's state."""
        reply = await self._request("state_hash", StateHash())
        if not isinstance(reply, StateHashReply):
            raise BadRequest(f"unexpected reply to state_hash: {reply!r}")
        return reply

    async def inbox(self, *, wait: float = 0.5, limit: int = 100) -> list[InboxItem]:
        """Your inbox messages not yet acknowledged, oldest first.

        Each agent has its own durable consumer, so a message waits for you however
        long you are away, and your acks never hide it from another agent.
        """
        self.inbox_skipped = []
        spec = inbox_in(self.world, self.agent)
        durable = spec.durable
        # Every JetStream subject the inbox uses names its durable; a violation on
        # one means these are not this agent's credentials (fail now, not retry).
        with self._permitted(lambda subject: durable.lower() in subject.split(".")):
            with anyio.move_on_after(self.timeout) as waited:
                try:
                    if not await self._inbox_open(spec):
                        return []  # the materializer opens it with a first message
                except nats.js.errors.NotFoundError as exc:
                    raise no_worldline(self._url, "no INBOX stream") from exc
            if waited.cancelled_caught:
                raise BusUnavailable(
                    f"JetStream did not set up inbox durable {durable} within "
                    f"{self.timeout:g}s; check `worldline status` and retry"
                )
            sub = await self._js.pull_subscribe_bind(
                durable=durable, stream=INBOX_STREAM.name
            )
            try:
                msgs = await sub.fetch(limit, timeout=wait)
            except TimeoutError:
                msgs = []
            finally:
                await sub.unsubscribe()
            items, self.inbox_skipped = await readable_inbox(
                msgs, self.agent, self.world
            )
        return [InboxItem(message, seq, msg) for message, seq, msg in items]

    async def _inbox_open(self, spec: ConsumerSpec) -> bool:
        """Make sure the inbox durable exists; False when it does not yet and these
        credentials (an agent's own account) may not create it: the materializer
        opens it before the first message, so there is nothing to read yet."""
        if not self._agent_account:
            from worldline.actors.runtime.declare import ensure_consumer

            await ensure_consumer(self._js, spec)
            return True
        try:
            await self._js.consumer_info(spec.stream.name, spec.durable)
        except nats.js.errors.NotFoundError as exc:
            if exc.err_code == _CONSUMER_NOT_FOUND:
                return False
            raise
        return True

    async def ack(self, items: list[InboxItem]) -> None:
        """Acknowledge on the bus and record the acks in the world (pending counts).

        In a world not declared yet (its inbox holds only the rejections of crew
        ops) the acks are made on the bus only: the materializer records acks for
        declared worlds, and would refuse the op (one more rejection each time)."""
        if not items:
            return
        durable = inbox_in(self.world, self.agent).durable
        with self._permitted(lambda subject: durable.lower() in subject.split(".")):
            for item in items:
                await item._msg.ack_sync()
        await self.sync()  # a replica behind the declaration would not know it yet
        crew = await self.read_world(entity_type="none", beliefs=False)
        if crew.declaration is None:
            return
        await self._submit(
            AckInbox(
                op_id=new_id("op"),
                author=self.agent,
                at=utc_now(),
                message_ids=[item.message.id for item in items],
            )
        )

    async def set_presence(self, status: str, task: str = "") -> None:
        """Ephemeral status (expires after the bucket's TTL; never in the log)."""
        value = validated(
            Presence(agent=self.agent, status=status, task=task, at=utc_now())
        )
        with (
            self._permitted(lambda subject: PRESENCE.bucket in subject),
            bus_errors(self._url, "setting presence"),
        ):
            kv = await self._js.key_value(PRESENCE.bucket)
            await kv.put(bucket_key(self.world, self.agent), encode(value))

    async def presence(self, agent: str) -> Presence | None:
        """Another agent's presence, or None if absent or expired."""
        with (
            self._permitted(lambda subject: PRESENCE.bucket in subject),
            bus_errors(self._url, "reading presence"),
        ):
            kv = await self._js.key_value(PRESENCE.bucket)
            try:
                entry = await kv.get(bucket_key(self.world, agent))
            except nats.js.errors.KeyNotFoundError:
                return None
        return None if entry.value is None else decode_presence(agent, entry.value)


def evidence_item(
    target: str,
    direction: Direction,
    kind: EvidenceKind,
    source: str,
    author: str,
    at: datetime,
    *,
    text: str = "",
    artifact: str = "",
    observed_at: datetime | None = None,
    id: str | None = None,
) -> Evidence:
    """One evidence item ``author`` reports at ``at`` about ``target`` (a belief or
    an edge id): observed then unless it says when, a new id unless it names one."""
    return Evidence(
        id=id or new_id("ev"),
        belief_id=target,
        direction=direction,
        kind=kind,
        source=source,
        observed_at=observed_at or at,
        text=text,
        artifact=artifact,
        author=author,
    )

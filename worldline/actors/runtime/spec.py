"""What an actor declares for the runtime: its inputs, its services, its pure handlers.

An actor's ``service.py`` builds one :class:`ActorSpec`; the runtime (``consume.py``)
does all NATS and LMDB work around it. Handlers are pure: they read state through a
:class:`Reader`, and return a :class:`Step` (state writes plus outgoing messages). They
never see ``nats.Msg``, LMDB, or the wall clock (``Context.now`` is passed in).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import msgspec

from worldline.protocols.messages import Message

if TYPE_CHECKING:
    from nats.js import JetStreamContext

    from worldline.protocols.subjects import ConsumerSpec

__all__ = [
    "ActorSpec",
    "BatchPrepare",
    "Context",
    "Handler",
    "Input",
    "Outgoing",
    "Prepare",
    "Reader",
    "Service",
    "Step",
    "Unprepared",
    "Upgrade",
    "parse_part",
]

In = TypeVar("In")
Req = TypeVar("Req")


class Reader(Protocol):
    """Read access to an actor's own state (its LMDB store, or a dict in tests)."""

    def get(self, key: bytes) -> bytes | None:
        """The value under ``key``, or None."""
        ...

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) whose key starts with ``prefix``, in key order."""
        ...


class Outgoing(msgspec.Struct, frozen=True):
    """A message to publish on JetStream once the state change is committed."""

    subject: str
    message: Message
    msg_id: str  # Nats-Msg-Id: deterministic, so a replayed publish is de-duplicated
    # ``message`` already encoded, when the core encoded it anyway (to store it)
    payload: bytes | None = None


@dataclass(slots=True)
class Step:
    """What a handler wants done: state writes (None deletes) and messages to send."""

    writes: dict[bytes, bytes | None] = field(default_factory=dict)
    out: list[Outgoing] = field(default_factory=list)
    # ``Input.finish`` only: it left work for later because more is pending
    # (``Context.pending``); the runtime calls it again for this world on every
    # batch, and with ``pending=0`` once the backlog ends or the durable is idle.
    deferred: bool = False


class Context(msgspec.Struct, frozen=True):
    """Where a message came from, and the clock, as the runtime saw them."""

    world: str
    author: str  # last token of the subject
    subject: str
    seq: int  # stream sequence
    now: datetime
    # What the input's ``prepare`` step returned for this delivery (None without one);
    # an :class:`Unprepared` when that step failed or ran out of time.
    prepared: Any = None
    # What the input's ``prepare_batch`` step returned for the fetched batch this
    # message came in (None without one, and wherever the runtime did not run it:
    # ``worldline replay`` and tests that call the store directly).
    batch_prepared: Any = None
    # Deliveries still pending on the durable after this message's batch, as
    # JetStream counted them (the ack reply's last token): a core may put off work
    # a later message would redo (see ``Input.finish``). 0 wherever nothing is
    # known to wait: ``worldline replay``, tests that call the store directly.
    pending: int = 0


@dataclass(frozen=True, slots=True)
class Unprepared:
    """``Context.prepared`` when the prepare step raised or timed out."""

    reason: str


Handler = Callable[[Reader, In, Context], Step]
# Async work outside the batch transaction (a model call, say): its result reaches the
# pure handler as ``Context.prepared``. It must not touch the actor's state.
Prepare = Callable[[In, Context], Awaitable[Any]]
# Async work once per fetched batch, outside the batch transaction: given the bus and
# the payload of every message the batch carries (a batch message's items unpacked,
# not decoded), its result reaches every handler call of the batch as
# ``Context.batch_prepared``. For a fact of the bus the handler must check against
# (the end of another stream, say). It must not touch the actor's state.
BatchPrepare = Callable[["JetStreamContext", list[bytes]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Input(Generic[In]):
    """One durable pull consumer and the pure handler for what it delivers."""

    consumer: ConsumerSpec
    decoder: msgspec.msgpack.Decoder[In]
    handle: Callable[[Reader, In, Context], Step]
    # Skip deliveries at or below the last applied stream sequence. Right for a durable
    # one process owns; replicas sharing a durable see sequences out of order, so their
    # handlers must be idempotent by content instead (deterministic ids and Msg-Ids).
    skip_applied: bool = True
    # Optional async step per delivery, run by the runtime after the fetch and before
    # the LMDB batch transaction (outside it): at most ``prepare_concurrency`` at once,
    # each cut off after ``prepare_timeout`` seconds. Its outputs are not replayed:
    # only what the handler makes of them is recorded.
    prepare: Prepare[In] | None = None
    prepare_concurrency: int = 4
    prepare_timeout: float = 60.0
    # Optional async step once per fetched batch (see :data:`BatchPrepare`), after
    # ``prepare``. The runtime retries it until it returns (logging each failure and
    # marking the batch in progress meanwhile): the batch is never applied without
    # its result.
    prepare_batch: BatchPrepare | None = None
    # What a message makes obsolete: of the items of one batch message with the same
    # key, only the last is handled (the others count as applied). For an input whose
    # messages each carry a thing's whole newest state, in order (so the last one
    # leaves the state as all of them in turn would). None, or a key of None: every
    # item is handled.
    coalesce: Callable[[In], Hashable | None] | None = None
    # Run after the batch's messages, in the same transaction, once per world the
    # batch touched (with the context of that world's last message): work worth doing
    # once per batch rather than per message (the handlers leave marks in the state
    # for it to find). Its writes and messages commit with the batch. While more is
    # pending (``Context.pending`` > 0) it may put work off by returning a Step with
    # ``deferred=True``: the runtime remembers the world (in the same transaction)
    # and calls it again on every later batch, with ``pending=0`` on the batch that
    # ends the backlog or when a fetch finds the durable idle. Its own state must
    # bound how long it waits (it sees ``Context.now``).
    finish: Callable[[Reader, Context], Step] | None = None
    # Whether a delivery (its raw payload) may take long to apply (a whole-world pass,
    # such as fusion's source assessment): a batch holding one runs in a worker
    # thread, never on the event loop, so heartbeats, reads and lease renewals go on.
    heavy: Callable[[bytes], bool] | None = None


@dataclass(frozen=True, slots=True)
class Service(Generic[Req]):
    """A request/reply verb answered by a queue group from the actor's state."""

    subject: str  # wildcard over worlds, e.g. ``wl.*.rpc.get``
    queue: str
    decoder: msgspec.msgpack.Decoder[Req]
    # (state, request, world) -> reply; None: not this instance's world, stay silent
    # (another partition answers it).
    serve: Callable[[Reader, Req, str], Message | None]
    # The agent a request reads as, when it asks for what is that agent's own (its
    # view, its worldview); None or "": it names none. On a secured deploy the
    # runtime refuses a request whose attested requester is another agent
    # (``worldline.actors.runtime.requester.Requester.may_read_as``).
    reads_as: Callable[[Req], str] | None = None


# One step of a state upgrade: given the store, the writes of the next chunk (all
# committed together), or None when the store is in the current format. Each step
# must leave the store readable and let the next find where it stands.
Upgrade = Callable[[Reader], "dict[bytes, bytes | None] | None"]


@dataclass(frozen=True, slots=True)
class ActorSpec:
    """Everything the runtime needs to run one actor."""

    name: str  # one of worldline.protocols.subjects.ACTOR_NAMES
    inputs: tuple[Input[Any], ...]
    services: tuple[Service[Any], ...] = ()
    replica: str = ""  # set for actors whose replicas each keep their own state
    # Key in the leases bucket (``worldline.protocols.subjects.lease_key``): when set,
    # replicas of this actor all follow the log but only the lease holder publishes and
    # serves (actors/runtime/lease.py).
    lease: str = ""
    # Brings a store written by an older version to this one's format before the
    # actor consumes or serves (see :data:`Upgrade`); None: nothing to upgrade.
    upgrade: Upgrade | None = None

    @property
    def instance(self) -> str:
        """Name of this process's instance: its store folder and connection name."""
        return f"{self.name}-{self.replica}" if self.replica else self.name


def parse_part(text: str, what: str) -> tuple[int, int]:
    """``"I/N"`` -> (I, N), checked: 0 <= I < N (a fusion shard, a materializer
    partition)."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"{what} {text!r} is not I/N, e.g. 0/2") from None
    if not 0 <= index < count:
        raise ValueError(f"{what} {text!r}: need 0 <= I < N")
    return index, count

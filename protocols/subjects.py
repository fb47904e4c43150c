"""Every NATS subject, stream, durable consumer and RPC verb worldline uses.

This module is the only place subject strings are written (a test greps the rest of the
tree for them). Subjects follow ``wl.<world>.<channel>.<...>``; the author of an op or
observation is the last token of its subject, so bus permissions can pin each agent to
its own subjects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "ACTOR_NAMES",
    "BUCKETS",
    "DERIVED",
    "DERIVED_CHANNEL",
    "DLQ",
    "EXTRACTOR_IN",
    "FUSION_IN",
    "INBOX",
    "MATERIALIZER_IN",
    "MATERIALIZER_OPS_IN",
    "OBS",
    "OPS",
    "PREFIX",
    "PRESENCE",
    "SIMULATOR_IN",
    "STATE",
    "STREAMS",
    "VIEWS",
    "BucketSpec",
    "ConsumerSpec",
    "RpcVerb",
    "StreamSpec",
    "author_of",
    "bucket_key",
    "bucket_put",
    "bucket_stream",
    "channel_of",
    "check_name",
    "derived",
    "dlq",
    "fusion_in",
    "inbox",
    "inbox_in",
    "obs",
    "ops",
    "projector_in",
    "rpc",
    "rpc_pattern",
    "state",
    "world_of",
]

PREFIX: Final = "wl"
DERIVED_CHANNEL: Final = "derived"

ACTOR_NAMES: Final = ("extractor", "fusion", "materializer", "projector", "simulator")

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

DAY: Final = 24 * 3600.0


def check_name(what: str, value: str) -> str:
    """Return ``value`` if it is usable as one subject token, else raise ValueError.

    World, agent, actor and shard names become subject tokens, so they may hold only
    letters, digits, ``_`` and ``-`` (no dots, spaces or wildcards).
    """
    if not _NAME.fullmatch(value):
        raise ValueError(
            f"invalid {what} name {value!r}: use 1-64 letters, digits, '_' or '-' "
            "(no dots, spaces or wildcards)"
        )
    return value


def obs(world: str, agent: str) -> str:
    """Subject an agent publishes an observation (artifact) on."""
    return f"{PREFIX}.{world}.obs.{agent}"


def ops(world: str, agent: str) -> str:
    """Subject an agent (or the extractor) publishes an op on: the durable record."""
    return f"{PREFIX}.{world}.ops.{agent}"


def derived(world: str, kind: str, shard: str) -> str:
    """Subject fusion publishes derived records (posteriors) on."""
    return f"{PREFIX}.{world}.{DERIVED_CHANNEL}.{kind}.{shard}"


def state(world: str, kind: str) -> str:
    """Change-feed subject the materializer publishes applied changes on."""
    return f"{PREFIX}.{world}.state.{kind}"


def inbox(world: str, agent: str) -> str:
    """An agent's durable inbox subject."""
    return f"{PREFIX}.{world}.inbox.{agent}"


def dlq(world: str, actor: str) -> str:
    """Dead-letter subject for input an actor could not accept."""
    return f"{PREFIX}.{world}.dlq.{actor}"


RpcVerb = Literal[
    "get",
    "list",
    "read",
    "view",
    "trace",
    "before",
    "state_hash",
    "op_status",
    "sim.status",
    "sim.start",
    "sim.step",
    "sim.end",
]


def rpc(world: str, verb: RpcVerb) -> str:
    """Request/reply subject for one verb in one world."""
    return f"{PREFIX}.{world}.rpc.{verb}"


def rpc_pattern(verb: RpcVerb) -> str:
    """Wildcard a queue group subscribes to so it serves ``verb`` for every world."""
    return f"{PREFIX}.*.rpc.{verb}"


def world_of(subject: str) -> str:
    """The world token of any worldline subject."""
    parts = subject.split(".")
    if len(parts) < 3 or parts[0] != PREFIX:
        raise ValueError(f"not a worldline subject: {subject!r}")
    return parts[1]


def channel_of(subject: str) -> str:
    """The channel token of a worldline subject: obs, ops, derived, state, ..."""
    parts = subject.split(".")
    if len(parts) < 3 or parts[0] != PREFIX:
        raise ValueError(f"not a worldline subject: {subject!r}")
    return parts[2]


def author_of(subject: str) -> str:
    """The author (agent) of an op or observation: the subject's last token."""
    return subject.rsplit(".", 1)[-1]


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """A JetStream stream as worldline declares it."""

    name: str
    subjects: tuple[str, ...]
    retention: Literal["limits", "workqueue"] = "limits"
    max_age: float = 0.0  # seconds; 0 keeps messages forever
    duplicate_window: float = 120.0  # seconds of Nats-Msg-Id de-duplication


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A durable pull consumer as worldline declares it."""

    stream: StreamSpec
    durable: str
    filter_subject: str
    ack_wait: float = 30.0  # seconds before an unacked message is redelivered
    max_deliver: int = 20  # deliveries before JetStream gives up on a message
    max_ack_pending: int = 1000  # in-flight limit: back-pressure for slow actors


OBS: Final = StreamSpec("WL_OBS", (f"{PREFIX}.*.obs.*",), retention="workqueue")
OPS: Final = StreamSpec("WL_OPS", (f"{PREFIX}.*.ops.*",))
DERIVED: Final = StreamSpec("WL_DERIVED", (f"{PREFIX}.*.derived.*.*",))
STATE: Final = StreamSpec("WL_STATE", (f"{PREFIX}.*.state.*",), max_age=30 * DAY)
INBOX: Final = StreamSpec("WL_INBOX", (f"{PREFIX}.*.inbox.*",))
DLQ: Final = StreamSpec("WL_DLQ", (f"{PREFIX}.*.dlq.*",), max_age=30 * DAY)

STREAMS: Final = (OBS, OPS, DERIVED, STATE, INBOX, DLQ)


EXTRACTOR_IN: Final = ConsumerSpec(OBS, "extractor", f"{PREFIX}.*.obs.*")
FUSION_IN: Final = ConsumerSpec(OPS, "fusion", f"{PREFIX}.*.ops.*")


def fusion_in(index: int, count: int) -> ConsumerSpec:
    """Shard ``index`` of ``count`` reads every op through its own durable."""
    if count == 1:
        return FUSION_IN
    return ConsumerSpec(OPS, f"fusion-{index}of{count}", f"{PREFIX}.*.ops.*")


MATERIALIZER_IN: Final = ConsumerSpec(
    DERIVED, "materializer", f"{PREFIX}.*.derived.posterior.*"
)
SIMULATOR_IN: Final = ConsumerSpec(
    DERIVED, "simulator", f"{PREFIX}.*.derived.transition.*"
)


MATERIALIZER_OPS_IN: Final = ConsumerSpec(OPS, "materializer-ops", f"{PREFIX}.*.ops.*")


def inbox_in(world: str, agent: str) -> ConsumerSpec:
    """An agent's own durable inbox consumer. ``max_deliver=-1``: a message the agent
    only peeked at is never dropped, however often it is delivered."""
    return ConsumerSpec(
        INBOX,
        # Length-prefixed so that no two (world, agent) pairs share a durable name.
        f"inbox-{len(world)}-{world}-{agent}",
        inbox(world, agent),
        max_deliver=-1,
    )


@dataclass(frozen=True, slots=True)
class BucketSpec:
    """A JetStream key/value bucket as worldline declares it."""

    bucket: str
    history: int = 1
    ttl: float = 0.0  # seconds; 0 keeps entries until overwritten


VIEWS: Final = BucketSpec("wl-views")
PRESENCE: Final = BucketSpec("wl-presence", ttl=120.0)
BUCKETS: Final = (VIEWS, PRESENCE)


def bucket_key(world: str, agent: str) -> str:
    """Key of an agent's entry in a bucket (views, presence)."""
    return f"{world}.{agent}"


def bucket_stream(bucket: BucketSpec) -> str:
    """The JetStream stream that holds a key/value bucket."""
    return f"KV_{bucket.bucket}"


def bucket_put(bucket: BucketSpec, key: str) -> str:
    """Subject that writes ``key`` in ``bucket`` (a KV put is a JetStream publish)."""
    return f"$KV.{bucket.bucket}.{key}"


def projector_in(replica: str) -> ConsumerSpec:
    """Each projector replica keeps its own read replica, so each has its own
    durable."""
    return ConsumerSpec(
        STATE, f"projector-{check_name('replica', replica)}", f"{PREFIX}.*.state.*"
    )

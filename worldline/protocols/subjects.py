"""Every NATS subject, stream, durable consumer and RPC verb worldline uses.

This module is the only place subject strings are written (a test greps the rest of the
tree for them). Subjects follow ``wl.<world>.<channel>.<...>``; the author of an op or
observation is the last token of its subject, so bus permissions can pin each agent to
its own subjects.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "ACTOR_NAMES",
    "AGENT_STREAMS",
    "BATCH_HEADER",
    "BUCKETS",
    "DERIVED",
    "DERIVED_CHANNEL",
    "DLQ",
    "EXTRACTOR_IN",
    "FUSION_IN",
    "IMPORTED_REPLY_ROOT",
    "INBOX",
    "LEASES",
    "MATERIALIZER_IN",
    "MATERIALIZER_OPS_IN",
    "OBS",
    "OPS",
    "PREFIX",
    "PRESENCE",
    "REPLY_ROOT",
    "SIMULATOR_IN",
    "STATE",
    "STATUS",
    "STREAMS",
    "VIEWS",
    "BucketSpec",
    "ConsumerSpec",
    "RpcVerb",
    "StreamSpec",
    "author_of",
    "batch_subject",
    "bucket_key",
    "bucket_put",
    "bucket_stream",
    "channel_of",
    "check_name",
    "derived",
    "dlq",
    "every_bucket_key",
    "every_rpc",
    "fusion_in",
    "inbox",
    "inbox_in",
    "is_reply_subject",
    "lease_key",
    "materializer_inputs",
    "obs",
    "ops",
    "partition_of",
    "projector_in",
    "rpc",
    "rpc_pattern",
    "slot_of",
    "state",
    "status_key",
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


# A batch: many actor outputs in one stream message (see ``batch_subject``). The
# header holds how many; the payload is ``worldline.protocols.messages.encode_batch``.
BATCH_HEADER: Final = "Wl-Batch"


def batch_subject(subject: str) -> str | None:
    """The subject a batch of outputs on ``subject`` travels on, or None when
    ``subject`` is never batched.

    Fusion's derived records batch per subject (each derived kind has its own
    consumer); the materializer's change feed batches per world on
    ``wl.<world>.state.batch``, so one batch keeps the order of changes of every
    kind. Inboxes, dead letters, ops and observations are never batched: agents and
    operators read them one by one.
    """
    parts = subject.split(".")
    if len(parts) < 4 or parts[0] != PREFIX:
        return None
    if parts[2] == DERIVED_CHANNEL:
        return subject
    if parts[2] == "state":
        return f"{PREFIX}.{parts[1]}.state.batch"
    return None


def inbox(world: str, agent: str) -> str:
    """An agent's durable inbox subject."""
    return f"{PREFIX}.{world}.inbox.{agent}"


def dlq(world: str, actor: str) -> str:
    """Dead-letter subject for input an actor could not accept."""
    return f"{PREFIX}.{world}.dlq.{actor}"


RpcVerb = Literal[
    "sources",
    "get",
    "list",
    "read",
    "view",
    "trace",
    "before",
    "search",
    "contradictions",
    "calibration",
    "state_hash",
    "op_status",
    "sim.status",
    "sim.start",
    "sim.step",
    "sim.end",
    "sim.forecast",
]


def rpc(world: str, verb: RpcVerb) -> str:
    """Request/reply subject for one verb in one world."""
    return f"{PREFIX}.{world}.rpc.{verb}"


def every_rpc(world: str) -> str:
    """Wildcard over every verb of ``world`` (``*``: of every world): what the actors'
    account exports for agents' accounts to import, one verb each."""
    return f"{PREFIX}.{world}.rpc.>"


def rpc_pattern(verb: RpcVerb) -> str:
    """Wildcard a queue group subscribes to so it serves ``verb`` for every world."""
    return f"{PREFIX}.*.rpc.{verb}"


# Reply subjects: every requester's replies arrive under ``_INBOX.`` (nats-py's default
# inbox prefix; a user with credentials gets ``_INBOX.<public key>``). A request that
# crossed a service import (an agent's own account asking the actors' verbs) arrives
# with the reply subject the server mapped it to, ``_R_.<token>.<token>``, which the
# server routes back to the requester's own reply subject in the requester's account.
REPLY_ROOT: Final = "_INBOX"
IMPORTED_REPLY_ROOT: Final = "_R_"
_REPLY_TOKEN = re.compile(r"[A-Za-z0-9_-]+")


def is_reply_subject(subject: str) -> bool:
    """Whether an actor may answer a request on ``subject``: only a plain reply
    inbox, ``_INBOX.<token>[.<token>...]`` (or a service import's mapped reply,
    ``_R_.<token>.<token>``), never a stream, bucket or JetStream API subject a
    request names (an actor holds rights there that the requester lacks: answering
    there would make it a confused deputy)."""
    root, _, rest = subject.partition(".")
    tokens = rest.split(".")
    if root == IMPORTED_REPLY_ROOT and len(tokens) != 2:
        return False
    if root not in (REPLY_ROOT, IMPORTED_REPLY_ROOT) or not rest:
        return False
    return all(_REPLY_TOKEN.fullmatch(token) for token in tokens)


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
# The streams agents publish into (their own ``obs`` and ``ops`` subjects). A
# Nats-Msg-Id is de-duplicated stream-wide, whatever the subject, so an actor's output
# into one of these is checked on a duplicate PubAck (runtime/preempt.py).
AGENT_STREAMS: Final = (OBS, OPS)


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


def materializer_inputs(
    replica: str, index: int, count: int
) -> tuple[ConsumerSpec, ConsumerSpec]:
    """The (ops, posteriors) durables of one materializer replica of partition
    ``index`` of ``count``. Every replica owns its durables: the active one and its
    standbys all follow the log, each into its own store."""
    suffix = f"-p{index}of{count}" if count > 1 else ""
    if replica:
        suffix += f"-{check_name('replica', replica)}"
    if not suffix:
        return MATERIALIZER_OPS_IN, MATERIALIZER_IN
    return (
        ConsumerSpec(
            OPS, f"materializer-ops{suffix}", MATERIALIZER_OPS_IN.filter_subject
        ),
        ConsumerSpec(DERIVED, f"materializer{suffix}", MATERIALIZER_IN.filter_subject),
    )


def slot_of(key: str, count: int) -> int:
    """Which of ``count`` owners holds ``key`` (crc32 mod count: the same on every
    machine and run). Fusion shards own belief ids, materializer partitions own
    worlds."""
    if count == 1:
        return 0  # one owner holds everything (x % 1 == 0)
    return zlib.crc32(key.encode()) % count


def partition_of(world: str, count: int) -> int:
    """The materializer partition that owns ``world``."""
    return slot_of(world, count)


def lease_key(actor: str, index: int, count: int) -> str:
    """Key in the leases bucket naming who may write for partition ``index``."""
    return f"{actor}.p{index}of{count}"


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
# Who is the active writer of each materializer partition (see actors/runtime/lease.py).
LEASES: Final = BucketSpec("wl-leases")
# One heartbeat per running actor process (`worldline status`); the TTL removes the
# entry of a process that stopped heartbeating (a few intervals after it shows stale).
STATUS: Final = BucketSpec("wl-status", ttl=60.0)
BUCKETS: Final = (VIEWS, PRESENCE, LEASES, STATUS)


def bucket_key(world: str, agent: str) -> str:
    """Key of an agent's entry in a bucket (views, presence)."""
    return f"{world}.{agent}"


def status_key(instance: str, host: str, pid: int) -> str:
    """Key of one actor process's heartbeat in ``wl-status``: its instance (replica or
    shard included) and where it runs, so replicas sharing a name show separately."""
    where = re.sub(r"[^A-Za-z0-9_-]", "_", host)[:64] or "host"
    return f"{check_name('instance', instance)}.{where}-{pid}"


def bucket_stream(bucket: BucketSpec) -> str:
    """The JetStream stream that holds a key/value bucket."""
    return f"KV_{bucket.bucket}"


def bucket_put(bucket: BucketSpec, key: str) -> str:
    """Subject that writes ``key`` in ``bucket`` (a KV put is a JetStream publish)."""
    return f"$KV.{bucket.bucket}.{key}"


def every_bucket_key() -> str:
    """Wildcard over every key of every bucket (the actors' bus permissions)."""
    return "$KV.>"


def projector_in(replica: str) -> ConsumerSpec:
    """Each projector replica keeps its own read replica, so each has its own
    durable."""
    return ConsumerSpec(
        STATE, f"projector-{check_name('replica', replica)}", f"{PREFIX}.*.state.*"
    )

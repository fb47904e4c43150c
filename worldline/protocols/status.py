"""The heartbeat each running actor process writes to the ``wl-status`` KV bucket.

``worldline status`` reads these records (what only the process knows: its counters,
its LMDB size, its uptime) beside JetStream's own consumer and stream info. The bucket
has a TTL, so an instance that stopped heartbeating disappears; before that, status
shows it stale. Heartbeats are ephemeral: never in the log, never in the state hash.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final

import msgspec

from worldline.protocols.messages import Message

__all__ = ["HEARTBEAT_VALUE", "Heartbeat", "InputStatus"]

Count = Annotated[int, msgspec.Meta(ge=0)]


class InputStatus(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One input durable of an actor process, counted since the process started."""

    durable: str
    stream: str
    applied: Count = 0  # messages acked after their batch committed (incl. skipped)
    dead_lettered: Count = 0  # messages termed and sent to the actor's DLQ subject
    batches: Count = 0  # committed batches
    rate: float = 0.0  # messages/s acked over the last minute (or since start)
    last_batch_seconds: float = 0.0  # seconds from fetch to settle of the last batch
    # Set while a batch of this input fails to commit and is being retried (a full
    # disk, a store error): since when, and the last error. Unset once it commits.
    stalled_since: datetime | None = None
    error: str = ""


class Heartbeat(Message, tag="status.heartbeat.v1", kw_only=True, frozen=True):
    """What one actor process reports about itself every few seconds."""

    actor: str  # the actor kind: extractor, fusion, materializer, ...
    instance: str  # its instance: store folder and DLQ subject token (replica, shard)
    host: str
    pid: int
    started_at: datetime
    at: datetime  # when this heartbeat was written
    interval: float  # seconds between heartbeats; staleness is judged against it
    store_bytes: Count = 0  # LMDB file size in use
    inputs: tuple[InputStatus, ...] = ()
    stopped: bool = False  # the last heartbeat of a process that stopped cleanly


HEARTBEAT_VALUE: Final = msgspec.msgpack.Decoder(Heartbeat)

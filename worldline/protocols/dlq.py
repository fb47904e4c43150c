"""Dead letters: DLQ stream -> operators. Input an actor could not accept."""

from __future__ import annotations

from datetime import datetime

from worldline.protocols.base import Message

__all__ = ["DeadLetter"]


class DeadLetter(Message, tag="dlq.dead_letter.v1", kw_only=True, frozen=True):
    """Input an actor could not accept, kept with the reason (never dropped)."""

    actor: str
    subject: str
    stream_seq: int
    reason: str
    payload: bytes  # the input, or its first 4 KiB (then see payload_bytes)
    at: datetime
    payload_bytes: int = 0  # set when the payload was cut: the input's full size
    payload_sha256: str = ""  # and its digest (the input stays in its stream)

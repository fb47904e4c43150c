"""An actor's outbox: the outputs a batch committed, kept in one LMDB entry until
JetStream has confirmed them (see ``store.py``), and the batch's result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec

__all__ = ["BatchResult", "OutboxItem", "decode_entry", "encode_entry"]


class OutboxItem(msgspec.Struct, frozen=True):
    """A committed message waiting to be published."""

    key: bytes
    subject: str
    msg_id: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class BatchResult:
    """Per delivery, whether it was accepted (ack) or dead-lettered (term)."""

    accepted: list[bool]
    outbox: list[OutboxItem]


_Entry = list[tuple[str, str, bytes]]  # (subject, msg_id, payload) per output
_ENTRY: Final = msgspec.msgpack.Decoder(_Entry)
_ITEM: Final = msgspec.msgpack.Decoder(tuple[str, str, bytes])


def encode_entry(items: list[OutboxItem]) -> bytes:
    """One outbox entry holding a batch's outputs, in order."""
    return msgspec.msgpack.encode([(i.subject, i.msg_id, i.payload) for i in items])


def decode_entry(key: bytes, raw: bytes) -> list[OutboxItem]:
    """The outputs an outbox entry holds. Stores written before outputs were kept
    per batch hold one output per entry, a bare (subject, msg_id, payload)."""
    try:
        entry = _ENTRY.decode(raw)
    except msgspec.ValidationError:
        entry = [_ITEM.decode(raw)]
    return [OutboxItem(key, *output) for output in entry]

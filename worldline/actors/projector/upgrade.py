"""Brings a projector store written before the lexical channel (issue 16) to the
current index format, at start-up, before the projector consumes or serves.

Such a store has ``tok/`` keys (a stem index by influence) and cards without a
length. The upgrade deletes the ``tok/`` keys, then gives each such card its terms,
postings and counters (:func:`worldline.actors.projector.index.index_writes`, which
keeps the card's vector), :data:`CHUNK` cards per transaction, then each world's
read clock (``bclock/<w>``, the newest ``updated_at`` of its belief records), then the
contradiction records it lacks (``contradictions.missing``) and its open splits as
the evidence now stands (``contradictions.resplit``), and last records
:data:`FORMAT`. A crash in between resumes: every step finds what is left.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.projector import beliefs, contradictions, index
from worldline.actors.runtime.memory import Overlay

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Reader

__all__ = ["CHUNK", "FORMAT", "FORMAT_KEY", "upgrade"]

FORMAT_KEY: Final = b"format/projector-index"
# v2: each world's read clock (bclock/<w>) kept; v3: contradiction records; v4:
# split records re-derived from the evidence as it stands (issue 25)
FORMAT: Final = b"lexical-v4"
CHUNK: Final = 2000  # cards re-indexed per transaction
_DELETES: Final = 20_000  # old keys deleted per transaction


class _Length(msgspec.Struct, tag_field="kind", tag="card.v1"):
    length: int = -1


_LENGTH = msgspec.msgpack.Decoder(_Length)


class _Stamp(msgspec.Struct):
    updated_at: datetime


class _Head(msgspec.Struct):
    belief: _Stamp


_HEAD = msgspec.msgpack.Decoder(_Head)
_CARD = msgspec.msgpack.Decoder(index.Card)


def _missing_clocks(reader: Reader) -> dict[bytes, bytes | None]:
    """The ``bclock/<w>`` writes a replica written before the key existed lacks:
    one pass over every belief record's head."""
    newest: dict[str, datetime] = {}
    for key, value in reader.scan(b"belief/"):
        world = key.decode().split("/", 2)[1]
        stamp = _HEAD.decode(value).belief.updated_at
        if world not in newest or newest[world] < stamp:
            newest[world] = stamp
    return {
        beliefs.clock_key(world): msgspec.msgpack.encode(stamp)
        for world, stamp in sorted(newest.items())
        if reader.get(beliefs.clock_key(world)) is None
    }


def upgrade(reader: Reader) -> dict[bytes, bytes | None] | None:
    """The next chunk of the upgrade, or None when the store is current (see
    :data:`worldline.actors.runtime.spec.Upgrade`)."""
    if reader.get(FORMAT_KEY) == FORMAT:
        return None
    writes: dict[bytes, bytes | None] = {}
    for key, _ in reader.scan(b"tok/"):
        writes[key] = None
        if len(writes) >= _DELETES:
            return writes
    if writes:
        return writes
    done = 0
    for key, raw in reader.scan(b"card/"):
        if _LENGTH.decode(raw).length >= 0:
            continue
        card = _CARD.decode(raw)
        world = key.decode().split("/", 2)[1]  # a world fits its key part whole
        overlay = Overlay(reader, writes)
        index.index_writes(overlay, world, card.belief, card.weight, writes)
        done += 1
        if done >= CHUNK:
            return writes
    writes.update(_missing_clocks(reader))  # from belief records: no card touches
    writes.update(contradictions.missing(reader))  # records, from edges and beliefs
    overlay = Overlay(reader, writes)
    writes.update(contradictions.resplit(overlay))  # splits: as the evidence stands
    writes[FORMAT_KEY] = FORMAT
    return writes

"""A belief as the world knew it at a recorded time ``as_of`` (docs/belief-math.md,
"Two time axes"): the version, ``updated_at``, status and trust of its last change
at or before ``as_of``, and the evidence recorded by then; the reading itself is
then made by the belief math at the read's clock (:func:`worldline.actors.projector.
clocks.at_clock`), never a later change's.

State keys: ``bver/<w>/<id>/<version, 20 digits>`` -> :class:`Kept`, what of the
change applied at that version can differ from the newest (version, time, status,
prior, label, and the trust that weighed it). One put beside ``belief/<w>/<id>``
per change applied, no read; rebuilt from the change feed like the rest of the
replica. The evidence is kept once, in the
newest record: each item carries the ``recorded_at`` and ``recorded_seq`` of the op
that recorded it.

The world's clock as it stood at ``as_of`` (the newest ``updated_at`` of the belief
changes recorded by then, the clock a read made then used) comes from the times of
the changes applied: ``bclkd/<w>/<hour>`` -> b"" for each hour (UTC) with one, and
``bclkt/<w>/<hour>/<minutes and seconds>`` -> the ``updated_at`` itself: two more
puts per change, no read. Finding it reads the hour keys and at most two hours'
times.

A belief closed (retracted, resolved) is no longer a document of the lexical index;
``bclosed/<w>/<id>`` -> when it closed lets a search as of an earlier time find it
(one put per close; never deleted: a read checks the status it had then).

A change the feed coalesced away (``core.newest_only``: a later change of the same
belief in the same batch message restates it) leaves no key. Such a change is active
and not contradicted; when it was an item of evidence being recorded, the item's own
``recorded_seq`` and ``recorded_at`` give its version and time, and its status and
trust are those of the kept change before it (or, when even the belief's creation
was coalesced, of the first kept change). A replica written before these keys
existed has none for its beliefs: its ``as_of`` reads fall back to the newest
record with the evidence recorded by then.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from worldline.actors.runtime.keys import key_part
from worldline.protocols.messages import BeliefChanged

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.beliefs import Evidence

__all__ = [
    "DIGITS",
    "Kept",
    "clock_at",
    "closed_since",
    "known",
    "recorded",
    "version_key",
    "writes",
]

DIGITS: Final = 20  # an OPS sequence, zero-padded so key order is version order
# World and id in a key are bounded as the index bounds them (LMDB's 511 bytes):
# at most 5 + 64 + 1 + 128 + 1 + 20 bytes.
WORLD_BYTES: Final = 64
ID_BYTES: Final = 128
_TIME: Final = msgspec.msgpack.Decoder(datetime)
_CLOSED: Final = msgspec.msgpack.Decoder(tuple[datetime, str])
_encode: Final = msgspec.msgpack.encode


class Kept(msgspec.Struct, frozen=True, array_like=True):
    """What one applied change leaves for ``as_of`` reads: the fields of the
    belief's head that a later change may move (the rest, text, type, author,
    creation, slot, is the newest record's), and the trust that weighed it. The
    reading itself (confidence, weight, flags) is made again at the read's clock."""

    version: int
    updated_at: datetime
    status: Literal["active", "retracted", "resolved"] = "active"
    closed_reason: str = ""
    valid_until: datetime | None = None
    prior: float | None = None
    label: str = ""
    trust: dict[str, float] = msgspec.field(default_factory=dict)


_KEPT: Final = msgspec.msgpack.Decoder(Kept)


def _w(world: str) -> str:
    return key_part(world, WORLD_BYTES)


def _prefix(world: str, belief_id: str) -> bytes:
    return f"bver/{_w(world)}/{key_part(belief_id, ID_BYTES)}/".encode()


def version_key(world: str, belief_id: str, version: int) -> bytes:
    return _prefix(world, belief_id) + f"{version:0{DIGITS}d}".encode()


def _hour_and_rest(t: datetime) -> tuple[str, str]:
    """``t`` as key parts that sort as the times do (UTC): its hour, and the rest."""
    utc = t if t.tzinfo is None or t.tzinfo is UTC else t.astimezone(UTC)
    text = utc.replace(tzinfo=None).isoformat(timespec="microseconds")
    return text[:13], text[14:]  # one C call: strftime twice cost 3x as much


def writes(world: str, change: BeliefChanged, held: int) -> dict[bytes, bytes | None]:
    """What to keep of an applied change for ``as_of`` reads (:class:`Kept`), and
    its time among the world's change times, with the times of the changes since
    version ``held`` (-1: none held) the feed coalesced into it: its creation, and
    the items recorded since (the evidence is in id order, so each item is looked
    at; the change was just decoded and is encoded again whole anyway)."""
    belief = change.belief
    times = {belief.updated_at}
    if held < 0:
        times.add(belief.created_at)
    times.update([recorded(e) for e in change.evidence if e.recorded_seq > held])
    kept = Kept(
        version=belief.version,
        updated_at=belief.updated_at,
        status=belief.status,
        closed_reason=belief.closed_reason,
        valid_until=belief.valid_until,
        prior=belief.prior,
        label=belief.label,
        trust=change.trust,
    )
    found: dict[bytes, bytes | None] = {
        version_key(world, belief.id, belief.version): _encode(kept)
    }
    for t in times:
        hour, rest = _hour_and_rest(t)
        found[f"bclkd/{_w(world)}/{hour}".encode()] = b""
        found[f"bclkt/{_w(world)}/{hour}/{rest}".encode()] = _encode(t)
    if belief.status != "active":
        closed = (belief.valid_until or belief.updated_at, belief.id)
        key = f"bclosed/{_w(world)}/{key_part(belief.id, ID_BYTES)}"
        found[key.encode()] = _encode(closed)
    return found


def closed_since(reader: Reader, world: str, as_of: datetime) -> list[str]:
    """The beliefs closed after ``as_of`` (they may have been active then)."""
    prefix = f"bclosed/{_w(world)}/".encode()
    closed = [_CLOSED.decode(raw) for _, raw in reader.scan(prefix)]
    return [belief_id for when, belief_id in closed if when > as_of]


def clock_at(reader: Reader, world: str, as_of: datetime) -> datetime | None:
    """The world's clock as it stood at ``as_of``: the newest ``updated_at`` of a
    belief change at or before it (None: no change by then, or none kept)."""
    hour, rest = _hour_and_rest(as_of)
    prefix = f"bclkd/{_w(world)}/".encode()
    hours = [k[len(prefix) :].decode() for k, _ in reader.scan(prefix)]
    for held in reversed([h for h in hours if h <= hour]):
        found = None
        for key, raw in reader.scan(f"bclkt/{_w(world)}/{held}/".encode()):
            if held < hour or key.decode().rsplit("/", 1)[1] <= rest:
                found = raw  # times in key order: the last one by then
        if found is not None:
            return _TIME.decode(found)
    return None


def recorded(item: Evidence) -> datetime:
    """When the world was told of ``item`` (its observation time for evidence
    recorded before ``recorded_at`` was kept)."""
    return item.observed_at if item.recorded_at is None else item.recorded_at


def known(
    reader: Reader, world: str, record: BeliefChanged, as_of: datetime
) -> BeliefChanged | None:
    """``record`` (the belief's newest change, with all its evidence) as the world
    knew it at ``as_of``; None when the belief did not exist then. Reads the
    belief's own versions only (see the module docstring)."""
    belief = record.belief
    if belief.created_at > as_of:
        return None
    evidence = [e for e in record.evidence if recorded(e) <= as_of]
    prefix = _prefix(world, belief.id)
    before = after = None  # the last kept change by then, the first one after
    for key, raw in reader.scan(prefix):
        if len(key) != len(prefix) + DIGITS or not key[len(prefix) :].isdigit():
            continue  # another belief's key (an id that goes on with "/")
        version = _KEPT.decode(raw)
        if version.updated_at <= as_of:
            before = version
        elif after is None:
            after = version
    base = before if before is not None else after
    if base is None:  # no versions kept: a replica written before them
        return msgspec.structs.replace(record, evidence=evidence)
    head = msgspec.structs.replace(
        belief,
        version=base.version,
        updated_at=base.updated_at,
        status=base.status,
        closed_reason=base.closed_reason,
        valid_until=base.valid_until,
        prior=base.prior,
        label=base.label,
    )
    if before is None:  # its creation was coalesced away: it was active then
        head = msgspec.structs.replace(
            head, status="active", closed_reason="", valid_until=None
        )
    last = max(
        (e for e in evidence if e.recorded_seq),
        key=lambda e: e.recorded_seq,
        default=None,
    )
    if last is not None and (before is None or last.recorded_seq > head.version):
        head = msgspec.structs.replace(
            head, version=last.recorded_seq, updated_at=recorded(last)
        )
    elif before is None:  # nothing of it recorded by then but its creation
        head = msgspec.structs.replace(head, version=0, updated_at=head.created_at)
    return BeliefChanged(belief=head, evidence=evidence, trust=base.trust)

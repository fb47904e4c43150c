"""A belief as the world knew it at a recorded time ``as_of`` (docs/belief-math.md,
"Two time axes"): the version, ``updated_at``, status, label and trust it had once
every op recorded by ``as_of`` was in, and the evidence recorded by then. The
reading itself is made again by the belief math at the read's clock
(:func:`worldline.actors.projector.clocks.at_clock`).

What a read as of T needs is kept so that it does not depend on how the feed was
batched (``core.newest_only`` coalesces a belief's changes within one batch) nor on
the order of causally independent ops:

- The times and sequences come from what every order and batching hold alike: the
  belief's ``created_seq``/``created_at``, each evidence item's ``recorded_seq``/
  ``recorded_at``, and, for a rival answer, its rivals' items and closings while it
  is active (each re-reads it).
- What else a change may move (status, closing, outcome, label, trust) is kept in
  ``bhead/<w>/<id>/<seq, 12 digits>`` -> :class:`Kept`: one at the belief's creation,
  one at each op from which those fields differ (a trust multiplier is kept per
  source, as what changed at that op), and one at each change of a belief without a
  slot that no item of its own evidence caused (a trust setting, an assessment, a
  closing: they are applied one by one). A coalesced run of changes shares its
  state (the coalescing key holds it), so what differs from the change held before
  started with the run's first item (a new source: with its first item). A rival
  answer keeps only its own sources' multipliers; its rivals' come from theirs.
- The world's clock as it stood at T (the newest change time by then, the clock a
  read made then used): ``bclkd/<w>/<hour>`` -> b"" per hour with a change (hours
  since year 1, UTC) and ``bclkb/<w>/<hour>/<id>`` -> the id of each belief changed
  in it; the times are in the beliefs' records (creation, items, heads). A change in
  the hour of the change held before writes nothing here.
- ``bclosed/<w>/<id>`` -> when it closed: a closed belief leaves the lexical index,
  and a search as of an earlier time finds it through this.

A read as of a time at or after the belief's ``updated_at`` is its newest record
itself. A belief whose creation this replica applied before these keys existed has
no creation head: its reads as of an earlier time keep the newest record's status,
label and trust (with the evidence recorded by then).
"""

from __future__ import annotations

import operator
from datetime import UTC, datetime
from itertools import compress
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from worldline.actors.runtime.keys import key_part
from worldline.protocols.messages import BeliefChanged

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.beliefs import Evidence

__all__ = [
    "DIGITS",
    "Kept",
    "clock_at",
    "closed_since",
    "held",
    "known",
    "recorded",
    "state_of",
    "writes",
]

DIGITS: Final = 12  # an OPS sequence, zero-padded so key order is sequence order
# World and id in a key are bounded as the index bounds them (LMDB's 511 bytes).
WORLD_BYTES: Final = 64
ID_BYTES: Final = 128
_CLOSED: Final = msgspec.msgpack.Decoder(tuple[datetime, str])
_encode: Final = msgspec.msgpack.encode


class Kept(msgspec.Struct, frozen=True, array_like=True):
    """The head fields of a belief from one op on (what a reading does not
    recompute), when the op was recorded, and the trust multipliers that op set
    (None: the source's multiplier was dropped)."""

    at: datetime | None  # None: only a new source's multiplier (see writes)
    status: Literal["active", "retracted", "resolved"] = "active"
    closed_reason: str = ""
    valid_until: datetime | None = None
    outcome: bool | None = None
    closed_confidence: float | None = None
    label: str = ""
    trust: dict[str, float | None] = msgspec.field(default_factory=dict)
    created: bool = False  # the head of the belief's creation


_KEPT: Final = msgspec.msgpack.Decoder(Kept)
_SEQ: Final = operator.attrgetter("recorded_seq")  # a scan in C


class _HeldHead(msgspec.Struct, kw_only=True):
    version: int = 0
    evidence_count: int = 0
    updated_at: datetime  # a stored change always has one
    status: Literal["active", "retracted", "resolved"] = "active"
    closed_reason: str = ""
    valid_until: datetime | None = None
    outcome: bool | None = None
    closed_confidence: float | None = None
    label: str = ""


class _Held(msgspec.Struct):
    belief: _HeldHead
    trust: dict[str, float] = msgspec.field(default_factory=dict)


_HELD: Final = msgspec.msgpack.Decoder(_Held)
_RECORD: Final = msgspec.msgpack.Decoder(BeliefChanged)


def held(raw: bytes) -> _Held:
    """What ``writes`` needs of the stored change (and its version), decoding no
    evidence."""
    return _HELD.decode(raw)


State = tuple[
    Literal["active", "retracted", "resolved"],
    str,
    datetime | None,
    bool | None,
    float | None,
    str,
]


def state_of(change: BeliefChanged | _Held) -> State:
    """The head fields a reading does not recompute, but trust."""
    b = change.belief
    return (
        b.status,
        b.closed_reason,
        b.valid_until,
        b.outcome,
        b.closed_confidence,
        b.label,
    )


def recorded(item: Evidence) -> datetime:
    """When the world was told of ``item`` (its observation time for evidence
    recorded before ``recorded_at`` was kept)."""
    return item.observed_at if item.recorded_at is None else item.recorded_at


def _w(world: str) -> str:
    return key_part(world, WORLD_BYTES)


def _prefix(world: str, belief_id: str) -> bytes:
    return f"bhead/{_w(world)}/{key_part(belief_id, ID_BYTES)}/".encode()


_HOURS_TO_1970: Final = 62_135_596_800 // 3600  # from year 1 (UTC)


def _hour(t: datetime) -> int:
    """The hour ``t`` falls in, counted from year 1 (UTC; a naive time counts as
    UTC): one C call and a division, as it runs for every change applied."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() // 3600) + _HOURS_TO_1970


def own(change: BeliefChanged, fresh: Iterable[Evidence]) -> bool:
    """Whether ``change`` was caused by the belief's creation or by an item of its
    own evidence (``fresh``: the items recorded since the change held before)."""
    v = change.belief.version
    return v == change.belief.created_seq or v in map(_SEQ, fresh)


def writes(
    reader: Reader, world: str, change: BeliefChanged, before: _Held | None
) -> dict[bytes, bytes | None]:
    """What to keep of an applied change for ``as_of`` reads (see the module
    docstring); ``before``: the change held before it (:func:`held`; None: none).
    The usual change (its creation, an item of its own evidence, nothing else
    moved) writes its time only: this runs for every change applied."""
    belief = change.belief
    found: dict[bytes, bytes | None] = {}
    if before is None:
        fresh = change.evidence
        held_at = None
        times = {belief.created_at}
    else:
        hb = before.belief
        t = belief.updated_at
        if (
            belief.evidence_count == hb.evidence_count + 1
            and t != hb.updated_at
            and not (belief.slot or change.trust or before.trust)
            and belief.status == hb.status == "active"
            and belief.label == hb.label
        ):
            # The usual change: one item of its own recorded, at its new clock (a
            # clock that moved is the item's op's time), and nothing else moved:
            # within the hour of the change held before, nothing to write.
            hour = _hour(t)
            if _hour(hb.updated_at) != hour:
                _hour_writes(world, belief.id, hour, found)
            return found
        evidence = change.evidence
        # The items of the changes since the one held (coalesced into this one),
        # picked in C.
        fresh = list(compress(evidence, map(hb.version.__lt__, map(_SEQ, evidence))))
        if (
            change.trust != before.trust
            or belief.label != hb.label
            or belief.status != "active"  # an active belief has no closing fields
            or hb.status != "active"
            or not (belief.slot or own(change, fresh))
            or (belief.slot and change.trust and _new_trusted(change, fresh, hb))
        ):
            _heads_writes(reader, world, change, fresh, before, found)
        held_at = hb.updated_at
        times = set()
    # Its own times only (a rival answer's re-reading is dated by its rival's
    # item, in the rival's hours), the heads just kept included.
    times.update(map(recorded, fresh))
    kept = [_KEPT.decode(raw) for raw in found.values() if raw is not None]
    times.update(k.at for k in kept if k.at is not None)
    # The held change's hour was kept when it was applied (a rival answer's clock
    # may be its rival's: its hours are written again, which changes nothing).
    held_hour = -1
    if held_at is not None and not belief.slot:
        held_hour = _hour(held_at)
    for hour in {_hour(when) for when in times}:
        if hour != held_hour:
            _hour_writes(world, belief.id, hour, found)
    if belief.status != "active":
        closed = (belief.valid_until or belief.updated_at, belief.id)
        key = f"bclosed/{_w(world)}/{key_part(belief.id, ID_BYTES)}"
        found[key.encode()] = _encode(closed)
    return found


def _new_trusted(change: BeliefChanged, fresh: list[Evidence], hb: _HeldHead) -> bool:
    """Whether a rival answer's fresh items bring a source of its own with a
    multiplier (its trust may hold it already, from a rival)."""
    old = _names(e for e in change.evidence if e.recorded_seq <= hb.version)
    return any(name in change.trust for name in _names(fresh) - old)


def _names(items: Iterable[Evidence]) -> set[str]:
    """The names trust is set for that ``items`` bear: sources and their agents."""
    found: set[str] = set()
    for e in items:
        found.add(e.source)
        found.add(f"agent:{e.author}")
    return found


def _hour_writes(
    world: str, belief_id: str, hour: int, found: dict[bytes, bytes | None]
) -> None:
    """Mark ``hour`` as one with a change of the world's beliefs, and the belief as
    one changed in it (its record holds the times)."""
    w = _w(world).encode()
    found[b"bclkd/%s/%08d" % (w, hour)] = b""
    bid = key_part(belief_id, ID_BYTES).encode()
    found[b"bclkb/%s/%08d/%s" % (w, hour, bid)] = belief_id.encode()


def _heads_writes(
    reader: Reader,
    world: str,
    change: BeliefChanged,
    fresh: list[Evidence],
    held: _Held,
    found: dict[bytes, bytes | None],
) -> None:
    """The heads a change that moved more than its evidence leaves (see the module
    docstring): where its head fields or a source's multiplier moved (for a
    coalesced run: from the run's first item; a new source: from its own first
    item, timeless), at a change of a belief without a slot that no item of its
    own caused, and, with the first of them, the head it had from its creation
    (what it held until then)."""
    belief = change.belief
    v = belief.version
    held_trust = held.trust
    # By OPS sequence: when (None: an item's new source, timeless), and the trust
    # multipliers set there.
    heads: dict[int, tuple[datetime | None, dict[str, float | None]]] = {}
    state = state_of(change)
    caused = own(change, fresh)
    start, start_at = v, belief.updated_at  # where a coalesced run began
    if caused:
        first = min(fresh, key=_SEQ, default=None)
        if first is not None and first.recorded_seq < v:
            start, start_at = first.recorded_seq, recorded(first)
        elif v == belief.created_seq:
            start_at = belief.created_at
    if state != state_of(held) or not (caused or belief.slot):
        heads[start] = (start_at, {})
    # Its own sources before this change and since (a rival answer's trust names
    # its rivals' sources too: it keeps only its own, its rivals theirs).
    old = _names(e for e in change.evidence if e.recorded_seq <= held.belief.version)
    mine = _names(change.evidence)
    for source in sorted(change.trust.keys() | held_trust.keys()):
        value = change.trust.get(source)
        if belief.slot and source not in mine:
            continue
        at: datetime | None = start_at
        seq = start
        if source not in old:
            # A new source weighs from its first item on, whenever that was
            # recorded: the entry has no time of its own (so it is the same
            # whichever of the source's items came first).
            item = min(
                (e for e in fresh if source in (e.source, f"agent:{e.author}")),
                key=_SEQ,
                default=None,
            )
            if item is not None:
                at, seq = None, item.recorded_seq
            elif value == held_trust.get(source):
                continue
        elif value == held_trust.get(source):
            continue
        heads.setdefault(seq, (at, {}))[1][source] = value
    prefix = _prefix(world, belief.id)
    if heads and not _heads(reader, world, belief.id):
        # The first: what it held until now it held from its creation (every move
        # of these fields keeps a head), its own sources' multipliers included.
        base: dict[str, float | None] = {
            name: value for name, value in held_trust.items() if name in old
        }
        kept = Kept(belief.created_at, *state_of(held), trust=base, created=True)
        found[prefix + f"{belief.created_seq:0{DIGITS}d}".encode()] = _encode(kept)
    for seq, (at, trust) in heads.items():  # all after its creation's sequence
        kept = Kept(at, *state, trust=trust)
        found[prefix + f"{seq:0{DIGITS}d}".encode()] = _encode(kept)


def closed_since(reader: Reader, world: str, as_of: datetime) -> list[str]:
    """The beliefs closed after ``as_of`` (they may have been active then)."""
    prefix = f"bclosed/{_w(world)}/".encode()
    closed = [_CLOSED.decode(raw) for _, raw in reader.scan(prefix)]
    return [belief_id for when, belief_id in closed if when > as_of]


def clock_at(reader: Reader, world: str, as_of: datetime) -> datetime | None:
    """The world's clock as it stood at ``as_of``: the newest time of a belief
    change at or before it (None: no change by then, or none kept). Reads the hours
    with changes up to ``as_of``'s, and the beliefs changed in the last of them
    that had one by then."""
    hour = _hour(as_of)
    w = _w(world).encode()
    prefix = b"bclkd/%s/" % w
    hours = [int(k[len(prefix) :]) for k, _ in reader.scan(prefix)]
    for held in reversed([h for h in hours if h <= hour]):
        found = None
        for _, raw in reader.scan(b"bclkb/%s/%08d/" % (w, held)):
            belief_id = raw.decode()
            stored = reader.get(f"belief/{world}/{belief_id}".encode())
            if stored is None:
                continue
            record = _RECORD.decode(stored)
            for t in _times(reader, world, record):
                if t <= as_of and _hour(t) == held:
                    found = t if found is None or t > found else found
        if found is not None:
            return found
    return None


def _times(reader: Reader, world: str, record: BeliefChanged) -> list[datetime]:
    """The times of the changes of a belief its record and heads hold."""
    belief = record.belief
    times = [belief.created_at, belief.updated_at]
    times += [recorded(e) for e in record.evidence]
    times += [k.at for _, k in _heads(reader, world, belief.id) if k.at is not None]
    return times


def _heads(reader: Reader, world: str, belief_id: str) -> list[tuple[int, Kept]]:
    prefix = _prefix(world, belief_id)
    found = []
    for key, raw in reader.scan(prefix):
        rest = key[len(prefix) :]
        if len(rest) == DIGITS and rest.isdigit():  # not an id going on with "/"
            found.append((int(rest), _KEPT.decode(raw)))
    return found


def known(
    reader: Reader,
    world: str,
    record: BeliefChanged,
    as_of: datetime,
    rivals: Sequence[BeliefChanged] = (),
) -> BeliefChanged | None:
    """``record`` (the belief's newest change, with all its evidence) as the world
    knew it at ``as_of``; None when the belief did not exist then. ``rivals``: its
    rival answers' newest records (each item of theirs re-read it)."""
    belief = record.belief
    if belief.created_at > as_of:
        return None
    if belief.updated_at <= as_of:
        return record  # every op that changed it was recorded by then
    evidence = [e for e in record.evidence if recorded(e) <= as_of]
    # Its rival answers active then weigh against it, with their sources' trust.
    weighing = [
        then
        for rival in rivals
        if (then := known(reader, world, rival, as_of)) is not None
        and then.belief.status == "active"
    ]
    names = {e.source for e in evidence} | {f"agent:{e.author}" for e in evidence}
    every = _heads(reader, world, belief.id)
    heads = [(seq, k) for seq, k in every if k.at is not None and k.at <= as_of]
    # The last op recorded by then that changed it, and its clock (which never runs
    # back: the latest time among them).
    marks = [(belief.created_seq, belief.created_at)]
    marks += [(e.recorded_seq, recorded(e)) for e in evidence]
    marks += [(seq, k.at) for seq, k in heads if k.at is not None]
    own_marks = set(marks)
    # Each item and closing of a rival re-reads it while it is active.
    closed = max((k.valid_until or k.at or as_of for _, k in heads
                  if k.status != "active"), default=as_of)  # fmt: skip
    for rival in rivals:
        marks += [(e.recorded_seq, recorded(e)) for e in rival.evidence]
        marks += [
            (seq, k.at)
            for seq, k in _heads(reader, world, rival.belief.id)
            if k.at is not None and not k.created
        ]
    marks = [m for m in marks if m[1] <= as_of]
    marks = marks[:1] + [m for m in marks[1:] if m[1] <= closed or m in own_marks]
    version = max(seq for seq, _ in marks)
    updated_at = max(at for _, at in marks)
    trust: dict[str, float] = {}
    if any(k.created for _, k in every):
        timeless = [(seq, k) for seq, k in every if k.at is None]
        for _, k in sorted(heads + timeless, key=lambda h: h[0]):
            for source, value in k.trust.items():
                if source not in names:
                    continue  # no item of it recorded by then
                if value is None:
                    trust.pop(source, None)
                else:
                    trust[source] = value
        last = heads[-1][1]
    else:  # nothing but its evidence ever moved (or kept before these keys)
        trust = {s: value for s, value in record.trust.items() if s in names}
        last = None
    for then in weighing:  # the multipliers of its rivals' sources, as they were
        for source, value in then.trust.items():
            trust.setdefault(source, value)
    if last is None:
        head = msgspec.structs.replace(belief, version=version, updated_at=updated_at)
        return BeliefChanged(belief=head, evidence=evidence, trust=trust)
    head = msgspec.structs.replace(
        belief,
        version=version,
        updated_at=updated_at,
        status=last.status,
        closed_reason=last.closed_reason,
        valid_until=last.valid_until,
        outcome=last.outcome,
        closed_confidence=last.closed_confidence,
        label=last.label,
    )
    return BeliefChanged(belief=head, evidence=evidence, trust=trust)

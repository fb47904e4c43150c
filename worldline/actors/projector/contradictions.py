"""The projector's record of contradictions: opened, dissolved and resolved as the
change feed brings belief changes, belief edges and resolutions, and read back with
their lifecycle (:mod:`worldline.actors.belief_model.contradictions`).

Why here: the projector already holds both halves (each belief with its evidence,
and every belief edge), it sees them on one ordered feed, and it is where reads
widen the uncertainty of the ends. Every time and sequence a record keeps comes
from the ops themselves (an edge's ``at`` and version, the ``at`` and sequence of
the evidence item that opened a split, a closure's ``valid_until``), and the status
is folded from those events by OPS sequence, so the record does not depend on the
read clock, nor on the order in which the materializer's two inputs reached it,
nor on the order of causally independent ops (a split is a function of the
belief's evidence as it stands; docs/belief-math.md, "Contradictions").

State keys: ``contra/<w>/<id>`` -> ``Contradiction`` (status ``open`` or
``dissolved``; resolutions are folded in when read), ``resolve/<w>/<id>/<seq>`` ->
``ContradictionResolved``, ``contraend/<w>/<sha256(belief id)[:16]>/<id>`` -> b""
(the contradictions each belief is an end of, so closing it finds them all).
"""

from __future__ import annotations

import functools
import hashlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from worldline.actors.belief_model import contradictions as model
from worldline.actors.belief_model import posterior
from worldline.actors.projector import clocks
from worldline.actors.runtime.memory import Overlay
from worldline.protocols.beliefs import BeliefEdge, Contradiction
from worldline.protocols.messages import (
    BeliefChanged,
    ContradictionResolved,
    ContradictionsReply,
    encode,
)

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.messages import Belief, ListContradictions

__all__ = [
    "apply_resolution",
    "disputes",
    "edge_contradiction",
    "listing",
    "lookup",
    "missing",
    "on_belief",
    "on_edge",
    "pair_id",
    "record_key",
    "resplit",
    "split_contradiction",
    "split_id",
]

_RECORD = msgspec.msgpack.Decoder(Contradiction)
_RESOLUTION = msgspec.msgpack.Decoder(ContradictionResolved)
_BELIEF = msgspec.msgpack.Decoder(BeliefChanged)
_EDGE = msgspec.msgpack.Decoder(BeliefEdge)
Writes = dict[bytes, bytes | None]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def record_key(world: str, contradiction_id: str) -> bytes:
    return f"contra/{world}/{contradiction_id}".encode()


def _resolution_prefix(world: str, contradiction_id: str) -> bytes:
    return f"resolve/{world}/{contradiction_id}/".encode()


@functools.lru_cache(maxsize=4096)
def split_id(world: str, belief_id: str) -> str:
    return model.contradiction_id(world, "split", (belief_id,))


def pair_id(world: str, edge: BeliefEdge) -> str:
    return model.contradiction_id(world, "edge", (edge.source, edge.target))


def _load(reader: Reader, world: str, contradiction_id: str) -> Contradiction | None:
    raw = reader.get(record_key(world, contradiction_id))
    return None if raw is None else _RECORD.decode(raw)


def _end_prefix(world: str, belief_id: str) -> bytes:
    """Where the contradictions a belief is an end of are listed (the id hashed:
    a belief id may hold ``/``)."""
    digest = hashlib.sha256(belief_id.encode()).hexdigest()[:16]
    return f"contraend/{world}/{digest}/".encode()


def _put(writes: Writes, world: str, record: Contradiction) -> None:
    writes[record_key(world, record.id)] = encode(record)
    for end in record.beliefs:
        writes[_end_prefix(world, end) + record.id.encode()] = b""


def _of_end(reader: Reader, world: str, belief_id: str) -> set[str]:
    prefix = _end_prefix(world, belief_id)
    return {key[len(prefix) :].decode() for key, _ in reader.scan(prefix)}


def on_belief(
    reader: Reader, world: str, change: BeliefChanged, edges: list[BeliefEdge]
) -> Writes:
    """Record what a belief change does to contradictions. Its ``split`` is a
    function of the belief as it now stands: open while its posterior is flagged
    ``contradicted`` by its own evidence (opened by the item whose recording made
    the current split, :func:`model.split_opening`), and no record at all once it
    is not (so the order its evidence arrived in leaves no trace). A closed belief
    dissolves every open contradiction it is an end of (``edges``: the edges
    touching it)."""
    belief = change.belief
    writes: Writes = {}
    sid = split_id(world, belief.id)
    held = _load(reader, world, sid)
    if belief.status != "active":
        at = belief.valid_until or belief.updated_at
        why = f"belief {belief.id} was {belief.status}"
        ids = {sid} | {pair_id(world, e) for e in edges if e.type == "contradicts"}
        ids |= _of_end(reader, world, belief.id)  # an edge removed since included
        for cid in sorted(ids):
            record = held if cid == sid else _load(reader, world, cid)
            if record is not None:
                _put(writes, world, model.dissolve(record, at, belief.version, why))
        return writes
    if belief.confidence is None or "contradicted" not in belief.flags:
        if held is not None:
            writes[record_key(world, sid)] = None
            writes[_end_prefix(world, belief.id) + sid.encode()] = None
        return writes
    record = _split_record(world, change, held)
    if record != held:
        _put(writes, world, record)
    return writes


def _split_record(
    world: str, change: BeliefChanged, held: Contradiction | None = None
) -> Contradiction:
    """The open ``split`` of a belief flagged ``contradicted``: opened by the item
    whose recording made the current split (the change itself when no item did,
    e.g. a rival answer's), its strength the minority's share now."""
    belief = change.belief
    added = next((e for e in change.evidence if e.recorded_seq == belief.version), None)
    before = (
        None
        if held is None or held.opened_at is None
        else (held.opened_at, held.opened_seq)
    )
    item = model.split_opening(change.evidence, change.trust, after=added, held=before)
    support, refute = posterior.sides(change.evidence, change.trust, belief.updated_at)
    return model.opened(
        world,
        "split",
        (belief.id,),
        strength=model.split_strength(support, refute),
        trace=(belief.id,),
        at=belief.updated_at if item is None else item.recorded_at or item.observed_at,
        seq=belief.version if item is None else item.recorded_seq,
    )


def on_edge(
    reader: Reader,
    world: str,
    edge: BeliefEdge,
    between: list[BeliefEdge],
    held_ends: dict[str, Belief | None],
) -> Writes:
    """Record what a ``contradicts`` edge change does: linked, it opens the pair's
    contradiction (or reopens a dissolved one, or updates its strength); removed,
    it dissolves it once no contradicts edge is left between the two. ``between``:
    the pair's contradicts edges as they stand after this change; ``held_ends``: the
    two beliefs as the replica holds them (an end already closed dissolves it at
    once, at the same event its own closure would have)."""
    if edge.type != "contradicts":
        return {}
    writes: Writes = {}
    cid = pair_id(world, edge)
    held = _load(reader, world, cid)
    live = sorted((e for e in between if not e.removed), key=lambda e: e.id)
    at = edge.at or _EPOCH
    ends = tuple(sorted((edge.source, edge.target)))
    if not live:
        if held is not None:
            why = f"edge {edge.id} was removed"
            held = msgspec.structs.replace(held, trace=ends)  # no edge left
            _put(writes, world, model.dissolve(held, at, edge.version, why))
        return writes
    strength = max(e.confidence for e in live)
    trace = (*ends, *(e.id for e in live))
    # Reopened only once every edge was removed: one dissolved by a closed end
    # stays so, whatever the order its end's closure and the edge arrived in.
    if held is None or (held.status == "dissolved" and held.trace == ends):
        held = model.opened(
            world,
            "edge",
            (edge.source, edge.target),
            strength=strength,
            trace=trace,
            at=at,
            seq=edge.version,
        )
    else:
        held = msgspec.structs.replace(held, strength=strength, trace=trace)
    for end in sorted(held_ends):
        belief = held_ends[end]
        if belief is not None and belief.status != "active":
            when = belief.valid_until or belief.updated_at
            held = model.dissolve(
                held, when, belief.version, f"belief {end} was {belief.status}"
            )
    _put(writes, world, held)
    return writes


def apply_resolution(
    reader: Reader, change: ContradictionResolved, world: str
) -> Writes:
    """Keep a resolution under its sequence; :func:`lookup` folds it in."""
    key = (
        _resolution_prefix(world, change.contradiction_id)
        + f"{change.seq:012d}".encode()
    )
    if reader.get(key) is not None:
        return {}
    return {key: encode(change)}


def _resolutions(reader: Reader, world: str, cid: str) -> list[ContradictionResolved]:
    prefix = _resolution_prefix(world, cid)
    return [_RESOLUTION.decode(raw) for _, raw in reader.scan(prefix)]


def lookup(
    reader: Reader,
    world: str,
    contradiction_id: str,
    *,
    at: datetime | None = None,
    as_of: datetime | None = None,
) -> Contradiction | None:
    """The contradiction as reported: its lifecycle as of recorded time ``as_of``;
    None if it was unknown then or, with valid time ``at``, opened after ``at``."""
    record = _load(reader, world, contradiction_id)
    if record is None:
        return None
    found = model.lifecycle(
        record, _resolutions(reader, world, contradiction_id), as_of
    )
    if found is None or (
        at is not None and found.opened_at is not None and found.opened_at > at
    ):
        return None
    return found


def _visible(
    record: Contradiction, at: datetime | None, as_of: datetime | None
) -> Contradiction | None:
    found = model.lifecycle(record, (), as_of)
    if found is None or (
        at is not None and found.opened_at is not None and found.opened_at > at
    ):
        return None
    return found


def edge_contradiction(
    reader: Reader,
    world: str,
    edge: BeliefEdge,
    *,
    at: datetime | None = None,
    as_of: datetime | None = None,
) -> Contradiction | None:
    """The contradiction a live ``contradicts`` edge opened, as :func:`lookup`
    reports it (for an edge a replica held before records were kept: opened by
    the edge's last write)."""
    if edge.type != "contradicts" or edge.removed:
        return None
    cid = pair_id(world, edge)
    if reader.get(record_key(world, cid)) is not None:
        return lookup(reader, world, cid, at=at, as_of=as_of)
    record = model.opened(
        world,
        "edge",
        (edge.source, edge.target),
        strength=edge.confidence,
        trace=(*sorted((edge.source, edge.target)), edge.id),
        at=edge.at or _EPOCH,
        seq=edge.version,
    )
    return _visible(record, at, as_of)


def split_contradiction(
    reader: Reader,
    world: str,
    belief: Belief,
    *,
    at: datetime | None = None,
    as_of: datetime | None = None,
) -> Contradiction | None:
    """The split contradiction of ``belief``, as :func:`lookup` reports it (for a
    belief a replica held before records were kept, flagged ``contradicted`` by
    its own evidence: opened by its last change)."""
    cid = split_id(world, belief.id)
    raw = reader.get(f"belief/{world}/{belief.id}".encode())
    stored = None if raw is None else _BELIEF.decode(raw)
    if as_of is not None and stored is not None:
        # As of a time before its last change: the split of its evidence then (a
        # record is kept only while the belief is split, so it is derived again).
        then = clocks.stored_then(reader, world, stored, as_of)
        if then is None:
            return None
        if then is not stored:
            if (
                then.belief.confidence is None
                or "contradicted" not in then.belief.flags
            ):
                return None
            record = _split_record(world, then)
            b = then.belief
            if b.status != "active":  # closed by then: its splits dissolved
                why = f"belief {b.id} was {b.status}"
                record = model.dissolve(record, b.valid_until or b.updated_at, 0, why)
            found = model.lifecycle(record, _resolutions(reader, world, cid), as_of)
            if found is None or (
                at is not None and found.opened_at is not None and found.opened_at > at
            ):
                return None
            return found
    if reader.get(record_key(world, cid)) is not None:
        return lookup(reader, world, cid, at=at, as_of=as_of)
    if stored is None:
        return None
    if stored.belief.confidence is None or "contradicted" not in stored.belief.flags:
        return None
    record = _split_record(world, stored)
    return _visible(record, at, as_of)


def disputes(
    reader: Reader,
    world: str,
    belief: Belief,
    edges: list[BeliefEdge],
    *,
    at: datetime | None = None,
    as_of: datetime | None = None,
) -> tuple[list[Contradiction], list[Contradiction]]:
    """The contradictions ``belief`` is an end of, visible at the read's clocks:
    (open ones, resolved ones)."""
    found: dict[str, Contradiction] = {}
    split = split_contradiction(reader, world, belief, at=at, as_of=as_of)
    if split is not None:
        found[split.id] = split
    for e in sorted(edges, key=lambda e: e.id):
        c = edge_contradiction(reader, world, e, at=at, as_of=as_of)
        if c is not None:
            found.setdefault(c.id, c)
    ordered = [found[cid] for cid in sorted(found)]
    return (
        [c for c in ordered if c.status == "open"],
        [c for c in ordered if c.status == "resolved"],
    )


def missing(reader: Reader) -> Writes:
    """The records a replica written before they were kept lacks (the start-up
    upgrade): each live ``contradicts`` edge opened by its last write, each active
    belief flagged ``contradicted`` by its own evidence opened by its last change,
    dissolved at once where an end is already closed. One pass over the edges and
    the belief records."""
    writes: Writes = {}
    overlay = Overlay(reader, writes)
    for key, raw in reader.scan(b"bedge/"):
        edge = _EDGE.decode(raw)
        world = key.decode().split("/", 2)[1]
        if edge.type != "contradicts" or edge.removed:
            continue
        if overlay.get(record_key(world, pair_id(world, edge))) is not None:
            continue
        ends = {}
        for end in (edge.source, edge.target):
            held = reader.get(f"belief/{world}/{end}".encode())
            ends[end] = None if held is None else _BELIEF.decode(held).belief
        writes.update(on_edge(overlay, world, edge, [edge], ends))
    for key, raw in reader.scan(b"belief/"):
        world = key.decode().split("/", 2)[1]
        change = _BELIEF.decode(raw)
        belief = change.belief
        sid = split_id(world, belief.id)
        if (
            belief.status == "active"
            and "contradicted" in belief.flags
            and overlay.get(record_key(world, sid)) is None
        ):
            writes.update(on_belief(overlay, world, change, []))
    return writes


def resplit(reader: Reader) -> Writes:
    """Each open ``split`` record re-derived from its belief as it stands (the
    start-up upgrade of a replica whose splits were opened by the first split
    posterior seen and never closed): gone where the evidence is no longer split,
    else opened by the item that made the current split. One pass over the
    records."""
    writes: Writes = {}
    overlay = Overlay(reader, writes)
    for key, raw in reader.scan(b"contra/"):
        record = _RECORD.decode(raw)
        if record.kind != "split" or record.status != "open":
            continue
        world = key.decode().split("/", 2)[1]
        held = reader.get(f"belief/{world}/{record.beliefs[0]}".encode())
        if held is not None:
            writes.update(on_belief(overlay, world, _BELIEF.decode(held), []))
    return writes


def listing(
    reader: Reader, world: str, request: ListContradictions
) -> ContradictionsReply:
    """The world's contradictions that match, by id."""
    found: list[Contradiction] = []
    total = 0
    for key, _ in reader.scan(f"contra/{world}/".encode()):
        cid = key.decode().rsplit("/", 1)[1]
        c = lookup(reader, world, cid, at=request.at, as_of=request.as_of)
        if c is None or (request.status != "all" and c.status != request.status):
            continue
        total += 1
        if len(found) < request.limit:
            found.append(c)
    return ContradictionsReply(contradictions=tuple(found), total=total)

"""Projector core for the belief state: a replica of beliefs (with their evidence) and
belief edges, read at a clock the caller passes in. It selects, orders and bounds;
every number comes from :mod:`worldline.actors.belief_model.posterior`.

State keys: ``belief/<w>/<id>`` -> ``BeliefChanged`` (belief, evidence, trust);
``bedge/<w>/<id>`` -> ``BeliefEdge``; ``bclock/<w>`` -> the newest ``updated_at`` of
any belief change applied (the world's clock).

A read without ``at`` is read at one clock for the whole answer, the world's clock
(:func:`world_clock`): the same for ``get``, ``list`` and ``read``, and a function
of the replica's state only, so a reply is the same whenever it is asked for, and
two beliefs with the same evidence read the same whatever order they were loaded in
(docs/belief-math.md, "Two time axes"). Decision views without ``at`` (``before``,
standing views) keep the stored readings.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import msgspec

from worldline.actors.belief_model import contradictions as contra_model
from worldline.actors.belief_model import embedding, posterior
from worldline.actors.belief_model.posterior import UNCERTAIN_SD
from worldline.actors.projector import (
    answer_type,
    edge_trace,
    history,
    index,
    lexical,
    relevance,
    slots,
)
from worldline.actors.projector import contradictions as contra
from worldline.actors.projector import worldview as worldview_model
from worldline.actors.projector.clocks import (
    Reads,
    as_of,
    at_clock,
    clock_key,
    world_clock,
)
from worldline.actors.runtime.memory import Overlay
from worldline.protocols.beliefs import BeliefEdge, Contradiction, Evidence
from worldline.protocols.messages import (
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    BeliefReply,
    encode,
)

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Context, Reader
    from worldline.protocols.messages import AgentView
    from worldline.protocols.world import WorldDecl

__all__ = [
    "apply_belief",
    "apply_edge",
    "as_of",
    "belief_edges",
    "clock_key",
    "contradictions",
    "evidence",
    "get",
    "visible",
    "with_evidence",
    "world_beliefs",
    "world_clock",
]

_RECORD = msgspec.msgpack.Decoder(BeliefChanged)
_CLOCK = msgspec.msgpack.Decoder(datetime)
_EDGE = msgspec.msgpack.Decoder(BeliefEdge)
_Reads = Reads  # pages and search read through it
_at_clock = at_clock
LOAD_BEARING: int = 2  # beliefs resting on it (depends_on, derived_from)


def _key(world: str, belief_id: str) -> bytes:
    return f"belief/{world}/{belief_id}".encode()


def _edge_key(world: str, edge_id: str) -> bytes:
    return f"bedge/{world}/{edge_id}".encode()


def apply_belief(
    reader: Reader, change: BeliefChanged, ctx: Context
) -> dict[bytes, bytes | None]:
    """Keep the newest version of the belief (and its evidence), and its card and
    ranks in the index."""
    key = _key(ctx.world, change.belief.id)
    raw = reader.get(key)
    before = None if raw is None else history.held(raw)
    if before is not None and before.belief.version >= change.belief.version:
        return {}
    writes: dict[bytes, bytes | None] = {key: encode(change)}
    clock = clock_key(ctx.world)
    held_clock = reader.get(clock)
    if held_clock is None or _CLOCK.decode(held_clock) < change.belief.updated_at:
        writes[clock] = msgspec.msgpack.encode(change.belief.updated_at)
    touching = _touching(reader, ctx.world, "from", change.belief.id) + _touching(
        reader, ctx.world, "to", change.belief.id
    )
    writes.update(contra.on_belief(reader, ctx.world, change, touching))
    writes.update(slots.index_writes(ctx.world, change.belief))
    # A belief change writes no edge: the edges touching it are still ``touching``.
    vectors = ctx.batch_prepared if isinstance(ctx.batch_prepared, dict) else None
    found = change.evidence  # its contexts give the card its near terms
    _reindex(reader, ctx.world, change.belief, writes, touching, vectors, found)
    # Last, so the index's reads through ``writes`` need not step over them.
    writes.update(history.writes(reader, ctx.world, change, before))  # ``as_of``
    return writes


def _reindex(
    reader: Reader,
    world: str,
    belief: Belief,
    writes: dict[bytes, bytes | None],
    edges: list[BeliefEdge] | None = None,
    vectors: dict[str, bytes] | None = None,
    evidence: list[Evidence] | None = None,
) -> None:
    """Write ``belief``'s card and ranks (``edges``: those touching it, when the
    caller has them as ``writes`` leave them; ``vectors``: :mod:`.vectors`;
    ``evidence``: the belief's, for the card's near terms, None to keep them)."""
    overlay = Overlay(reader, writes)
    if edges is None:
        edges = _touching(overlay, world, "from", belief.id) + _touching(
            overlay, world, "to", belief.id
        )
    weight = posterior.local_influence(belief.id, edges)
    index.index_writes(overlay, world, belief, weight, writes, vectors, evidence)


def apply_edge(
    reader: Reader, change: BeliefEdgeChanged, ctx: Context
) -> dict[bytes, bytes | None]:
    """Keep the newest version of the edge, and index it by both ends so a read
    walks only the edges that touch the beliefs it reads."""
    key = _edge_key(ctx.world, change.edge.id)
    raw = reader.get(key)
    writes: dict[bytes, bytes | None] = {}
    if raw is not None:
        old = _EDGE.decode(raw)
        # (version, posterior_seq): a new posterior of the same link is newer too.
        new = change.edge
        if (old.version, old.posterior_seq) >= (new.version, new.posterior_seq):
            return {}
        writes[_end_key(ctx.world, "from", old.source, old.id)] = None
        writes[_end_key(ctx.world, "to", old.target, old.id)] = None
    edge = change.edge
    writes[key] = encode(edge)
    writes.update(edge_trace.evidence_writes(ctx.world, change))
    if not edge.removed:
        writes[_end_key(ctx.world, "from", edge.source, edge.id)] = edge.id.encode()
        writes[_end_key(ctx.world, "to", edge.target, edge.id)] = edge.id.encode()
    if edge.type == "contradicts":
        overlay = Overlay(reader, writes)
        pair = {edge.source, edge.target}
        between = [
            e
            for e in _touching(overlay, ctx.world, "from", edge.source)
            + _touching(overlay, ctx.world, "to", edge.source)
            if e.type == "contradicts" and {e.source, e.target} == pair
        ]
        if edge.removed:
            between.append(edge)  # the removed one is no longer indexed by its ends
        now = {end: _held(reader, ctx.world, end) for end in sorted(pair)}
        writes.update(contra.on_edge(reader, ctx.world, edge, between, now))
    # The ends' local influence moved: re-rank them.
    ends = {edge.source, edge.target}
    if raw is not None:
        ends |= {old.source, old.target}
    for end in sorted(ends):
        held = index.card(Overlay(reader, writes), ctx.world, end)
        if held is not None:
            _reindex(reader, ctx.world, held.belief, writes)
    return writes


def _end_prefix(world: str, end: str, belief_id: str) -> str:
    # Two ids in one key: each bounded (index.key_part), so the key fits LMDB.
    return f"bedge{end}/{world}/{index.key_part(belief_id, index.ID_BYTES)}/"


def _end_key(world: str, end: str, belief_id: str, edge_id: str) -> bytes:
    edge = index.key_part(edge_id, index.ID_BYTES)
    return f"{_end_prefix(world, end, belief_id)}{edge}".encode()


def _touching(reader: Reader, world: str, end: str, belief_id: str) -> list[BeliefEdge]:
    """Edges whose ``end`` ("from" or "to") is ``belief_id``, from the index (the
    value holds the edge id; empty in keys written before, which end with it)."""
    prefix = _end_prefix(world, end, belief_id).encode()
    found = []
    for key, value in reader.scan(prefix):
        edge_id = value.decode() if value else key[len(prefix) :].decode()
        raw = reader.get(_edge_key(world, edge_id))
        if raw is not None:
            found.append(_EDGE.decode(raw))
    return found


def _held(reader: Reader, world: str, belief_id: str) -> Belief | None:
    raw = reader.get(_key(world, belief_id))
    return None if raw is None else _RECORD.decode(raw).belief


def _records(reader: Reader, world: str) -> list[BeliefChanged]:
    return [_RECORD.decode(raw) for _, raw in reader.scan(f"belief/{world}/".encode())]


def belief_edges(reader: Reader, world: str) -> list[BeliefEdge]:
    """The world's belief edges that are not removed."""
    found = [_EDGE.decode(raw) for _, raw in reader.scan(f"bedge/{world}/".encode())]
    return [e for e in found if not e.removed]


MAX_CLOSURE: int = 10_000  # dependency closure walked for one belief's effective value


def _annotate(reads: _Reads, belief_id: str) -> Belief | None:
    """The belief at the clock, with what its neighbourhood says: effective
    confidence through its ``depends_on`` closure, contradiction by explicit edge,
    supersession, and the load-bearing / risky-assumption labels (two or more
    beliefs rest on it). Only edges touching the walked beliefs are read."""
    belief = reads.belief(belief_id)
    if belief is None:
        return None
    world, reader = reads.world, reads.reader
    outgoing = reads.edges(_touching(reader, world, "from", belief_id))
    incoming = reads.edges(_touching(reader, world, "to", belief_id))
    closure: list[BeliefEdge] = []
    seen = {belief_id}
    frontier = [e for e in outgoing if e.type == "depends_on"]
    while frontier and len(seen) < MAX_CLOSURE:
        edge = frontier.pop()
        closure.append(edge)
        if edge.target not in seen:
            seen.add(edge.target)
            frontier += [
                e
                for e in reads.edges(_touching(reader, world, "from", edge.target))
                if e.type == "depends_on"
            ]
    scored = {}
    for node in sorted(seen):
        b = reads.belief(node)
        if b is not None and b.confidence is not None and b.status == "active":
            scored[node] = b.confidence
    effective = posterior.effective_confidence(scored, closure).get(belief_id)
    flags = list(belief.flags)
    opened, _ = contra.disputes(
        reader, world, belief, outgoing + incoming, at=reads.at, as_of=reads.as_of
    )
    open_ids = {c.id for c in opened}
    uncertainty = belief.uncertainty
    if opened:
        # An open contradiction widens the uncertainty of its ends and keeps them
        # from being stable (docs/belief-math.md, "Contradictions").
        uncertainty = contra_model.widened(
            uncertainty,
            belief.confidence,
            [contra_model.disagreement(c) for c in opened],
        )
        flags = [f for f in flags if f != "stable"]
        if (
            uncertainty is not None
            and uncertainty >= UNCERTAIN_SD
            and "uncertain" not in flags
        ):
            flags.append("uncertain")
    if "contradicted" not in flags and any(
        e.type == "contradicts"
        and e.confidence >= 0.5
        and contra.pair_id(world, e) in open_ids
        for e in outgoing + incoming
    ):
        # A contradicted claim is disputed, and a disputed claim is never stable.
        flags = [f for f in flags if f != "stable"]
        flags.insert(flags.index("uncertain") if "uncertain" in flags else len(flags),
                     "contradicted")  # fmt: skip
    dependents = sum(e.type in ("depends_on", "derived_from") for e in incoming)
    label = belief.label
    if not label and dependents >= LOAD_BEARING:
        label = "load-bearing"
        if belief.type == "assumption" and "uncertain" in flags:
            label = "risky-assumption"
    until = belief.valid_until
    superseded = [e.at for e in incoming if e.type == "supersedes" and e.at]
    if until is None and superseded:
        until = min(t for t in superseded if t is not None)
    return msgspec.structs.replace(
        belief,
        flags=tuple(flags),
        label=label,
        effective_confidence=effective,
        valid_until=until,
        uncertainty=uncertainty,
    )


def world_beliefs(
    reader: Reader, world: str, at: datetime | None, as_of: datetime | None = None
) -> list[Belief]:
    """Every belief of ``world`` as ``get`` reads it at ``at`` (see :func:`visible`)."""
    reads = _Reads(reader, world, at, as_of=as_of)
    ids = [key.decode().rsplit("/", 1)[1] for key, _ in reader.scan(_key(world, ""))]
    return [b for i in ids if (b := visible(reads, i)) is not None]


def visible(reads: _Reads, belief_id: str) -> Belief | None:
    """The belief as ``get``, ``list`` and ``read`` report it: annotated at the
    clock; with a caller's ``at`` (valid time) or ``as_of`` (recorded time), None
    if it was created after either, else with the status it had then."""
    belief = _annotate(reads, belief_id)
    if belief is None:
        return None
    for clock in (reads.at, reads.as_of):
        if clock is not None:
            if belief.created_at > clock:
                return None
            belief = as_of(belief, clock)
    return belief


def get(
    reader: Reader,
    world: str,
    belief_id: str,
    at: datetime | None,
    as_of_time: datetime | None = None,
) -> BeliefReply:
    """One belief, annotated, reading only its own neighbourhood."""
    reads = _Reads(reader, world, at, as_of=as_of_time)
    return BeliefReply(belief=visible(reads, belief_id))


def with_evidence(
    reader: Reader,
    world: str,
    belief_ids: list[str],
    at: datetime | None,
    as_of: datetime | None = None,
) -> list[tuple[Belief, list[Evidence]]]:
    """Each belief as ``get`` reports it (at one clock for all) with the evidence
    held for it (as of ``as_of``), each record read once; ids not visible are left
    out."""
    reads = _Reads(reader, world, at, as_of=as_of)
    found = []
    for belief_id in belief_ids:
        belief = visible(reads, belief_id)
        if belief is not None:
            found.append((belief, reads.evidence.get(belief_id, [])))
    return found


def evidence(reader: Reader, world: str, belief_id: str) -> list[Evidence]:
    """The evidence recorded for one belief, oldest first."""
    raw = reader.get(_key(world, belief_id))
    return [] if raw is None else _RECORD.decode(raw).evidence


def contradictions(
    reader: Reader,
    world: str,
    beliefs: list[Belief],
    at: datetime | None = None,
    as_of: datetime | None = None,
) -> list[Contradiction]:
    """The contradictions among ``beliefs`` (explicit ``contradicts`` edges and
    split evidence), open or resolved, with their ids and lifecycle."""
    edges = belief_edges(reader, world)
    return _contradictions(reader, world, beliefs, edges, at, as_of=as_of, settled=True)


def _contradictions(
    reader: Reader,
    world: str,
    beliefs: list[Belief],
    edges: list[BeliefEdge],
    at: datetime | None,
    *,
    dated: bool = True,
    as_of: datetime | None = None,
    settled: bool = False,
) -> list[Contradiction]:
    """The recorded contradictions whose ends are among the active ``beliefs``
    (edges: among ``edges``), as of ``as_of`` and opened by ``at`` (when
    ``dated``): open ones, and resolved ones too when ``settled``. Their status
    is the record's, whatever the clock (docs/belief-math.md, "Contradictions")."""
    active = {b.id for b in beliefs if b.status == "active"}
    valid = at if dated else None
    keep = ("open", "resolved") if settled else ("open",)
    found: dict[str, Contradiction] = {}
    for e in sorted(edges, key=lambda e: e.id):
        if e.type == "contradicts" and e.source in active and e.target in active:
            c = contra.edge_contradiction(reader, world, e, at=valid, as_of=as_of)
            if c is not None and c.status in keep:
                found.setdefault(c.id, c)
    for b in beliefs:
        if b.id in active:
            c = contra.split_contradiction(reader, world, b, at=valid, as_of=as_of)
            if c is not None and c.status in keep:
                found.setdefault(c.id, c)
    return list(found.values())


def decision_scene(
    reader: Reader,
    world: str,
    *,
    decl: WorldDecl | None,
    view: AgentView | None,
    query: str,
    focus: str,
    at: datetime | None,
    postings: int = lexical.POSTINGS,
) -> worldview_model.Scene:
    """The scene a decision view is projected from, read from the index: a bounded
    candidate set (see :func:`worldline.actors.projector.index.candidates`), ranked by
    the cards' stored readings, then the survivors read at the clock ``at`` and
    projected again. What it costs does not grow with the number of beliefs."""
    cards = index.candidates(reader, world, query, focus, postings)
    n = max(len(cards), 1)
    influence = {c.belief.id: c.weight / n for c in cards}
    semantic = relevance.is_semantic(embedding.active())
    features: relevance.Features = {
        c.belief.text: (c.terms, index.vector_of(c) if semantic else None)
        for c in cards
    }
    ids = {c.belief.id for c in cards}
    edges: dict[str, BeliefEdge] = {}
    for belief_id in sorted(ids):
        for end in ("from", "to"):
            for e in _touching(reader, world, end, belief_id):
                edges[e.id] = e
    shown = [c.belief for c in cards]
    found = _contradictions(reader, world, shown, list(edges.values()), at)
    from worldline.actors.projector import decision  # it reads beliefs too

    return decision.read_scene(
        reader,
        world,
        worldview_model.Scene(
            world=world,
            decl=decl,
            beliefs=shown,
            edges=sorted(edges.values(), key=lambda e: e.id),
            contradictions=found,
            view=view,
            influence=influence,
            features=features,
            recent=tuple(index.recent(reader, world)),
            counts=index.counts(reader, world, query, focus),
            marks=answer_type.marks(query, at, cards),
        ),
        query=query,
        focus=focus,
        at=at,
    )

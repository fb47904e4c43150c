"""The decision scene, read fast: what ``before`` and the standing views are projected
from. The same scene as :func:`worldline.actors.projector.beliefs.decision_scene`
(docs/worldview.md, "How it stays the same size"), read in fewer, cheaper steps:

- the lexical counters are read once, for the query and the focus together (the
  lexicon of each is the same either way);
- the query's best postings are kept by a threshold (the ``limit``-th best score)
  instead of sorting every posting read;
- without a semantic embedder a card is decoded without its vector (ranking reads
  none);
- a candidate's split contradiction is read (its record, or its belief record
  whole) only when a record is kept or the card says its evidence is split (the
  card holds the belief its record holds: they are written together);
- the decision view's first pass makes leaves only for what its slices keep
  (:func:`worldline.actors.projector.worldview.project`).

Nothing here embeds a card that has a vector for the active embedder; a card without
one (written during a backlog) or from another embedder is embedded as
:func:`worldline.actors.projector.index.vector_of` does (docs/benchmarks.md,
"Worldview", measures what that costs).
"""

from __future__ import annotations

import dataclasses
import heapq
from bisect import bisect_right
from itertools import compress, islice
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import msgspec

from worldline.actors.belief_model import embedding
from worldline.actors.projector import (
    answer_type,
    beliefs,
    calibration,
    graph,
    history,
    index,
    lexical,
    prompt,
    relevance,
)
from worldline.actors.projector import contradictions as contra
from worldline.actors.projector import worldview as worldview_model
from worldline.actors.projector.clocks import Reads
from worldline.protocols.beliefs import BeliefEdge
from worldline.protocols.messages import Belief, WorldviewReply

if TYPE_CHECKING:
    from datetime import datetime

    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.beliefs import Contradiction
    from worldline.protocols.messages import AgentView, Before
    from worldline.protocols.world import WorldDecl

__all__ = ["before", "candidates", "decision_scene", "matches"]


class _Ranked(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag_field="kind",
    tag=index.Card.__struct_config__.tag,
):
    """A card as ranking reads it without a semantic embedder: no vector."""

    belief: Belief
    weight: float
    stems: tuple[str, ...]
    length: int = -1
    near: tuple[str, ...] = ()
    near_length: int = 0
    said: str = ""
    offers: tuple[str, ...] | None = None

    @property
    def terms(self) -> lexical.Terms:
        if self.length < 0:
            return lexical.Terms(self.stems, self.length)
        return lexical.Terms(self.stems + self.near, self.length + self.near_length)


_RANKED = msgspec.msgpack.Decoder(_Ranked)
_FULL = msgspec.msgpack.Decoder(index.Card)
_EDGE = msgspec.msgpack.Decoder(BeliefEdge)


def before(reader: Reader, request: Before, world: str) -> WorldviewReply:
    """The ``before`` RPC's answer (what :func:`worldline.actors.projector.core.serve`
    answers for a ``Before``), from the scene :func:`decision_scene` reads."""
    from worldline.actors.projector import views  # views reads scenes too

    decl = views.declaration(reader, world)
    agent_view = views.build_view(reader, world, request.agent, standing=False)
    scene = decision_scene(
        reader,
        world,
        decl=decl,
        view=agent_view,
        query=request.query,
        focus=views.focus_of(decl, agent_view) if decl else "",
        at=request.at,
        as_of=request.as_of,
    )
    fitted = calibration.calibrator(reader, world)
    if fitted.method == "identity":
        view = worldview_model.project(scene, request.agent, request.query, request.at)
        return WorldviewReply(view=view)
    # Enough of the world's beliefs were resolved to recalibrate: the view shows
    # the calibrated confidence and says so.
    scene = calibration.calibrated(scene, fitted)
    view = worldview_model.project(scene, request.agent, request.query, request.at)
    said = f"{fitted.method} on {fitted.records} resolved beliefs"
    view = prompt.fit(msgspec.structs.replace(view, calibration=said))
    return WorldviewReply(view=view)


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
    as_of: datetime | None = None,
) -> worldview_model.Scene:
    """The scene a decision view is projected from (the same as
    :func:`worldline.actors.projector.beliefs.decision_scene`): a bounded candidate
    set from the index, ranked by the cards' stored readings, then the survivors
    read at the clock ``at`` (as known at recorded time ``as_of``: ranked from
    today's index, each belief shown as it stood then, none created after). What it
    costs does not grow with the number of beliefs."""
    counts = index.counts(reader, world, query, focus)
    semantic = relevance.is_semantic(embedding.active())
    cards = candidates(reader, world, query, focus, postings, counts, full=semantic)
    if as_of is not None:  # active then, closed since: no candidate now
        held = {c.belief.id for c in cards}
        for closed in history.closed_since(reader, world, as_of):
            card = None if closed in held else index.card(reader, world, closed)
            if card is not None:
                cards.append(card)
    n = max(len(cards), 1)
    influence = {c.belief.id: c.weight / n for c in cards}
    features: relevance.Features = {
        c.belief.text: (
            c.terms,
            index.vector_of(c) if semantic and isinstance(c, index.Card) else None,
        )
        for c in cards
    }
    edges = _touching(reader, world, {c.belief.id for c in cards})
    shown = [c.belief for c in cards]
    found = _contradictions(reader, world, shown, list(edges.values()), at, as_of)
    return read_scene(
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
            counts=counts,
            marks=answer_type.marks(query, at, cards),
        ),
        query=query,
        focus=focus,
        at=at,
        as_of=as_of,
    )


def _touching(reader: Reader, world: str, ids: set[str]) -> dict[str, BeliefEdge]:
    """The edges with an end among ``ids``, by id (``beliefs._touching`` of each)."""
    edges: dict[str, BeliefEdge] = {}
    for belief_id in sorted(ids):
        for end in ("from", "to"):
            prefix = beliefs._end_prefix(world, end, belief_id).encode()
            for key, value in reader.scan(prefix):
                edge_id = value.decode() if value else key[len(prefix) :].decode()
                raw = reader.get(beliefs._edge_key(world, edge_id))
                if raw is not None:
                    edge = _EDGE.decode(raw)
                    edges[edge.id] = edge
    return edges


def candidates(
    reader: Reader,
    world: str,
    query: str,
    focus: str,
    postings: int = lexical.POSTINGS,
    counts: lexical.Counts | None = None,
    *,
    full: bool = True,
) -> list[Any]:
    """The cards :func:`worldline.actors.projector.index.candidates` returns, in its
    order (``counts``: the world's counters for the query and the focus, if read
    already; ``full``: decode each card whole, else without its vector)."""
    if counts is None:
        counts = index.counts(reader, world, query, focus)
    ids: dict[str, None] = {}
    ids.update(dict.fromkeys(matches(reader, world, counts, query, index.MATCHES,
                                     postings)))  # fmt: skip
    if focus.strip() and focus != query:
        focused = matches(
            reader, world, counts, focus, index.FOCUS_MATCHES, index.FOCUS_POSTINGS
        )
        ids.update(dict.fromkeys(focused))
    w = index.key_part(world, index.WORLD_BYTES)
    for prefix, limit in (
        (f"rw/{w}/", index.TOP),
        (f"rm/{w}/", index.TOP),
        (f"goal/{w}/", index.GOALS),
        (f"recent/{w}/", index.RECENT),
    ):
        ids.update(dict.fromkeys(_first(reader, prefix.encode(), limit)))
    decoder: msgspec.msgpack.Decoder[Any] = _FULL if full else _RANKED
    found = []
    for i in ids:
        raw = reader.get(index._card_key(world, i))
        if raw is not None:
            found.append(decoder.decode(raw))
    return found


def _first(reader: Reader, prefix: bytes, limit: int) -> list[str]:
    found = []
    for key, value in islice(reader.scan(prefix), limit):
        # Keys written before ranks held their id have an empty value; their id
        # is the key's last part.
        found.append(value.decode() if value else key.decode().rsplit("/", 1)[1])
    return found


def matches(
    reader: Reader,
    world: str,
    counts: lexical.Counts,
    text: str,
    limit: int,
    budget: int = lexical.POSTINGS,
) -> list[str]:
    """:func:`worldline.actors.projector.index.matches` of ``text`` from the
    counters ``counts`` (which must count ``text``'s terms): the same ids in the
    same order. The postings a term reads are scored a length at a time (they come
    shortest first, and all of one length weigh the same), and the best ``limit``
    are found by a threshold rather than a full sort."""
    lexicon = counts.lexicon(text)
    w = index.key_part(world, index.WORLD_BYTES)
    order = sorted(
        (frequency, term, key_part)
        for term, (key_part, frequency) in lexicon.postings.items()
        if frequency > 0
    )
    scores: dict[bytes, float] = {}
    left = budget
    digits = lexical._LENGTH_DIGITS
    for n, (_, term, key_part) in enumerate(order):
        share = max(min(lexical.MIN_PER_TERM, budget), left // (len(order) - n))
        idf = lexicon.idf[term]
        prefix = f"lex/{w}/{key_part}/".encode()
        at = len(prefix) + digits
        # At least one posting a term, as lexical.matches reads.
        postings = list(islice(reader.scan(prefix), max(share, 1)))
        keys = list(map(itemgetter(0), postings))
        ids = list(map(itemgetter(1), postings))
        low = 0
        while low < len(keys):
            length = keys[low][:at]  # the prefix and one length: a run of postings
            high = bisect_right(keys, length + b"/\xff", low)
            _add(scores, ids[low:high], idf * lexicon._gain(int(length[-digits:])))
            low = high
        left = max(0, left - len(postings))
    return [i.decode() for i in _best(scores, limit)]


def _add(scores: dict[bytes, float], ids: list[bytes], weight: float) -> None:
    """``scores[i] = scores.get(i, 0.0) + weight`` for each of ``ids`` (distinct:
    one term's postings of one length), the ids new to ``scores`` in one step."""
    held = scores.keys() & ids
    for i in held:
        scores[i] += weight
    scores.update(dict.fromkeys(set(ids) - held if held else ids, weight))


def _best(scores: dict[bytes, float], limit: int) -> list[bytes]:
    """The ``limit`` best by score, ties by id: ``sorted(...)[:limit]`` of the
    entries at or above the ``limit``-th best score (all the others rank below)."""
    if limit <= 0:
        return []
    if len(scores) > limit:
        floor = heapq.nlargest(limit, scores.values())[-1]
        kept = compress(scores.keys(), map(floor.__le__, scores.values()))
        entries = [(i, scores[i]) for i in kept]
    else:
        entries = list(scores.items())
    entries.sort(key=lambda item: (-item[1], item[0]))
    return [i for i, _ in entries[:limit]]


def _contradictions(
    reader: Reader,
    world: str,
    shown: list[Belief],
    edges: list[BeliefEdge],
    at: datetime | None,
    as_of: datetime | None = None,
) -> list[Contradiction]:
    """The open contradictions among ``shown`` opened by ``at`` (``beliefs.
    _contradictions`` with its defaults), a split one read only for a belief with
    a record kept or whose evidence is split (:func:`_maybe_split`)."""
    active = {b.id for b in shown if b.status == "active"}
    found: dict[str, Contradiction] = {}
    for e in sorted(edges, key=lambda e: e.id):
        if e.type == "contradicts" and e.source in active and e.target in active:
            c = contra.edge_contradiction(reader, world, e, at=at, as_of=as_of)
            if c is not None and c.status == "open":
                found.setdefault(c.id, c)
    for b in shown:
        if b.id in active and (as_of is not None or _maybe_split(reader, world, b)):
            c = contra.split_contradiction(reader, world, b, at=at, as_of=as_of)
            if c is not None and c.status == "open":
                found.setdefault(c.id, c)
    return list(found.values())


def _maybe_split(reader: Reader, world: str, belief: Belief) -> bool:
    """Whether :func:`~worldline.actors.projector.contradictions.split_contradiction`
    can find one for ``belief`` (a card's: the belief its record holds, as the
    record and the card are written together): a record is kept, or the belief's
    evidence is split (a confidence, flagged contradicted)."""
    record = contra.record_key(world, contra.split_id(world, belief.id))
    if reader.get(record) is not None:
        return True
    return belief.confidence is not None and "contradicted" in belief.flags


def read_scene(
    reader: Reader,
    world: str,
    first: worldview_model.Scene,
    *,
    query: str,
    focus: str,
    at: datetime | None,
    as_of: datetime | None = None,
) -> worldview_model.Scene:
    """``first`` (the candidates as their cards hold them) with the beliefs near
    its goals marked, ranked, and the survivors read at the clock ``at``: the end
    of every decision scene (here and :func:`.beliefs.decision_scene`)."""
    goals = {b.id for b in first.beliefs if b.type == "goal"}
    near = frozenset(
        end
        for e in first.edges
        if not e.removed and {e.source, e.target} & goals
        for end in (e.source, e.target)
        if end not in goals
    )
    first = worldview_model.scaled(dataclasses.replace(first, near=near), query, at)
    first = graph.walked(reader, world, first, query, focus)  # the graph channel
    kept = worldview_model.kept_beliefs(first, query, focus)
    # Without ``at``, the stored readings: a standing view changes only when a
    # belief it shows does (docs/worldview.md), not whenever the world's clock moves.
    reads = Reads(reader, world, at, one_clock=False, as_of=as_of)
    survivors = [
        b for i in sorted(kept) if (b := beliefs._annotate(reads, i)) is not None
    ]
    return dataclasses.replace(
        first, beliefs=[b for b in survivors if b.status == "active"]
    )

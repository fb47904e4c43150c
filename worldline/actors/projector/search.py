"""``search``: the active beliefs that best answer a query, best first, with each
hit's score by channel and the evidence behind it.

As of a recorded time (``as_of``) each hit is the belief as the world knew it then
(:mod:`worldline.actors.projector.history`), beliefs closed since are candidates
too, and one not created by then is no hit; the ranking itself (texts, influence,
the lexical counters) is read from the current index.

The ranking is the worldview's (docs/worldview.md) without an agent: the pool is the
index's best lexical matches of the query (and, with a semantic embedder, the most
influential beliefs, which the semantic channel may rank); a belief's value is its
query relevance (the mean of its query channels) lifted by its influence alone
(:func:`worldline.actors.projector.relevance.fused`). A belief with no query evidence
in any channel is not a hit. Ties go by id, so the order is a pure function of the
replica's state and the request.

Pages: the cursor holds the query's digest and how many hits came before; each
page ranks again from the current state, to a depth of the hits asked so far (at
most :data:`DEPTH`), so a change between pages may move a hit across a page edge.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.belief_model import embedding
from worldline.actors.projector import beliefs, history, index, pages, relevance
from worldline.protocols.messages import RpcError, SearchHit, SearchReply

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.messages import SearchBeliefs

__all__ = ["DEPTH", "TRACE", "search"]

DEPTH: Final = 1000  # hits one query can page through
TRACE: Final = 16  # evidence named per hit
_CURSOR = msgspec.msgpack.Decoder(tuple[str, int])


def _digest(request: SearchBeliefs) -> str:
    return hashlib.sha256(f"{request.type}\0{request.query}".encode()).hexdigest()[:16]


def search(
    reader: Reader, world: str, request: SearchBeliefs
) -> SearchReply | RpcError:
    """One page of hits (see the module docstring)."""
    offset = 0
    if request.cursor:
        try:
            digest, offset = pages.decode_cursor(request.cursor, _CURSOR)
        except pages.BadCursor as exc:
            return pages.bad_cursor("search", exc)
        if digest != _digest(request) or not 0 <= offset < DEPTH:
            return pages.bad_cursor(
                "search", pages.BadCursor("it was handed out for another query")
            )
    depth = min(DEPTH, offset + request.limit)
    ranked = _ranked(reader, world, request, depth + 1)
    page = ranked[offset : offset + request.limit]
    ids = [card.belief.id for _, _, card in page]
    read = {
        b.id: (b, held)
        for b, held in beliefs.with_evidence(
            reader, world, ids, request.at, request.as_of
        )
        # As of a time, a belief closed since is shown if it was active then.
        if b.status == "active"
    }
    hits = []
    for value, channels, card in page:
        if card.belief.id not in read:
            continue
        found, held = read[card.belief.id]
        trace = tuple(f"{e.id} {e.source}" for e in held[:TRACE])
        hits.append(
            SearchHit(belief=found, score=value, channels=channels, trace=trace)
        )
    more = len(ranked) > offset + request.limit and offset + request.limit < DEPTH
    cursor = (
        pages.encode_cursor((_digest(request), offset + request.limit)) if more else ""
    )
    return SearchReply(
        hits=tuple(hits), embedder=embedding.active().id, next_cursor=cursor
    )


def _ranked(
    reader: Reader, world: str, request: SearchBeliefs, depth: int
) -> list[tuple[float, dict[str, float], index.Card]]:
    """The best ``depth`` hits: (value, channel scores, card), best first."""
    semantic = relevance.is_semantic(embedding.active())
    ids = dict.fromkeys(
        index.matches(reader, world, request.query, max(index.MATCHES, depth))
    )
    if semantic:
        ids.update(dict.fromkeys(index.influential(reader, world)))
    if request.as_of is not None:  # active then, closed since: no document now
        ids.update(dict.fromkeys(history.closed_since(reader, world, request.as_of)))
    cards = [
        c
        for i in ids
        if (c := index.card(reader, world, i)) is not None
        and (c.belief.status == "active" or request.as_of is not None)
        and (request.type is None or c.belief.type == request.type)
    ]
    features: relevance.Features = {
        c.belief.text: (c.terms, index.vector_of(c) if semantic else None)
        for c in cards
    }
    counts = index.counts(reader, world, request.query)
    judge = relevance.Relevance(request.query, "", features, counts)
    judge.calibrate(c.belief.text for c in cards)
    heaviest = max((c.weight for c in cards), default=0.0)
    ranked = []
    for c in cards:
        channels = judge.channels(c.belief.text)
        query = judge(c.belief.text)
        if query <= 0:
            continue
        influence = c.weight / heaviest if heaviest > 0 else 0.0
        value = relevance.fused(query, relevance.prior(influence, False, 0.0, False))
        channels["prior"] = round(influence, 6)
        ranked.append((round(value, 9), channels, c))
    ranked.sort(key=lambda hit: (-hit[0], hit[2].belief.id))
    return ranked[:depth]

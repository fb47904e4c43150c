"""The projector's incremental index: a small card per belief and ranked keys, kept
current by the change feed, so a decision view reads a bounded candidate set instead
of the whole store.

Per belief (active, not a goal): ``card/<w>/<id>`` (the belief without its evidence,
its local influence, its terms and length, and its embedding), ``rw/<w>/<rank>/<id>``
by influence, ``rm/<w>/<rank>/<id>`` by influence x doubt (what a move on it is
worth), and ``recent/<w>/<rank>/<id>`` by last change. Goals are listed under
``goal/<w>/<id>``. Ranks are inverted fixed-width numbers, so a forward cursor scan
reads the best first, ties by id. Every active belief, goals too, is a document of
the lexical channel (BM25 postings and counters: :mod:`.lexical`).

Ranks use :func:`worldline.actors.belief_model.posterior.local_influence`, which the
projector can keep current from the edges that touch one belief.

Keys are bounded by construction, whatever the text: LMDB refuses a key over 511 bytes
(``MDB_BAD_VALSIZE``), and one such key once made the projector retry a batch forever.
Each variable part (world, stem, belief id) longer than its budget is written as a
readable prefix, a space and a digest of the whole
(:func:`worldline.actors.runtime.keys.key_part`, shared with fusion's source index); a
space occurs in no world, stem or id, so a shortened part never equals a written-out
one. Rank keys hold their belief id as their value, so the id is read back whole.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final

import msgspec
import numpy as np

from worldline.actors.belief_model import embedding
from worldline.actors.projector import answer_type, context, lexical
from worldline.actors.runtime.keys import key_part
from worldline.protocols.messages import Belief, encode

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.beliefs import Evidence

__all__ = [
    "Card",
    "candidates",
    "card",
    "counts",
    "index_writes",
    "influential",
    "key_part",
    "matches",
    "recent",
    "vector_of",
]

TOP: Final = 32  # best by influence, and best by move value
MATCHES: Final = 64  # best lexical matches of the query
FOCUS_MATCHES: Final = 16  # best lexical matches of the agent's goals and work
FOCUS_POSTINGS: Final = 256  # postings read for them at most
# The lexical budget of an agent's standing view (its goals and work as the query),
# rebuilt for every agent after each batch that changes what it shows.
STANDING_POSTINGS: Final = 256
GOALS: Final = 32
RECENT: Final = 3  # recent changes a decision view considers
# Bytes a variable part of an index key may take before it is shortened. At most
# 7 + 64 + 1 + 64 + 1 + 13 + 1 + 128 = 279 bytes a key, well under LMDB's 511.
WORLD_BYTES: Final = 64
STEM_BYTES: Final = 64
ID_BYTES: Final = 128


class Card(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="card.v1"):
    """What ranking needs of a belief, without its evidence."""

    belief: Belief
    weight: float  # local influence
    stems: tuple[str, ...]  # distinct lexical terms (see lexical.terms)
    # float32 embedding of the text; empty when the card was written during a
    # backlog (embedded when first read instead: see :func:`vector_of`)
    vector: bytes
    # The embedder that made ``vector`` (cards written before it was recorded were
    # hashed); a card from another embedder is re-embedded when read.
    embedder: str = embedding.EMBEDDER_ID
    # In content words (lexical.terms); -1: written before the lexical channel
    # (its terms are not indexed yet: see worldline.actors.projector.upgrade).
    length: int = -1
    # The near terms: what came just before the statements it was read from
    # (worldline.actors.projector.context), and their length in content words.
    near: tuple[str, ...] = ()
    near_length: int = 0
    # The day it was first said (context.said), and the kinds of answer its text
    # offers (answer_type.kinds; None: written before they were kept).
    said: str = ""
    offers: tuple[str, ...] | None = None

    @property
    def terms(self) -> lexical.Terms:
        """Its lexical document: its own terms, then its near terms."""
        if self.length < 0:
            return lexical.Terms(self.stems, self.length)
        return lexical.Terms(self.stems + self.near, self.length + self.near_length)


_CARD = msgspec.msgpack.Decoder(Card)


def _rank(score: float) -> str:
    return f"{max(0, 10**12 - round(score * 10**6)):013d}"


def _doubt(belief: Belief) -> float:
    return 0.5 if belief.uncertainty is None else belief.uncertainty


def _w(world: str) -> str:
    return key_part(world, WORLD_BYTES)


def _id(belief_id: str) -> str:
    return key_part(belief_id, ID_BYTES)


def _card_key(world: str, belief_id: str) -> bytes:
    return f"card/{_w(world)}/{_id(belief_id)}".encode()


def card(reader: Reader, world: str, belief_id: str) -> Card | None:
    raw = reader.get(_card_key(world, belief_id))
    return None if raw is None else _CARD.decode(raw)


def vector_of(c: Card) -> np.ndarray:
    """The card's embedding in the process's embedding space (re-embedded when the
    card was written with another embedder; embedded now, to the same bits a
    stored vector has, when it was written without one)."""
    embedder = embedding.active().id
    if c.embedder != embedder:
        return embedding.embed(c.belief.text)
    if not c.vector:
        return _deferred_vector(embedder, c.belief.text)
    return np.frombuffer(c.vector, dtype=np.float32).astype(np.float64)


@functools.lru_cache(maxsize=8192)
def _deferred_vector(embedder: str, text: str) -> np.ndarray:
    """A vector a card left out, as the card would have stored it (float32, read
    back as float64), so an answer is the same bytes either way. Cached by
    embedder and text (the embedder named, so a vector never crosses embedders),
    as the next reads ask for the same top cards. Read-only: shared."""
    vector = np.frombuffer(_embedded(text), dtype=np.float32).astype(np.float64)
    vector.setflags(write=False)
    return vector


def _keys(world: str, c: Card) -> list[bytes]:
    """The card's rank keys (its postings: :func:`_document`)."""
    b = c.belief
    if b.status != "active":
        return []
    w, i = _w(world), _id(b.id)
    if b.type == "goal":
        return [f"goal/{w}/{i}".encode()]
    return [
        f"rw/{w}/{_rank(c.weight)}/{i}".encode(),
        f"rm/{w}/{_rank(c.weight * _doubt(b))}/{i}".encode(),
        f"recent/{w}/{_rank(b.updated_at.timestamp() / 1e3)}/{i}".encode(),
    ]


def _stem(stem: str) -> str:
    return key_part(stem, STEM_BYTES)


def _document(c: Card | None) -> lexical.Terms | None:
    """What the lexical channel indexes of a card: its terms, by their key parts,
    while the belief is active (None: not a document)."""
    if c is None or c.belief.status != "active" or c.length < 0:
        return None
    found = c.terms
    return lexical.Terms(tuple(map(_stem, found.distinct)), found.length)


def index_writes(
    reader: Reader,
    world: str,
    belief: Belief,
    weight: float,
    writes: dict[bytes, bytes | None],
    vectors: Mapping[str, bytes] | None = None,
    evidence: Sequence[Evidence] | None = None,
) -> None:
    """Add to ``writes`` the card and index keys of ``belief`` at ``weight``,
    replacing the keys of its previous card (``vectors``: texts the batch's
    :func:`worldline.actors.projector.vectors.prepare` step embedded already, to
    the bytes :func:`_embedded` gives; ``evidence``: the belief's, whose contexts
    give the card its near terms, :mod:`.context`; None keeps the old card's).

    Only a semantic embedder's vectors are ever read
    (:func:`worldline.actors.projector.relevance.is_semantic`): the hashing
    embedder hashes the very words the lexical channel scores. So with it a card
    carries no vector (:func:`vector_of` computes one, to the bits a stored one
    would have, if anything asks), and writing a card embeds nothing: embedding
    was 40% of a bulk load and a sixth of the projector's in-core cost. A semantic
    embedder's vector is computed here, when the card is written (kept while the
    text is), so that a read never embeds a card (issue 24)."""
    old = card(reader, world, belief.id)
    active = embedding.active()
    embedder = active.id
    same = (
        old is not None and old.belief.text == belief.text and old.embedder == embedder
    )
    same_text = old is not None and old.belief.text == belief.text
    if old is not None and old.belief.text == belief.text and old.length >= 0:
        found = lexical.Terms(old.stems, old.length)
    else:
        found = lexical.terms(belief.text)
    if evidence is not None:
        close = context.near(evidence, found)
    elif old is not None and old.belief.text == belief.text:
        close = lexical.Terms(old.near, old.near_length)
    else:
        close = lexical.Terms((), 0)
    kinds = old.offers if old is not None and same_text else None
    if kinds is None:  # written when the text is, kept while it is
        kinds = answer_type.kinds(belief.text)
    if evidence is not None:
        first_said = context.said(evidence)
    else:
        first_said = old.said if old is not None else ""
    kept = evidence is None or (
        old is not None
        and (old.near, old.near_length) == (close.distinct, close.length)
    )
    if isinstance(active, embedding.HashingEmbedder):
        vector = b""
    elif old is not None and same and old.vector and kept:
        vector = old.vector
    else:
        vector = _vector(belief.text, vectors or {})
        if evidence is not None and (text := context.in_context(evidence, belief.text)):
            vector = _mean(vector, _vector(text, vectors or {}))
    new = Card(
        belief=belief,
        weight=weight,
        stems=found.distinct,
        length=found.length,
        vector=vector,
        embedder=embedder,
        near=close.distinct,
        near_length=close.length,
        said=first_said,
        offers=kinds,
    )
    writes[_card_key(world, belief.id)] = encode(new)
    # Unchanged keys are neither deleted nor written again.
    stale = set() if old is None else set(_keys(world, old))
    for key in _keys(world, new):
        if key in stale:
            stale.discard(key)
        else:
            writes[key] = belief.id.encode()
    for key in stale:
        writes[key] = None
    w, i = _w(world), _id(belief.id)
    lexical.postings_writes(
        reader, w, i, _document(old), _document(new), writes, belief_id=belief.id
    )


def _embedded(text: str) -> bytes:
    return embedding.embed(text).astype(np.float32).tobytes()


def _vector(text: str, vectors: Mapping[str, bytes]) -> bytes:
    found = vectors.get(text)
    return _embedded(text) if found is None else found


def _mean(a: bytes, b: bytes) -> bytes:
    """The normalised weighted mean of two float32 vectors, a text alone and in
    context (:data:`.context.VECTOR_SHARE` the second's weight)."""
    share = context.VECTOR_SHARE
    both = (1 - share) * np.frombuffer(a, dtype=np.float32) + share * np.frombuffer(
        b, dtype=np.float32
    )
    norm = float(np.linalg.norm(both))
    return (both / norm if norm > 0 else both).astype(np.float32).tobytes()


def _first(reader: Reader, prefix: bytes, limit: int) -> list[str]:
    found = []
    for key, value in reader.scan(prefix):
        # Keys written before ranks held their id have an empty value; their id
        # is the key's last part.
        found.append(value.decode() if value else key.decode().rsplit("/", 1)[1])
        if len(found) >= limit:
            break
    return found


def recent(reader: Reader, world: str, limit: int = RECENT) -> list[str]:
    """The most recently changed beliefs, newest first."""
    return _first(reader, f"recent/{_w(world)}/".encode(), limit)


def counts(reader: Reader, world: str, *texts: str) -> lexical.Counts:
    """The world's lexical counters for the terms of ``texts`` (IDF, average
    length) at the state ``reader`` holds."""
    return lexical.counts(reader, _w(world), texts, _stem)


def matches(
    reader: Reader,
    world: str,
    text: str,
    limit: int,
    budget: int = lexical.POSTINGS,
) -> list[str]:
    """The ids of the ``limit`` beliefs best matching ``text`` by BM25, reading at
    most ``budget`` postings."""
    found = counts(reader, world, text).lexicon(text)
    return lexical.matches(reader, _w(world), found, limit, budget)


def influential(reader: Reader, world: str, limit: int = TOP) -> list[str]:
    """The ids of the ``limit`` most influential beliefs (goals aside)."""
    return _first(reader, f"rw/{_w(world)}/".encode(), limit)


def candidates(
    reader: Reader,
    world: str,
    query: str,
    focus: str,
    postings: int = lexical.POSTINGS,
) -> list[Card]:
    """A bounded set of cards worth ranking for ``query``: the best lexical
    matches of the query and of the agent's goals and work, the most influential,
    the most worth a move, the latest changes and the goals. Its size does not
    grow with the store (``postings``: the lexical budget for the query)."""
    ids: dict[str, None] = {}
    w = _w(world)
    ids.update(dict.fromkeys(matches(reader, world, query, MATCHES, postings)))
    if focus.strip() and focus != query:
        focused = matches(reader, world, focus, FOCUS_MATCHES, FOCUS_POSTINGS)
        ids.update(dict.fromkeys(focused))
    for ranked, limit in ((f"rw/{w}/", TOP), (f"rm/{w}/", TOP)):
        ids.update(dict.fromkeys(_first(reader, ranked.encode(), limit)))
    ids.update(dict.fromkeys(_first(reader, f"goal/{w}/".encode(), GOALS)))
    ids.update(dict.fromkeys(recent(reader, world)))
    cards = [card(reader, world, i) for i in ids]
    return [c for c in cards if c is not None]

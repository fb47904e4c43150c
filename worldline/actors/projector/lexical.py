"""The lexical channel: BM25 over the projector's index, kept current as beliefs
change (no rebuild per query).

Terms are the content-word stems of
:func:`worldline.actors.belief_model.text.content_stems`
(stop words, hedges and negations dropped). A belief is a *document* while it is
active; each of its distinct terms (at most :data:`MAX_TERMS`, in order of first
occurrence) has one posting, and its length is its number of content words. Scores
are BM25 (k1 = :data:`K1`, b = :data:`B`) with binary term frequency: a belief is a
sentence or two, where a term seldom repeats.

Keys, per world (each variable part bounded by :func:`~.index.key_part`):

- ``lex/<w>/<term>/<length>/<id>`` -> id: the postings of a term, shortest belief
  first (for one term, a shorter belief scores higher: BM25's length norm), so a
  capped scan of a common term reads its best postings;
- ``df/<w>/<term>`` -> how many active beliefs hold the term (document frequency);
- ``lexn/<w>`` -> ``"<documents> <total length>"``: the average length BM25 needs.

Both counters move with the postings in the same write, so IDF is exact at every
committed state. A query reads the counters of its terms and then, rarest term
first, at most a budget of postings in all (:data:`POSTINGS` by default; a term gets
an equal share of what the rarer ones left, and at least :data:`MIN_PER_TERM`): what
a query costs does not grow with the world. The scores summed from postings can
miss a common term's contribution to a belief whose posting lies past the cap; the
ranking (:mod:`.relevance`) scores the beliefs kept again, exactly, from their cards
(:meth:`Lexicon.bm25`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.belief_model.text import content_stems

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from worldline.actors.runtime.spec import Reader

__all__ = [
    "K1",
    "MAX_TERMS",
    "B",
    "Lexicon",
    "Terms",
    "counts",
    "matches",
    "postings_writes",
    "query_terms",
    "terms",
]

K1: Final = 1.2
B: Final = 0.75
MAX_TERMS: Final = 64  # distinct terms indexed per belief
MAX_QUERY_TERMS: Final = 16
POSTINGS: Final = 2048  # postings one query reads at most, by default
MIN_PER_TERM: Final = 64
_LENGTH_DIGITS: Final = 5


class Terms(msgspec.Struct, frozen=True):
    """What the lexical channel keeps of one text: its distinct terms and length."""

    distinct: tuple[str, ...]
    length: int


def terms(text: str) -> Terms:
    """``text``'s distinct terms (first occurrence order, at most MAX_TERMS) and its
    length in content words."""
    found = content_stems(text)
    return Terms(tuple(dict.fromkeys(found))[:MAX_TERMS], len(found))


def _stats_key(w: str) -> bytes:
    return f"lexn/{w}".encode()


def _df_key(w: str, term: str) -> bytes:
    return f"df/{w}/{term}".encode()


def _posting_key(w: str, term: str, length: int, i: str) -> bytes:
    bounded = min(length, 10**_LENGTH_DIGITS - 1)
    return f"lex/{w}/{term}/{bounded:0{_LENGTH_DIGITS}d}/{i}".encode()


def _count(raw: bytes | None) -> int:
    return 0 if raw is None else int(raw)


def postings_writes(
    reader: Reader,
    w: str,
    i: str,
    old: Terms | None,
    new: Terms | None,
    writes: dict[bytes, bytes | None],
    *,
    belief_id: str,
) -> None:
    """Move one belief's postings and the counters from ``old`` to ``new`` (None:
    not a document). ``w``, ``i`` and the terms are key parts already bounded;
    ``reader`` must see ``writes`` (an overlay), so changes in one batch add up."""
    if old == new:
        return
    before = set(old.distinct) if old else set()
    after = set(new.distinct) if new else set()
    if old is not None:
        for term in old.distinct:
            writes[_posting_key(w, term, old.length, i)] = None
    if new is not None:
        for term in new.distinct:
            writes[_posting_key(w, term, new.length, i)] = belief_id.encode()
    for term in sorted(before ^ after):
        key = _df_key(w, term)
        count = _count(reader.get(key)) + (1 if term in after else -1)
        writes[key] = str(count).encode() if count > 0 else None
    raw = reader.get(_stats_key(w))
    docs, total = (int(x) for x in raw.split()) if raw else (0, 0)
    if old is not None:
        docs, total = docs - 1, total - old.length
    if new is not None:
        docs, total = docs + 1, total + new.length
    writes[_stats_key(w)] = f"{docs} {total}".encode() if docs > 0 else None


@dataclass(frozen=True, slots=True)
class Lexicon:
    """A query's terms with their IDF at one committed state, and the average
    belief length: what BM25 needs to score any text against the query."""

    idf: dict[str, float]  # query term -> IDF (terms no belief holds: the highest)
    average_length: float
    # query term -> (its key part, how many beliefs hold it)
    postings: dict[str, tuple[str, int]] = field(default_factory=dict)

    def bm25(self, text: Terms) -> float:
        """BM25 of a text (binary term frequency) against the query."""
        held = text.distinct
        found = sum(idf for term, idf in self.idf.items() if term in held)
        return found * self._gain(text.length) if found else 0.0

    def _gain(self, length: int) -> float:
        norm = K1 * (1 - B + B * length / self.average_length)
        return (K1 + 1) / (1 + norm)


def _idf(documents: int, frequency: int) -> float:
    return math.log(1 + (documents - frequency + 0.5) / (frequency + 0.5))


def query_terms(query: str) -> tuple[str, ...]:
    """The distinct terms of a query that count (at most MAX_QUERY_TERMS)."""
    return tuple(dict.fromkeys(content_stems(query)))[:MAX_QUERY_TERMS]


@dataclass(frozen=True, slots=True)
class Counts:
    """The world's lexical counters for some terms, at one committed state."""

    documents: int = 0
    average_length: float = 1.0
    frequency: dict[str, int] = field(default_factory=dict)  # term -> beliefs
    parts: dict[str, str] = field(default_factory=dict)  # term -> its key part

    def lexicon(self, query: str) -> Lexicon:
        """``query``'s lexicon (a term not counted here counts as held by none)."""
        idf: dict[str, float] = {}
        postings: dict[str, tuple[str, int]] = {}
        for term in query_terms(query):
            frequency = self.frequency.get(term, 0)
            idf[term] = _idf(self.documents, frequency)
            postings[term] = (self.parts.get(term, term), frequency)
        return Lexicon(idf=idf, average_length=self.average_length, postings=postings)


def counts(
    reader: Reader, w: str, texts: Iterable[str], part: Callable[[str], str]
) -> Counts:
    """The counters of world ``w`` for the query terms of ``texts`` (``part``: a
    term's key part)."""
    raw = reader.get(_stats_key(w))
    docs, total = (int(x) for x in raw.split()) if raw else (0, 0)
    frequency: dict[str, int] = {}
    parts: dict[str, str] = {}
    for text in texts:
        for term in query_terms(text):
            if term not in parts:
                parts[term] = part(term)
                frequency[term] = _count(reader.get(_df_key(w, parts[term])))
    average = total / docs if docs and total else 1.0
    return Counts(docs, average, frequency, parts)


def matches(
    reader: Reader, w: str, lexicon: Lexicon, limit: int, budget: int = POSTINGS
) -> list[str]:
    """The ids of at most ``limit`` beliefs sharing a term with the query, best by
    the BM25 summed from the postings read (at most ``budget``; ties by id)."""
    order = sorted(
        (frequency, term, key_part)
        for term, (key_part, frequency) in lexicon.postings.items()
        if frequency > 0
    )
    scores: dict[bytes, float] = {}
    left = budget
    for n, (_, term, key_part) in enumerate(order):
        share = max(min(MIN_PER_TERM, budget), left // (len(order) - n))
        idf = lexicon.idf[term]
        prefix = f"lex/{w}/{key_part}/".encode()
        at = len(prefix)
        read, length, weight = 0, b"", 0.0
        for key, value in reader.scan(prefix):
            # Postings come shortest first: the weight changes with the length only.
            if key[at : at + _LENGTH_DIGITS] != length:
                length = key[at : at + _LENGTH_DIGITS]
                weight = idf * lexicon._gain(int(length))
            scores[value] = scores.get(value, 0.0) + weight
            read += 1
            if read >= share:
                break
        left = max(0, left - read)
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [i.decode() for i, _ in ranked[:limit]]

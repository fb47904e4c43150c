"""How well a text answers the move an agent is about to make (:class:`Relevance`),
and how much the world's structure speaks for a belief besides (:func:`prior`).

Two *query channels* read the query itself:

- **lexical**: BM25 of the text against the query (:mod:`.lexical`: real IDF from the
  world's counters), divided by the best BM25 in the pool being ranked;
- **semantic** (only with a semantic embedder, see docs/llm.md): the cosine of the
  text's and the query's embeddings, scaled min-max over the pool (the least similar
  belief of the pool 0, the most similar 1).

The query relevance of a text is the weighted mean of its channels, each 0-1: the
semantic channel's share is :func:`share` (a half with a static embedder, more with
a sentence encoder, the contextual channel) (a text that is
no belief of the pool, a goal or a policy, counts at most as the pool's best). The
pool's scale is fixed once per request (:class:`Scale`), so the same text scores the
same in every slice and in both passes of a decision view.

Two lifts act on the query relevance: a belief offering the kind of answer the query
asks for (a time, a place), or first said on a day it names, counts
``1 + answer_type.LIFT`` times its relevance (:mod:`.answer_type`); and a graph
neighbour of the pool's best beliefs counts at least what its walk gives it
(:attr:`Relevance.hops`, :mod:`.graph`).

*Priors* (:func:`prior`, 0-1) are what the world says without the query: a belief's
influence in the belief graph (relative to the pool's most influential), one edge from
a goal, its share of words in the agent's goals and work, and being among the latest
changes. They may lift a belief's value by at most :data:`LIFT` (25 %), and a belief
with no query evidence at all is worth only :data:`EPSILON` times its prior: the
query's own evidence is never crowded out (an exact match outranks a goal-linked
partial match unless the two are within 25 % of each other).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from worldline.actors.belief_model import embedding
from worldline.actors.projector import answer_type, lexical

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

    import numpy as np

__all__ = [
    "EPSILON",
    "LIFT",
    "Relevance",
    "Scale",
    "fused",
    "is_semantic",
    "prior",
    "share",
]

LIFT: Final = 0.25  # the most the priors lift a belief with query evidence
# The semantic channel's share of the query relevance: a static embedder's cosine
# counts as much as BM25; a sentence encoder's (the contextual channel) more
# (measured on the dev sets, docs/benchmarks.md "The contextual channel").
SHARE: Final = 0.5
CONTEXTUAL_SHARE: Final = 0.6
CONTEXTUAL: Final = ("all-minilm-l6-v2",)  # embedder ids of sentence encoders
EPSILON: Final = 0.01  # what a belief without query evidence is worth per prior


def share(embedder: embedding.Embedder) -> float:
    """The semantic channel's share of the query relevance with ``embedder``."""
    return CONTEXTUAL_SHARE if embedder.id.startswith(CONTEXTUAL) else SHARE


def is_semantic(embedder: embedding.Embedder) -> bool:
    """Whether the embedder reads meaning (not the default hashing of words, which
    the lexical channel already covers)."""
    return not embedder.id.startswith("hashing-")


@functools.lru_cache(maxsize=4096)
def _featured(embedder: str, text: str) -> tuple[lexical.Terms, np.ndarray | None]:
    """``text``'s terms, and its vector when the active embedder is semantic (named,
    so a cached vector never crosses embedders). Every view rebuilt in a batch scores
    the same goals, constraints, actions and focus: reading them once, not per view
    and batch, was a fifth of the projector's time in a bulk load. Read-only."""
    found = lexical.terms(text)
    if not is_semantic(embedding.active()):
        return found, None
    vector = embedding.embed(text)
    vector.setflags(write=False)
    return found, vector


Features = dict[str, tuple[lexical.Terms, "np.ndarray | None"]]


@dataclass(frozen=True, slots=True)
class Scale:
    """The pool's scale of each query channel: its best BM25, and its lowest and
    highest cosine (semantic channel only)."""

    lexical: float = 0.0
    low: float = 0.0
    high: float = 0.0


class Relevance:
    """The query relevance of texts (see the module doc), one request's worth."""

    def __init__(
        self,
        query: str,
        focus: str,
        features: Features | None = None,
        counts: lexical.Counts | None = None,
        marks: dict[str, answer_type.Marks] | None = None,
        at: datetime | None = None,
    ) -> None:
        self.query = query
        self.lexicon = (counts or lexical.Counts()).lexicon(query)
        self.terms = frozenset(self.lexicon.idf)
        self.semantic = is_semantic(embedding.active()) and bool(query.strip())
        self.share = share(embedding.active())
        self.vector = _featured(embedding.active().id, query)[1]
        self.focus = set(lexical.terms(focus).distinct)
        # The kind of answer the query asks for, and the days it names (``at``
        # dates "yesterday"): a belief offering the kind, or first said on one of
        # the days, is lifted (``marks``: what the cards say, by text).
        self.asked = answer_type.asked(query)
        days = answer_type.days(query, at)
        self.days = None if days is None else (days[0].isoformat(), days[1].isoformat())
        self.marks = marks or {}
        # Whether the query asks when or names days (a view then shows each
        # belief's day), and whether anything is lifted at all.
        self.about_time = self.asked == "time" or self.days is not None
        self.typed = self.asked is not None or self.days is not None
        self.features: Features = features or {}
        self.scale = Scale()
        self.memo: dict[str, float] = {}  # slices ask about the same texts
        self.raw: dict[str, dict[str, float]] = {}  # and so do both passes
        # text -> a graph neighbour's worth (:mod:`.graph`): its query relevance
        # when more than its own
        self.hops: dict[str, float] = {}

    @property
    def informed(self) -> bool:
        """Whether the query found anything in the pool (a belief sharing a word
        with it, or, with a semantic embedder, beliefs it tells apart)."""
        return self.scale.lexical > 0 or self.scale.high > self.scale.low

    def _features(self, text: str) -> tuple[lexical.Terms, np.ndarray | None]:
        if text in self.features:
            return self.features[text]
        return _featured(embedding.active().id, text)

    def channels(self, text: str) -> dict[str, float]:
        """Each query channel's raw score for ``text``: BM25, and the cosine."""
        return dict(self._raw(text))

    def _raw(self, text: str) -> dict[str, float]:
        found = self.raw.get(text)
        if found is None:
            found = self.raw[text] = self._channels(text)
        return found  # shared: not to be changed

    def _channels(self, text: str) -> dict[str, float]:
        found, vector = self._features(text)
        # A text sharing no term with the query scores 0 (Lexicon.bm25's sum is 0).
        shared = not self.terms.isdisjoint(found.distinct)
        raw = {"lexical": self.lexicon.bm25(found) if shared else 0.0}
        if self.semantic and self.vector is not None:
            other = vector if vector is not None else embedding.embed(text)
            raw["semantic"] = embedding.cosine(self.vector, other)
        return raw

    def calibrate(self, texts: Iterable[str]) -> Scale:
        """Fix the pool's scale from ``texts`` (the beliefs being ranked)."""
        best, low, high = 0.0, 1.0, -1.0
        for text in texts:
            raw = self._raw(text)
            best = max(best, raw["lexical"])
            if "semantic" in raw:
                low, high = min(low, raw["semantic"]), max(high, raw["semantic"])
        self.scale = Scale(best, low, high) if high >= low else Scale(best)
        self.memo.clear()
        return self.scale

    def scores(self, text: str) -> dict[str, float]:
        """Each query channel's score for ``text`` on the pool's scale, 0-1 (a text
        beyond the pool's best counts as the best)."""
        raw = self._raw(text)
        lex = self.scale.lexical
        found = {"lexical": min(1.0, raw["lexical"] / lex) if lex > 0 else 0.0}
        if "semantic" in raw:
            spread = self.scale.high - self.scale.low
            share = (raw["semantic"] - self.scale.low) / spread if spread > 0 else 0.0
            found["semantic"] = min(1.0, max(0.0, share))
        return found

    def __call__(self, text: str) -> float:
        """The query relevance of ``text``: its channel scores weighed by the
        semantic channel's :func:`share` (the lexical score alone without one)."""
        value = self.memo.get(text)
        if value is None:
            found = self.scores(text)
            if "semantic" in found:
                semantic = self.share * found["semantic"]
                value = (1 - self.share) * found["lexical"] + semantic
            else:
                value = found["lexical"]
            if self.typed and value > 0 and self._answers(text):
                value *= 1 + answer_type.LIFT
            self.memo[text] = value
        hop = self.hops.get(text)
        return value if hop is None or hop <= value else hop

    def _answers(self, text: str) -> bool:
        """Whether ``text`` offers the kind of answer the query asks for, or was
        first said on a day it names."""
        mark = self.marks.get(text) or answer_type.Marks(None, "")
        if self.asked and (
            answer_type.offers(self.asked, text)
            if mark.offers is None  # not from a card that kept them
            else self.asked in mark.offers
        ):
            return True
        return self.days is not None and self.days[0] <= mark.said <= self.days[1]

    def near_focus(self, text: str) -> float:
        """The share of ``text``'s terms among the agent's goals and work."""
        if not self.focus:
            return 0.0
        found = self._features(text)[0].distinct
        return len(self.focus.intersection(found)) / len(found) if found else 0.0


def prior(influence: float, near_goal: bool, focus: float, recent: bool) -> float:
    """What the world's structure says for a belief, 0-1: the mean of its relative
    influence (0-1), one edge from a goal, its share of focus words, and being
    among the latest changes."""
    return (min(1.0, influence) + near_goal + focus + recent) / 4


def fused(query: float, structure: float) -> float:
    """A belief's value from its query relevance and its prior (both 0-1)."""
    return query * (1 + LIFT * structure) + EPSILON * structure

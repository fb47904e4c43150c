"""The graph channel (issue 27): from the query's best matches to the beliefs that
share an entity with them, so that a two-hop question ("what position did the
actress who played Corliss Archer hold?") reaches its second belief ("Shirley
Temple Black ... served as Chief of Protocol"), which holds none of the query's
words but the name the first one ("Kiss and Tell is a 1945 film starring Shirley
Temple as Corliss Archer") brings.

A decision view's candidates are ranked by the query channels first
(:mod:`.relevance`). Then, from its :data:`SEEDS` best beliefs (by query relevance):

- **by name**: each capitalised name in a seed's text (a run of capitalised words,
  :data:`NAME`) less the query's own terms links the seed to the beliefs that hold
  every remaining term of it (read from the lexical postings of its rarest term,
  at most :data:`HOLDERS`, and their cards: a name more beliefs hold than that is
  too common to link anything). A link's strength is the name's IDF over
  :data:`NAME_IDF`, at most 1. Of a name's holders the walk takes the one the query
  ranks highest, a belief that begins with the name (the entity's own sentence)
  first;
- **by edge**: each belief edge from or to a seed (not ``contradicts``, not
  removed) links it to the other end, strength the edge's confidence.

A neighbour is worth :data:`HOP` times its seed's query relevance times the link's
strength; when that is more than its own query relevance, it counts as its query
relevance (:attr:`.relevance.Relevance.hops`), so it can enter the view beside its
seed but never outranks it. At most :data:`NEIGHBOURS` beliefs are lifted a view.
Everything it reads was written with the cards (terms, postings, counters,
vectors): no text is embedded at read time, and what it reads is bounded
(:data:`SEEDS` x names, :data:`HOLDERS` postings and :data:`CARDS` cards at most),
whatever the world's size. Only a decision view with a move of its own walks
(``before``; a standing view's query is its focus and does not).
"""

from __future__ import annotations

import dataclasses
import math
import re
from itertools import islice
from typing import TYPE_CHECKING, Final

from worldline.actors.belief_model import embedding
from worldline.actors.belief_model.text import content_stems
from worldline.actors.projector import index, lexical, relevance

if TYPE_CHECKING:
    import numpy as np

    from worldline.actors.projector.worldview import Scene
    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.messages import Belief

__all__ = [
    "CARDS",
    "HOLDERS",
    "HOP",
    "NAME",
    "NAME_IDF",
    "NEIGHBOURS",
    "SEEDS",
    "names",
    "walked",
]

SEEDS: Final = 3  # the best matches walked from
HOP: Final = 0.8  # a neighbour's worth relative to its seed's
NEIGHBOURS: Final = 2  # beliefs the walk may lift in one view
HOLDERS: Final = 24  # a name held by more beliefs links nothing
CARDS: Final = 96  # cards one walk reads at most
NAME_IDF: Final = 8.0  # a name this rare (IDF summed over its terms) links fully
# A run of capitalised words, a lower-case link word allowed between two of them
# ("Kiss and Tell", "Museum of Modern Art").
_WORD = r"[A-Z][\w'\-]*(?:\.[A-Z][\w'\-]*)*"  # "Shirley", "O'Hara", "U.S"
_LINK = r"(?:of|the|and|de|van|von|der|la|le|du)"
NAME: Final = re.compile(rf"{_WORD}(?:\s+(?:{_LINK}\s+)?{_WORD})*")


def names(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """The capitalised names in ``text``, each with its distinct terms (none for a
    name of stop words only, such as a sentence's first "The"), in order."""
    found = []
    for match in NAME.finditer(text):
        terms = tuple(dict.fromkeys(content_stems(match.group(0))))
        if terms:
            found.append((match.group(0), terms))
    return found


def walked(reader: Reader, world: str, scene: Scene, query: str, focus: str) -> Scene:
    """``scene`` (its query relevance calibrated: :func:`.worldview.scaled`) with
    the graph channel's neighbours of its best matches added and lifted (see the
    module doc). Unchanged without a move of its own (no query, or the focus)."""
    if scene.judged is None or not query.strip() or query == focus:
        return scene
    judged = scene.judged[2]
    pool = [b for b in scene.beliefs if b.type != "goal"]
    if not judged.informed or not pool:
        return scene
    value = {b.id: judged(b.text) for b in pool}
    seeds = sorted(
        (b for b in pool if value[b.id] > 0), key=lambda b: (-value[b.id], b.id)
    )
    walk = _Walk(reader, world, scene, set(judged.terms))
    for seed in seeds[:SEEDS]:
        walk.from_seed(seed, value[seed.id])
    lifted = sorted(
        (
            (hop, belief_id)
            for belief_id, hop in walk.hops.items()
            if hop > value.get(belief_id, walk.own(belief_id))
        ),
        key=lambda item: (-item[0], item[1]),
    )[:NEIGHBOURS]
    if not lifted:
        return scene
    added = [walk.cards[i] for _, i in lifted if i in walk.cards]
    for hop, belief_id in lifted:
        judged.hops[walk.known[belief_id][0].text] = hop
    if not added:
        return scene
    features = judged.features  # a copy of the scene's, with every card read
    for card in added:
        features.setdefault(card.belief.text, walk.features(card))
    n = max(len(scene.beliefs), 1)
    influence = dict(scene.influence)
    influence.update({c.belief.id: c.weight / n for c in added})
    beliefs: list[Belief] = [*scene.beliefs, *(c.belief for c in added)]
    return dataclasses.replace(
        scene, beliefs=beliefs, features=features, influence=influence
    )


class _Walk:
    """One walk's reads and what it found: each neighbour's best hop; the beliefs
    it knows (the scene's, and those whose cards it read) with their terms."""

    def __init__(self, reader: Reader, world: str, scene: Scene, asked: set[str]):
        self.reader, self.world, self.scene, self.asked = reader, world, scene, asked
        self.w = index.key_part(world, index.WORLD_BYTES)
        self.hops: dict[str, float] = {}
        self.cards: dict[str, index.Card] = {}  # read by the walk, not the scene's
        self.read = 0  # cards read
        self.semantic = relevance.is_semantic(embedding.active())
        self.documents = (scene.counts or lexical.Counts()).documents
        self.judged = scene.judged[2] if scene.judged else None
        features = {} if self.judged is None else dict(self.judged.features)
        if self.judged is not None:  # the neighbours' features join the scene's
            self.judged.features = features
        # The scene's beliefs need no read: their terms are in its features.
        self.known: dict[str, tuple[Belief, frozenset[str]]] = {
            b.id: (b, frozenset(features[b.text][0].distinct))
            for b in scene.beliefs
            if b.text in features
        }

    def own(self, belief_id: str) -> float:
        """A belief's own query relevance (0 for one the walk does not know)."""
        known = self.known.get(belief_id)
        return (
            0.0 if known is None or self.judged is None else self.judged(known[0].text)
        )

    def features(self, card: index.Card) -> tuple[lexical.Terms, np.ndarray | None]:
        vector = index.vector_of(card) if self.semantic else None
        return card.terms, vector

    def _card(self, belief_id: str) -> tuple[Belief, frozenset[str]] | None:
        """The belief and its terms: the scene's, else read from its card (at most
        :data:`CARDS` a walk)."""
        known = self.known.get(belief_id)
        if known is not None or self.read >= CARDS:
            return known
        self.read += 1
        found = index.card(self.reader, self.world, belief_id)
        if found is None:
            return None
        self.cards[belief_id] = found
        if self.judged is not None:
            self.judged.features.setdefault(found.belief.text, self.features(found))
        known = self.known[belief_id] = (found.belief, frozenset(found.terms.distinct))
        return known

    def _lift(self, belief_id: str, hop: float) -> None:
        if hop > self.hops.get(belief_id, 0.0):
            self.hops[belief_id] = hop

    def from_seed(self, seed: Belief, worth: float) -> None:
        for e in self.scene.edges:
            if (
                e.removed
                or e.type == "contradicts"
                or seed.id not in (e.source, e.target)
            ):
                continue
            other = e.target if e.source == seed.id else e.source
            if other != seed.id and self._card(other) is not None:
                self._lift(other, HOP * worth * e.confidence)
        for name, terms in names(seed.text):
            linking = [t for t in terms if t not in self.asked]
            if linking:
                self._by_name(seed.id, name, linking, worth)

    def _by_name(self, seed: str, name: str, terms: list[str], worth: float) -> None:
        parts = {t: index.key_part(t, index.STEM_BYTES) for t in terms}
        frequency = {t: self._frequency(parts[t]) for t in terms}
        if min(frequency.values()) <= 0:
            return
        rarest = min(terms, key=lambda t: (frequency[t], t))
        if frequency[rarest] > HOLDERS:
            return
        strength = sum(self._idf(frequency[t]) for t in terms) / NAME_IDF
        prefix = f"lex/{self.w}/{parts[rarest]}/".encode()
        first = name.split()[0]
        best: tuple[float, str] | None = None
        for _, raw in islice(self.reader.scan(prefix), HOLDERS):
            belief_id = raw.decode()
            known = None if belief_id == seed else self._card(belief_id)
            if known is None or not known[1].issuperset(terms):
                continue
            rank = self.own(belief_id) + known[0].text.startswith(first)
            if best is None or (rank, belief_id) > best:
                best = (rank, belief_id)
        if best is not None:
            self._lift(best[1], HOP * worth * min(1.0, strength))

    def _frequency(self, part: str) -> int:
        raw = self.reader.get(f"df/{self.w}/{part}".encode())
        return 0 if raw is None else int(raw)

    def _idf(self, frequency: int) -> float:
        n = max(self.documents, frequency)
        return math.log(1 + (n - frequency + 0.5) / (frequency + 0.5))

"""How relevant a text is to the move an agent is about to make: keyword overlap,
hashing-embedding cosine and proximity to its goals and work (:class:`Relevance`), the
one score the worldview's slices rank by besides the posterior's numbers."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from worldline.actors.belief_model import embedding
from worldline.actors.belief_model.text import normalize

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Relevance"]


@functools.lru_cache(maxsize=4096)
def _featured(embedder: str, text: str) -> tuple[frozenset[str], np.ndarray]:
    """``text``'s stems and its vector from the active embedder (named, so a cached
    vector never crosses embedders). Every view rebuilt in a batch scores the same
    goals, constraints, actions and focus: reading them once, not per view and
    batch, was a fifth of the projector's time in a bulk load. Read-only: shared."""
    vector = embedding.embed(text)
    vector.setflags(write=False)
    return frozenset(normalize(text)[0].split()), vector


class Relevance:
    """Hybrid relevance of a text to the query: keyword overlap, hashing-embedding
    cosine, and proximity to the agent's goals and work."""

    def __init__(
        self,
        query: str,
        focus: str,
        features: dict[str, tuple[frozenset[str], np.ndarray]] | None = None,
    ) -> None:
        self.words = set(normalize(query)[0].split())
        self.vector = _featured(embedding.active().id, query)[1]
        self.focus = set(normalize(focus)[0].split())
        self.features = features or {}
        self.memo: dict[str, float] = {}  # slices ask about the same texts

    def __call__(self, text: str) -> float:
        if text not in self.memo:
            self.memo[text] = self._score(text)
        return self.memo[text]

    def _score(self, text: str) -> float:
        if text in self.features:
            stems, vector = self.features[text]
            words = set(stems)
        else:
            found, vector = _featured(embedding.active().id, text)
            words = set(found)
        keyword = len(words & self.words) / len(words | self.words) if words else 0.0
        semantic = max(0.0, embedding.cosine(self.vector, vector))
        near = len(words & self.focus) / len(words) if words else 0.0
        return (keyword + semantic + near) / 3.0

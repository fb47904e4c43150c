"""A deterministic local text embedding (feature hashing in numpy), shared by the
projector's relevance and the simulator's retrieval. No model weights, no network.

Each normalized token (and each adjacent pair) is hashed with crc32 into one of
:data:`DIMENSIONS` buckets with a sign from another bit of the hash; the vector is
L2-normalized, so the dot product of two embeddings is their cosine similarity.
"""

from __future__ import annotations

import itertools
import re
import zlib
from typing import Final

import numpy as np

__all__ = ["DIMENSIONS", "EMBEDDER_ID", "cosine", "embed", "tokens"]

DIMENSIONS: Final = 256
EMBEDDER_ID: Final = "hashing-crc32-256-v1"
_WORD = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens, crudely stemmed (trailing s, ed, ing)."""
    found = []
    for word in _WORD.findall(text.lower()):
        for suffix in ("ing", "ed", "s"):
            if len(word) - len(suffix) >= 3 and word.endswith(suffix):
                word = word[: -len(suffix)]
                break
        found.append(word)
    return found


def embed(text: str) -> np.ndarray:
    """The text's unit vector (all zeros for text without words)."""
    words = tokens(text)
    features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
    vector = np.zeros(DIMENSIONS, dtype=np.float64)
    for feature in features:
        h = zlib.crc32(feature.encode())
        vector[h % DIMENSIONS] += 1.0 if (h >> 16) & 1 else -1.0
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))

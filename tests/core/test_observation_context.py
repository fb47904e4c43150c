"""The observation's own context (issue 27): the extractor gives each statement what
came just before it (the artifact's speaker, the previous sentence, the turn the
observation names as its context), and the projector indexes a belief with it, so a
speaker question and a question about the turn a reply answers reach the reply.
Through the extractor and projector cores on in-memory stores."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import anyio
import numpy as np

from tests.core.test_contextual import needs_model
from tests.core.test_index import Replica
from worldline.actors.belief_model import embedding
from worldline.actors.extractor import core as extractor
from worldline.actors.extractor.text import speaker
from worldline.actors.projector import context, core, index, vectors
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.messages import (
    Belief,
    BeliefChanged,
    Observe,
    Statement,
    WorldviewReply,
    encode,
)
from worldline.protocols.subjects import obs
from worldline.sdk.beliefs import observation_id

if TYPE_CHECKING:
    import pytest

W: Final = "w1"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)


def statements(
    text: str,
    *,
    context: str = "",
    n: int = 0,
    at: datetime = T0,
    said: datetime | None = None,
) -> list[Statement]:
    """What the extractor core reads in one observed turn (handed over at ``at``,
    saying it happened at ``said``)."""
    o = Observe(obs_id=f"obs-{n}", author="ada", at=at, source=f"scene-u{n}",
                text=text, context=context, observed_at=said)  # fmt: skip
    ctx = Context(world=W, author="ada", subject=obs(W, "ada"), seq=n + 1, now=at)
    found = [out.message for out in extractor.handle(MemoryState(), o, ctx).out]
    assert all(isinstance(s, Statement) for s in found)
    return found  # type: ignore[return-value]


def apply(r: Replica, found: list[Statement]) -> None:
    """Each statement as the projector receives it: its belief and evidence."""
    for s in found:
        r.seq += 1
        b = Belief(id=s.belief_id, text=s.text, type=s.type, confidence=0.6,
                   prior=0.6, uncertainty=0.2, author="ada", created_at=T0,
                   updated_at=T0, version=r.seq, evidence_count=1)  # fmt: skip
        change = BeliefChanged(belief=b, evidence=[s.evidence])
        r.st.apply(core.handle(r.st, change, r.ctx()))


def conversation(*turns: str, linked: bool = True) -> tuple[Replica, list[str]]:
    """A scene observed turn by turn (each with the turn before as its context
    when ``linked``), after unrelated filler; the belief ids of each turn."""
    r = Replica()
    for i in range(6):
        apply(r, statements(f"Gunther: Table {i} wants more coffee.", n=100 + i))
    ids, before = [], ""
    for n, turn in enumerate(turns):
        found = statements(turn, context=before if linked else "", n=n)
        apply(r, found)
        ids.append([s.belief_id for s in found])
        before = turn
    return r, [i for turn in ids for i in turn]


def shown(reply: WorldviewReply) -> list[str]:
    return [leaf.id for leaf in [*reply.view.current, *reply.view.moves]]


def test_a_statement_carries_its_speaker_and_what_came_before() -> None:
    found = statements(
        "Monica Geller: I know. It's just such reckless spending.",
        context="Ross Geller: You bought a boat?",
    )
    assert [s.evidence.context for s in found] == [
        "Ross Geller: You bought a boat?",
        "Ross Geller: You bought a boat? Monica Geller: I know.",
    ]
    assert speaker("Monica Geller, Rachel Green: Hi!") == "Monica Geller, Rachel Green"
    assert speaker("Note: the cache is cold.") == "Note"
    assert speaker("the cache is cold: 12 min") == ""


def test_a_long_context_keeps_its_speaker_and_its_latest_words() -> None:
    first = "Joey Tribbiani: " + " ".join(f"word{i}" for i in range(100)) + "."
    found = statements(f"{first} How you doin?")
    context = found[1].evidence.context
    assert context.startswith("Joey Tribbiani: ")
    assert context.endswith("word99.")
    assert len(context) <= 340


def test_without_a_context_the_observation_id_is_unchanged() -> None:
    plain = observation_id(W, "ada", "s", "artifact", "text", "Hi!")
    assert plain == observation_id(W, "ada", "s", "artifact", "text", "Hi!", "")
    assert plain != observation_id(W, "ada", "s", "artifact", "text", "Hi!", "Yo.")


def test_a_speaker_question_reaches_a_sentence_holding_only_the_speakers_name() -> None:
    turns = (
        "Phoebe Buffay: Oh, I wish. It smells like lavender.",
        "Rachel Green: Where did you buy the candles?",
    )
    r, ids = conversation(*turns)
    answer = ids[1]  # "It smells like lavender.": no word of the question
    card = index.card(r.st, W, answer)
    assert card is not None
    assert set(card.near) >= {"phoeb", "buffay"}  # from "Phoebe Buffay: Oh, I wish."
    assert answer in shown(r.before("What did Phoebe say?"))


def test_a_reply_is_reached_through_the_turn_it_answers() -> None:
    turns = (
        "Rachel Green: Did Joey finish the lasagna?",
        "Chandler Bing: Every last bite.",
    )
    r, ids = conversation(*turns)
    reply = ids[-1]
    assert reply in shown(r.before("Did Joey finish the lasagna?"))
    # The same turns observed without their context: the reply holds no word of
    # the question and is not shown.
    plain, plain_ids = conversation(*turns, linked=False)
    assert plain_ids[-1] not in shown(plain.before("Did Joey finish the lasagna?"))


def test_an_edge_change_keeps_a_cards_near_terms() -> None:
    r, ids = conversation(
        "Rachel Green: Did Joey finish the lasagna?", "Chandler Bing: Every last bite."
    )
    before = index.card(r.st, W, ids[-1])
    assert before is not None
    assert before.near
    r.edge("e1", "supports", ids[-1], ids[0])
    after = index.card(r.st, W, ids[-1])
    assert after is not None
    assert after.near == before.near
    assert after.weight != before.weight


@needs_model
def test_a_semantic_card_reads_its_context_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(embedding.ENV_EMBEDDER, "contextual")
    turn = "Rachel Green: Did Joey finish the lasagna?"
    reply = statements("Chandler Bing: Every last bite.", context=turn)[0]
    b = Belief(id=reply.belief_id, text=reply.text, type="claim", author="ada",
               created_at=T0, updated_at=T0, version=1)  # fmt: skip
    change = BeliefChanged(belief=b, evidence=[reply.evidence])
    found = anyio.run(vectors.prepare, None, [encode(change)])
    assert found is not None
    in_context = f"{turn} {reply.text}"
    assert set(found) == {reply.text, in_context}  # both embedded per batch
    writes: dict[bytes, bytes | None] = {}
    state = MemoryState()
    index.index_writes(state, W, b, 1.0, writes, found, change.evidence)
    state.data.update((k, v) for k, v in writes.items() if v is not None)
    card = index.card(state, W, b.id)
    assert card is not None
    alone = np.frombuffer(found[reply.text], dtype=np.float32)
    share = context.VECTOR_SHARE
    mean = (1 - share) * alone + share * np.frombuffer(
        found[in_context], dtype=np.float32
    )
    assert np.allclose(index.vector_of(card), mean / np.linalg.norm(mean), atol=1e-6)
    question = embedding.embed("Who ate the lasagna?")
    assert embedding.cosine(question, index.vector_of(card)) > embedding.cosine(
        question, alone.astype(np.float64)
    )

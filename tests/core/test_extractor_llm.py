"""LLM extraction, the pure half: the prompt, the strict reading of the model's
answer, and what the extractor core makes of a reading (or of its absence)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Final

import pytest

from worldline.actors.extractor import core as extractor
from worldline.actors.extractor.llm import (
    DETERMINISTIC,
    MAX_ITEMS,
    SYSTEM,
    AnswerRejected,
    LlmItem,
    LlmReading,
    messages,
    parse_answer,
)
from worldline.actors.extractor.text import belief_id, statements
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context, Step, Unprepared
from worldline.protocols.messages import Observe, Statement
from worldline.protocols.subjects import obs

W: Final = "w1"
T0: Final = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MODEL: Final = "extract-model-1"
TEXT: Final = (
    "We shipped the export endpoint on Monday. It does not check auth tokens. "
    "Could the nightly job leak customer data?"
)


def observe(
    text: str = TEXT, media_type: str = "text", role: str = "output"
) -> Observe:
    return Observe(
        obs_id="obs-1",
        author="alice",
        at=T0,
        source="standup.md",
        text=text,
        role=role,  # type: ignore[arg-type]
        media_type=media_type,  # type: ignore[arg-type]
    )


def item(type: str, text: str, confidence: float, span: str) -> dict[str, Any]:
    return {"type": type, "text": text, "confidence": confidence, "span": span}


GOOD: Final = [
    item(
        "claim",
        "The export endpoint shipped on Monday.",
        0.9,
        "We shipped the export endpoint on Monday.",
    ),
    item(
        "risk",
        "The export endpoint does not check auth tokens.",
        0.8,
        "It does not check auth tokens.",
    ),
    item(
        "gap",
        "Could the nightly job leak customer data?",
        0.7,
        "Could the nightly job leak customer data?",
    ),
]


def answer(items: list[dict[str, Any]] = GOOD) -> str:
    return json.dumps({"items": items})


def extract(
    o: Observe, prepared: object = None, state: MemoryState | None = None
) -> tuple[list[Statement], dict[bytes, bytes | None]]:
    ctx = Context(
        world=W,
        author="alice",
        subject=obs(W, "alice"),
        seq=1,
        now=T0,
        prepared=prepared,
    )
    step = extractor.handle(state or MemoryState(), o, ctx)
    found = [item.message for item in step.out]
    assert all(isinstance(m, Statement) for m in found)
    return found, step.writes  # type: ignore[return-value]


# --- the prompt -----------------------------------------------------------------------


def test_the_prompt_asks_for_strict_json_and_carries_the_artifact() -> None:
    sent = messages(observe())
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[0]["content"] == SYSTEM
    for word in ('"items"', '"type"', '"confidence"', '"span"', "claim", "risk", "gap"):
        assert word in SYSTEM
    assert TEXT in sent[1]["content"]
    assert "standup.md" in sent[1]["content"]
    assert "the agent's own output" in sent[1]["content"]


def test_the_prompt_is_deterministic_and_names_the_role() -> None:
    assert json.dumps(messages(observe())) == json.dumps(messages(observe()))
    tool = messages(observe(role="tool"))[1]["content"]
    assert "the result of a tool" in tool
    assert tool != messages(observe(role="artifact"))[1]["content"]


# --- parsing --------------------------------------------------------------------------


def test_a_good_answer_parses_into_items() -> None:
    items = parse_answer(answer(), TEXT)
    assert [i.type for i in items] == ["claim", "risk", "gap"]
    assert items[1] == LlmItem(
        type="risk",
        text="The export endpoint does not check auth tokens.",
        confidence=0.8,
        span="It does not check auth tokens.",
    )


def test_a_fenced_answer_and_loose_whitespace_in_spans_are_accepted() -> None:
    spaced = [
        item("claim", "  Shipped Monday. ", 1.0, "shipped   the\nexport endpoint")
    ]
    items = parse_answer(f"```json\n{answer(spaced)}\n```", TEXT)
    assert items == (
        LlmItem(
            type="claim",
            text="Shipped Monday.",
            confidence=1.0,
            span="shipped   the\nexport endpoint",
        ),
    )


def test_an_empty_answer_is_a_valid_reading() -> None:
    assert parse_answer('{"items": []}', TEXT) == ()


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("the export shipped", "not a JSON object"),
        ("[1, 2]", "schema"),
        ('{"items": [{"type": "claim"', "not a JSON object"),
        ("{}", "schema"),
        ('{"claims": []}', "schema"),
        (answer([item("claim", "x", 1.5, "It does not")]), "schema"),
        (answer([item("claim", "x", -0.1, "It does not")]), "schema"),
        (answer([item("claim", "x", "high", "It does not")]), "schema"),  # type: ignore[arg-type]
        (answer([item("fact", "x", 0.5, "It does not")]), "schema"),
        (answer([item("claim", "", 0.5, "It does not")]), "schema"),
        (answer([item("claim", "   ", 0.5, "It does not")]), "blank"),
        (answer([item("claim", "x" * 1025, 0.5, "It does not")]), "schema"),
        (answer([{**item("claim", "x", 0.5, "It does not"), "why": "?"}]), "schema"),
        (answer([{"type": "claim", "text": "x", "confidence": 0.5}]), "schema"),
        (answer([item("claim", "Export is safe.", 0.9, "Export is safe.")]), "span"),
        (answer([item("claim", "x", 0.5, "It does not")] * (MAX_ITEMS + 1)), "schema"),
    ],
)
def test_anything_else_is_rejected_with_the_reason(content: str, why: str) -> None:
    with pytest.raises(AnswerRejected, match=why):
        parse_answer(content, TEXT)


# --- what the core makes of a reading -------------------------------------------------


def test_a_models_reading_becomes_statements_by_that_model() -> None:
    reading = LlmReading(model=MODEL, items=parse_answer(answer(), TEXT))
    found, writes = extract(observe(), reading)
    assert [(s.text, s.type) for s in found] == [
        ("The export endpoint shipped on Monday.", "claim"),
        ("The export endpoint does not check auth tokens.", "risk"),
        ("Could the nightly job leak customer data?", "gap"),
    ]
    assert {s.evidence.extracted_by for s in found} == {MODEL}
    assert {s.author for s in found} == {"extractor"}
    claim, risk, gap = found
    # Negation is read from the text: the risk is evidence against its positive form.
    assert risk.negated
    assert risk.evidence.direction == "refutes"
    assert risk.belief_id == belief_id(
        W, "The export endpoint does not check auth tokens."
    )
    assert gap.evidence.direction == "neutral"
    assert claim.evidence.direction == "supports"
    # The quoted span is the evidence text; the role decides the kind.
    assert risk.evidence.text == "It does not check auth tokens."
    assert claim.evidence.kind == "inference"  # an agent's own output
    assert claim.evidence.source == "standup.md"
    assert writes == {extractor.USED: b"1"}


def test_low_confidence_and_assumptions_are_weak_evidence() -> None:
    items = (
        LlmItem(type="claim", text="Export shipped.", confidence=0.3, span="shipped"),
        LlmItem(type="assumption", text="Tokens rotate.", confidence=0.9, span="It"),
        LlmItem(type="claim", text="Tokens expire.", confidence=0.9, span="auth"),
    )
    found, _ = extract(observe(role="tool"), LlmReading(model=MODEL, items=items))
    assert [s.evidence.kind for s in found] == [
        "assumption",
        "assumption",
        "measurement",
    ]


def test_a_models_ids_differ_from_the_rule_based_ones_and_are_stable() -> None:
    reading = LlmReading(model=MODEL, items=parse_answer(answer(), TEXT))
    by_model, _ = extract(observe(), reading)
    again, _ = extract(observe(), reading)
    by_rule, _ = extract(observe())
    assert [s.op_id for s in by_model] == [s.op_id for s in again]
    assert not {s.op_id for s in by_model} & {s.op_id for s in by_rule}
    other, _ = extract(observe(), LlmReading(model="other", items=reading.items))
    assert not {s.op_id for s in by_model} & {s.op_id for s in other}


def test_without_a_model_the_reading_is_deterministic_and_uncounted() -> None:
    found, writes = extract(observe())
    assert len(found) == len(statements(TEXT)) == 3
    assert {s.evidence.extracted_by for s in found} == {DETERMINISTIC}
    assert writes == {}


@pytest.mark.parametrize(
    "prepared",
    [
        LlmReading(model=MODEL, fallback="POST ... -> HTTP 500"),
        Unprepared("prepare timed out after 35s"),
    ],
)
def test_a_fallback_reads_by_rule_and_counts(prepared: object) -> None:
    state = MemoryState()
    by_rule, _ = extract(observe())
    for n in (1, 2):
        found, writes = extract(observe(), prepared, state)
        assert found == by_rule  # the same ops the rule-based reader gives
        assert writes == {extractor.FALLBACKS: str(n).encode()}
        state.apply(Step(writes=writes))
    assert extractor.counters(state) == {"used": 0, "fallbacks": 2}


def test_a_json_artifact_is_read_by_rule_even_with_a_reading() -> None:
    text = json.dumps({"claims": [{"text": "Latency is 40 ms."}]})
    reading = LlmReading(model=MODEL, items=parse_answer(answer(), TEXT))
    found, writes = extract(observe(text, media_type="json"), reading)
    assert [(s.text, s.evidence.extracted_by) for s in found] == [
        ("Latency is 40 ms.", DETERMINISTIC)
    ]
    assert writes == {}

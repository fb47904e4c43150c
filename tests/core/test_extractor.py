"""The extractor core: statements, types, polarity, restatements, JSON and tools."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

import pytest

from worldline.actors.extractor import core as extractor
from worldline.actors.extractor.text import belief_id, classify, normalize, statements
from worldline.actors.fusion import core as fusion
from worldline.actors.runtime.errors import InvalidInput
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.messages import Observe, OpVerdict, PosteriorUpdate, Statement
from worldline.protocols.subjects import obs, ops

W: Final = "w1"
T0: Final = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def observe(
    text: str,
    *,
    obs_id: str = "obs-1",
    source: str = "",
    role: str = "artifact",
    media_type: str = "text",
) -> Observe:
    return Observe(
        obs_id=obs_id,
        author="alice",
        at=T0,
        source=source,
        text=text,
        role=role,  # type: ignore[arg-type]
        media_type=media_type,  # type: ignore[arg-type]
    )


def extract(o: Observe, world: str = W) -> list[Statement]:
    ctx = Context(
        world=world, author="alice", subject=obs(world, "alice"), seq=1, now=T0
    )
    out = extractor.handle(MemoryState(), o, ctx).out
    found = []
    for item in out:
        assert item.subject == ops(world, extractor.AUTHOR)
        assert isinstance(item.message, Statement)
        assert item.msg_id == item.message.op_id
        found.append(item.message)
    return found


def test_statements_split_lines_sentences_and_bullets() -> None:
    text = (
        "# Standup notes\n"
        "- The cache is cold. Builds take 12 min!\n"
        "* Deploys   happen\tdaily\n"
        "```\ncode = 'not a statement'\n```\n"
        "1. Tests are flaky?\n"
        "2) version 2.5 is pinned\n"
        "   Plain line.   \n"
        "- Same thing. Same thing.\n"
    )
    assert statements(text) == [
        "The cache is cold.",
        "Builds take 12 min!",
        "Deploys happen daily",
        "Tests are flaky?",
        "version 2.5 is pinned",
        "Plain line.",
        "Same thing.",
    ]


@pytest.mark.parametrize(
    ("sentence", "kind", "negated"),
    [
        ("Authentication is enforced at the API middleware.", "claim", False),
        ("The export endpoint does not check auth.", "claim", True),
        ("Is the TPA segment growing?", "gap", False),
        ("Pilots probably convert within a quarter.", "assumption", False),
        ("I think the cache is warm.", "assumption", False),
        ("A schema change risks an outage during deploy.", "risk", False),
    ],
)
def test_classify_reads_type_and_polarity(
    sentence: str, kind: str, negated: bool
) -> None:
    reading = classify(sentence)
    assert (reading.type, reading.negated) == (kind, negated)


def test_a_restatement_names_the_same_belief() -> None:
    a = "Auth is enforced at the middleware."
    b = "The middleware enforces auth"
    negated = "Auth isn't enforced at the middleware."
    assert normalize(a)[0] == normalize(b)[0] == normalize(negated)[0]
    assert belief_id(W, a) == belief_id(W, b) == belief_id(W, negated)
    assert belief_id(W, a) != belief_id("w2", a)
    assert belief_id(W, a) != belief_id(W, "Auth is enforced at the gateway.")


def test_statements_carry_typed_evidence_from_the_artifact() -> None:
    found = extract(
        observe(
            "Auth is enforced at the middleware.\nExport does not check auth.\n"
            "Is the SLA signed?",
            source="audit.md",
        )
    )
    assert [(s.type, s.negated, s.evidence.direction) for s in found] == [
        ("claim", False, "supports"),
        ("claim", True, "refutes"),
        ("gap", False, "neutral"),
    ]
    assert {s.evidence.kind for s in found[:2]} == {"citation"}
    assert all(s.evidence.source == "audit.md" for s in found)
    assert all(s.evidence.artifact == "obs-1" for s in found)
    assert all(s.evidence.belief_id == s.belief_id for s in found)


@pytest.mark.parametrize(
    ("role", "kind"), [("artifact", "citation"), ("output", "inference"),
                       ("tool", "measurement")],
)  # fmt: skip
def test_evidence_kind_follows_what_produced_the_artifact(role: str, kind: str) -> None:
    (found,) = extract(observe("Builds take 12 minutes.", role=role))
    assert found.evidence.kind == kind
    (hedged,) = extract(observe("Builds might take 12 minutes.", role=role))
    assert hedged.evidence.kind == "assumption"


def test_the_same_observation_twice_gives_the_same_ops() -> None:
    o = observe("One fact. Another fact.")
    assert extract(o) == extract(o)
    again = extract(observe("One fact. Another fact.", obs_id="obs-2"))
    assert [s.belief_id for s in again] == [s.belief_id for s in extract(o)]
    assert {s.evidence.id for s in again}.isdisjoint(s.evidence.id for s in extract(o))


def test_another_agent_naming_the_same_observation_id_gets_other_ids() -> None:
    """Issue 23, F12: an ``obs_id`` is only a claim in the body; spock's observation
    naming zora's takes none of the op (or evidence) ids hers will carry."""

    def ids(agent: str, text: str) -> tuple[list[str], list[str]]:
        o = Observe(obs_id="obs-zora", author=agent, at=T0, text=text)
        ctx = Context(world=W, author=agent, subject=obs(W, agent), seq=1, now=T0)
        out = [i.message for i in extractor.handle(MemoryState(), o, ctx).out]
        found = [m for m in out if isinstance(m, Statement)]
        assert len(found) == len(out) > 0
        return [m.op_id for m in found], [m.evidence.id for m in found]

    zora = ids("zora", "The audit log keeps 92 days. The archive runs at 3.")
    spock = ids("spock", "Filler. Nothing to see.")
    assert set(zora[0]).isdisjoint(spock[0])
    assert set(zora[1]).isdisjoint(spock[1])
    assert ids("zora", "The audit log keeps 92 days. The archive runs at 3.") == zora


def test_empty_input_changes_nothing() -> None:
    assert extract(observe("")) == []
    assert extract(observe("   \n# only a heading\n")) == []


def test_json_artifacts_state_claims_and_evidence() -> None:
    artifact = (
        '{"claims": [{"text": "Market size is 4.2B", "type": "assumption"}],'
        ' "evidence": [{"belief": "Market size is 4.2B", "direction": "refutes",'
        ' "kind": "measurement", "source": "sec-filing", "text": "3.1B in the 10-K"}],'
        ' "extra": "ignored"}'
    )
    claim, evidence = extract(observe(artifact, media_type="json"))
    assert claim.type == "assumption"
    assert claim.belief_id == evidence.belief_id
    assert (evidence.evidence.direction, evidence.evidence.kind) == (
        "refutes",
        "measurement",
    )
    assert evidence.evidence.source == "sec-filing"
    assert evidence.evidence.text == "3.1B in the 10-K"


def test_a_tool_result_is_a_measurement_from_the_tool() -> None:
    (found,) = extract(
        observe('{"tool": "pytest", "result": "All 42 tests pass."}', media_type="json")
    )
    assert found.evidence.kind == "measurement"
    assert found.evidence.source == "tool:pytest"


@pytest.mark.parametrize(
    "artifact",
    ['{"claims": "not a list"}', "[1, 2, 3]", '{"claims": [{"text": ""}]}',
     "{" * 5000, '{"evidence": [{"belief": "x", "direction": "sideways",'
     ' "kind": "citation"}]}'],
)  # fmt: skip
def test_bad_json_artifacts_are_rejected_with_the_expected_shape(artifact: str) -> None:
    with pytest.raises(InvalidInput, match="expected an object"):
        extract(observe(artifact, media_type="json"))


def test_forged_author_and_oversized_artifacts_are_rejected() -> None:
    ctx = Context(world=W, author="mallory", subject=obs(W, "mallory"), seq=1, now=T0)
    with pytest.raises(InvalidInput, match="author"):
        extractor.handle(MemoryState(), observe("A fact."), ctx)
    at_limit = "\n".join(f"Fact number {i}." for i in range(extractor.MAX_STATEMENTS))
    assert len(extract(observe(at_limit))) == extractor.MAX_STATEMENTS
    with pytest.raises(InvalidInput, match=str(extractor.MAX_STATEMENTS)):
        extract(observe(at_limit + "\nOne fact too many."))


@pytest.mark.timeout(30)
def test_a_megabyte_of_short_statements_is_refused_in_linear_time() -> None:
    """A 1 MB artifact of ~100k distinct sentences, as a raw bus client may send
    (the SDK refuses it first): refused at once. Giving each statement its context
    once copied every statement before it, before the count was checked: time
    that grew with the square of the statements (2 s at 20k, about a minute at
    100k), holding the extractor while it ran."""
    flood = " ".join(f"Fact {i}." for i in range(100_000))[: 1024 * 1024]
    with pytest.raises(InvalidInput, match=str(extractor.MAX_STATEMENTS)):
        extract(observe(flood))


def _fuse(
    state: MemoryState,
    found: list[Statement],
    start: int,
    verdicts: list[OpVerdict] | None = None,
) -> list[PosteriorUpdate]:
    """Fusion's posteriors for ``found``; its verdicts (an op that changed nothing)
    go to ``verdicts``."""
    updates = []
    for seq, statement in enumerate(found, start=start):
        ctx = Context(
            world=W, author=extractor.AUTHOR, subject=ops(W, extractor.AUTHOR),
            seq=seq, now=T0,
        )  # fmt: skip
        for out in state.apply(fusion.handle(state, statement, ctx)):
            if isinstance(out.message, OpVerdict) and verdicts is not None:
                verdicts.append(out.message)
                continue
            assert isinstance(out.message, PosteriorUpdate)
            updates.append(out.message)
    return updates


def test_a_negated_restatement_lowers_the_belief_it_restates() -> None:
    state = MemoryState()
    (first,) = _fuse(state, extract(observe("Auth is enforced at the middleware.")), 1)
    later = extract(observe("The middleware doesn't enforce auth.", obs_id="obs-2"))
    (second,) = _fuse(state, later, 2)
    assert second.belief.id == first.belief.id
    assert second.belief.text == "Auth is enforced at the middleware."
    assert first.belief.confidence is not None
    assert second.belief.confidence is not None
    assert second.belief.confidence < first.belief.confidence
    assert second.belief.evidence_count == 2
    # Re-observing the same artifact (same observation id) changes nothing: no
    # posterior, and fusion says so (a verdict the writer reads through op_status).
    verdicts: list[OpVerdict] = []
    assert _fuse(state, later, 3, verdicts) == []
    assert [v.outcome for v in verdicts] == ["unchanged"]


def test_a_first_negated_statement_is_believed_as_written() -> None:
    state = MemoryState()
    (update,) = _fuse(state, extract(observe("Export does not check auth.")), 1)
    assert update.belief.text == "Export does not check auth."
    assert update.belief.confidence is not None
    assert update.belief.confidence > 0.5


@pytest.mark.parametrize(
    ("sentence", "kind", "negated"),
    [("It is not.", "claim", True), ("This is a risk.", "risk", False),
     ("The cache is warm, I guess.", "assumption", False)],
)  # fmt: skip
def test_a_word_at_the_end_of_a_sentence_still_counts(
    sentence: str, kind: str, negated: bool
) -> None:
    reading = classify(sentence)
    assert (reading.type, reading.negated) == (kind, negated)
    assert "." not in reading.key


def test_a_hand_entered_negation_is_supported_by_its_restatement() -> None:
    from worldline.protocols.messages import AddBelief

    state = MemoryState()
    text = "Export does not check auth."
    add = AddBelief(op_id="op-a", author="alice", at=T0,
                    belief_id=belief_id(W, text), text=text)  # fmt: skip
    ctx = Context(world=W, author="alice", subject=ops(W, "alice"), seq=1, now=T0)
    state.apply(fusion.handle(state, add, ctx))
    (update,) = _fuse(state, extract(observe(text)), 2)
    assert update.belief.confidence is not None
    assert update.belief.confidence > 0.5


def _trust(state: MemoryState, source: str, trust: float, seq: int) -> list[str]:
    """Set ``source``'s trust (as the operator, who may set any) and return the ids
    of the beliefs fusion re-read, with their new confidences, as ``id=confidence``
    strings."""
    from worldline.protocols.messages import SetTrust

    who = "operator"
    op = SetTrust(op_id=f"op-t{seq}", author=who, at=T0, source=source, trust=trust)
    ctx = Context(world=W, author=who, subject=ops(W, who), seq=seq, now=T0)
    changed = []
    for out in state.apply(fusion.handle(state, op, ctx)):
        if isinstance(out.message, PosteriorUpdate):
            changed.append(f"{out.message.belief.id}={out.message.belief.confidence}")
        else:
            assert isinstance(out.message, OpVerdict)
            assert out.message.outcome == "applied", out.message.reason
    return changed


def test_extracted_evidence_is_the_observing_agents() -> None:
    (statement,) = extract(observe("The cache is cold.", source="docs"))
    assert statement.author == extractor.AUTHOR  # the op: the extractor's subject
    assert statement.evidence.author == "alice"  # the evidence: who observed it
    assert statement.evidence.source == "docs"


def test_trust_in_the_observing_agent_weighs_what_it_observed() -> None:
    state = MemoryState()
    found = extract(observe("The cache is cold.", source="docs"))
    (update,) = _fuse(state, found, 1)
    believed = update.belief.confidence
    assert believed is not None
    assert believed > 0.5
    # The extractor is no witness: its trust reaches no extracted belief.
    assert _trust(state, "agent:extractor", 0.0, 2) == []
    # The agent that observed it is: silencing it takes its citation back out.
    (changed,) = _trust(state, "agent:alice", 0.0, 3)
    belief, confidence = changed.split("=")
    assert belief == update.belief.id
    assert float(confidence) == pytest.approx(0.5)
    assert float(confidence) < believed
    # Another agent's trust does not touch it.
    assert _trust(state, "agent:carol", 0.0, 4) == []

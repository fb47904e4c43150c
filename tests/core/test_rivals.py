"""Rival answers (issue 18, part 1) and learned source reliability in fusion (parts 2
and 3): the answers of one slot weigh on each other in the posterior, partial
agreement counts, an ``AssessSources`` op learns which sources to believe and which
copy, and a re-added statement is reconciled as evidence."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Final

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import posterior, rivals
from worldline.actors.fusion import assess, records, slots
from worldline.actors.fusion import core as fusion
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import (
    AddBelief,
    AddEvidence,
    AssessSources,
    Belief,
    CloseBelief,
    DeclareWorld,
    OpsInbox,
    OpVerdict,
    PosteriorUpdate,
    SetTrust,
    Statement,
)
from worldline.protocols.subjects import ops
from worldline.protocols.world import Authority, WorldDecl, WorldInfo

W: Final = "w1"
AT: Final = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def item(
    belief_id: str, source: str, n: int = 0, direction: str = "supports"
) -> Evidence:
    return Evidence(
        id=f"ev-{belief_id}-{source}-{n}",
        belief_id=belief_id,
        direction=direction,  # type: ignore[arg-type]
        kind="citation",
        source=source,
        observed_at=AT,
        author="ada",
    )


def member(belief_id: str, text: str, *sources: str) -> rivals.Member:
    return rivals.Member(belief_id, text, [item(belief_id, s) for s in sources])


# --- the pure math ------------------------------------------------------------------


def test_support_for_a_rival_is_evidence_against_an_answer() -> None:
    alone = posterior.read(None, [item("a", "s1")], {}, AT)
    slot = [member("a", "Tolkien", "s1"), member("b", "Lewis", "s2", "s3")]
    a = rivals.read("a", None, slot, {}, AT)
    b = rivals.read("b", None, slot, {}, AT)
    assert a.confidence is not None
    assert alone.confidence is not None
    assert b.confidence is not None
    assert a.confidence < alone.confidence  # its rival's two stores count against it
    assert b.confidence > a.confidence  # two stores beat one
    assert a.refute == pytest.approx(2 * posterior.KIND_WEIGHT["citation"])


def test_a_source_that_gives_two_answers_splits_its_vote() -> None:
    slot = [member("a", "Tolkien", "s1", "s2"), member("b", "Lewis", "s2")]
    evidence, scale = rivals.slot_evidence("a", slot)
    own = {e.id: scale.get(e.id, 1.0) for e in evidence if not e.id.startswith("~")}
    assert own == {"ev-a-s1-0": 1.0, "ev-a-s2-0": 0.5}
    implied = {e.id: scale[e.id] for e in evidence if e.id.startswith("~")}
    assert implied == {"~b~ev-b-s2-0": 0.5}


def test_partial_overlap_is_partial_support() -> None:
    truth = "Alfred Aho, Ravi Sethi, Jeffrey Ullman"
    partial = "Alfred Aho, Jeffrey Ullman"
    other = "Niklaus Wirth"
    assert rivals.similarity(truth, partial) == pytest.approx(4 / 6)
    assert rivals.similarity(truth, other) == 0.0
    assert rivals.similarity("J. K. Rowling", "Rowling, J K") == 1.0
    # The question's own words are no agreement between two answers to it.
    asked = "who wrote The Hobbit"
    assert (
        rivals.similarity("Tolkien wrote The Hobbit", "Lewis wrote The Hobbit", asked)
        == 0.0
    )
    framed = rivals.similarity("Tolkien wrote The Hobbit", "Lewis wrote The Hobbit")
    assert framed == 0.5
    near = [member("t", truth), member("p", partial, "s1", "s2")]
    far = [member("t", truth), member("o", other, "s1", "s2")]
    with_near = rivals.read("t", None, near, {}, AT).confidence
    with_far = rivals.read("t", None, far, {}, AT).confidence
    assert with_near is not None
    assert with_far is not None
    assert with_near > with_far  # stores listing most of its authors half back it


def test_refuting_a_rival_says_nothing_about_an_answer() -> None:
    slot = [
        member("a", "Tolkien", "s1"),
        rivals.Member("b", "Lewis", [item("b", "s2", direction="refutes")]),
    ]
    alone = posterior.read(None, [item("a", "s1")], {}, AT)
    assert rivals.read("a", None, slot, {}, AT) == alone


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.sampled_from(["s1", "s2", "s3", "s4"])),
        min_size=1,
        max_size=14,
    ),
    st.randoms(use_true_random=False),
)
def test_a_slot_reading_is_order_independent(
    claims: list[tuple[str, str]], rng: random.Random
) -> None:
    """P8 for slots: any order of the members and their evidence, same bits."""
    texts = {"a": "Tolkien", "b": "Lewis", "c": "Tolkien and Lewis"}
    members = [
        rivals.Member(
            b, texts[b], [item(b, s, n) for n, (x, s) in enumerate(claims) if x == b]
        )
        for b in "abc"
    ]
    shuffled = [
        rivals.Member(m.id, m.text, rng.sample(list(m.evidence), len(m.evidence)))
        for m in rng.sample(members, len(members))
    ]
    for b in "abc":
        assert rivals.read(b, 0.3, members, {"s2": 0.5}, AT) == rivals.read(
            b, 0.3, shuffled, {"s2": 0.5}, AT
        )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["s1", "s2", "s3", "s4", "s5"]), max_size=10))
def test_more_support_for_a_rival_never_raises_an_answer(extra: list[str]) -> None:
    base = [member("a", "Tolkien", "s1", "s2"), member("b", "Lewis", "s3")]
    before = rivals.read("a", None, base, {}, AT).confidence
    grown = [base[0], member("b", "Lewis", "s3", *extra)]
    after = rivals.read("a", None, grown, {}, AT).confidence
    assert before is not None
    assert after is not None
    assert after <= before + 1e-12


# --- fusion ---------------------------------------------------------------------------


def ctx(agent: str, seq: int) -> Context:
    return Context(world=W, author=agent, subject=ops(W, agent), seq=seq, now=AT)


def answer(belief_id: str, text: str, slot: str = "q1", **kw: object) -> AddBelief:
    return AddBelief(
        op_id=f"op-{belief_id}",
        author="ada",
        at=AT,
        belief_id=belief_id,
        text=text,
        slot=slot,
        **kw,  # type: ignore[arg-type]
    )


def cite(belief_id: str, source: str, n: int = 0, at: datetime = AT) -> AddEvidence:
    ev = msgspec.structs.replace(item(belief_id, source, n), observed_at=at)
    return AddEvidence(op_id=f"op-{ev.id}", author="ada", at=at, evidence=ev)


# ada, the loader of these tests, is allowed to report every source she names: each
# store is its own voice (undeclared, all would be ada's one voice).
DECLARE: Final = DeclareWorld(
    op_id="op-declare",
    author="ada",
    at=AT,
    declaration=WorldDecl(
        world=WorldInfo(id=W),
        authority=Authority(admins=["ada"]),
        sources={"*": ["ada"]},
    ),
)


def run(
    state: MemoryState,
    log: list[OpsInbox],
    shard: tuple[int, int] = (0, 1),
    *,
    declare: bool = True,
) -> dict[str, Belief]:
    """Apply ``log`` (after :data:`DECLARE` on a fresh store, unless not
    ``declare``); the last posterior of each belief."""
    last: dict[str, Belief] = {}
    if declare and not state.data:
        state.apply(fusion.handle(state, DECLARE, ctx("ada", 0), shard=shard))
    for seq, op in enumerate(log, start=1):
        step = fusion.handle(state, op, ctx(op.author, seq), shard=shard)
        state.apply(step)
        for out in step.out:
            if isinstance(out.message, PosteriorUpdate):
                last[out.message.belief.id] = out.message.belief
    return last


def test_evidence_for_one_answer_re_reads_its_rivals_in_one_op() -> None:
    state = MemoryState()
    run(state, [answer("a", "Tolkien"), answer("b", "Lewis"), cite("a", "s1")])
    step = fusion.handle(state, cite("b", "s2"), ctx("ada", 9))
    moved = {
        o.message.belief.id: o.message.belief
        for o in step.out
        if isinstance(o.message, PosteriorUpdate)
    }
    assert set(moved) == {"a", "b"}  # one op moved both answers
    assert moved["b"].slot == "q1"
    a, b = moved["a"].confidence, moved["b"].confidence
    assert a is not None
    assert b is not None
    assert a == pytest.approx(b)  # one store each: a tie


def test_a_retracted_answer_no_longer_weighs_against_its_rivals() -> None:
    state = MemoryState()
    last = run(
        state,
        [
            answer("a", "Tolkien"),
            answer("b", "Lewis"),
            cite("a", "s1"),
            cite("b", "s2"),
            cite("b", "s3"),
        ],
    )
    held = last["a"].confidence
    closed = run(
        state,
        [
            CloseBelief(
                op_id="op-c", author="ada", at=AT, belief_id="b", how="retracted"
            )
        ],
    )
    assert closed["a"].confidence is not None
    assert held is not None
    assert closed["a"].confidence > held


def test_a_slot_holds_at_most_max_rivals_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rivals, "MAX_RIVALS", 2)
    state = MemoryState()
    run(state, [answer("a", "Tolkien"), answer("b", "Lewis")])
    step = fusion.handle(state, answer("c", "Wirth"), ctx("ada", 5))
    verdict = step.out[0].message
    assert isinstance(verdict, OpVerdict)
    assert (verdict.outcome, verdict.code) == ("rejected", "full")


def slot_log() -> list[OpsInbox]:
    log: list[OpsInbox] = []
    for q in range(12):
        log += [answer(f"q{q}-v{v}", AUTHORS[v], slot=f"q{q}") for v in range(3)]
        log.append(cite(f"q{q}-v{q % 3}", f"store-{q % 5}", q))
        log.append(cite(f"q{q}-v{(q + 1) % 3}", f"store-{(q + 2) % 5}", q))
        log.append(cite(f"q{q}-v{q % 3}", f"store-{(q + 3) % 5}", q))
    log.append(AssessSources(op_id="op-assess", author="ada", at=AT))
    return log


def test_sharded_fusion_keeps_a_slot_in_one_shard_and_equals_one_instance() -> None:
    log = slot_log()
    one = run(MemoryState(), log)
    split: dict[str, Belief] = {}
    for index in range(3):
        split.update(run(MemoryState(), log, shard=(index, 3)))
    assert set(split) == set(one)
    # Without an assessment, sharded and whole agree to the bit; an assessment learns
    # from each shard's own slots (docs/belief-math.md), so compare before it.
    before = log[:-1]
    whole = run(MemoryState(), before)
    parts: dict[str, Belief] = {}
    for index in range(3):
        parts.update(run(MemoryState(), before, shard=(index, 3)))
    assert parts == whole
    homes = {
        index: set(run(MemoryState(), before, shard=(index, 3))) for index in range(3)
    }
    for q in range(12):
        owners = [i for i, ids in homes.items() if f"q{q}-v0" in ids]
        assert owners == [fusion.shard_of(f"q{q}", 3)]
        assert all(f"q{q}-v{v}" in homes[owners[0]] for v in range(3))


AUTHORS: Final = ("Tolkien", "Lewis", "Wirth", "Knuth")


def bookstores(copies: int) -> list[OpsInbox]:
    """Forty questions; five honest stores right 90% of the time, one bad store that
    lists a quarter of them, all wrong, and ``copies`` clones of the bad store."""
    rng = random.Random(7)
    log: list[OpsInbox] = []
    honest = [f"store-{i}" for i in range(5)]
    for q in range(40):
        log += [answer(f"q{q}-v{v}", AUTHORS[v], slot=f"q{q}") for v in range(4)]
        for n, store in enumerate(honest):
            if rng.random() < 0.45:
                continue  # stores list a subset of the books
            right = rng.random() < 0.9
            log.append(cite(f"q{q}-v{0 if right else rng.randint(1, 3)}", store, n))
        if q % 4:
            continue
        wrong = 1 + q % 3
        log += [cite(f"q{q}-v{wrong}", f"bad-{c}", 100 + c) for c in range(copies + 1)]
    return log


def best(last: dict[str, Belief]) -> dict[str, str]:
    picks: dict[str, tuple[float, str]] = {}
    for b in last.values():
        held = picks.get(b.slot)
        c = b.confidence or 0.0
        if held is None or c > held[0] or (c == held[0] and b.id < held[1]):
            picks[b.slot] = (c, b.id)
    return {q: i for q, (_, i) in picks.items()}


def accuracy(picks: dict[str, str]) -> float:
    return sum(i.endswith("-v0") for i in picks.values()) / len(picks)


def test_learned_reliability_resists_clones_of_a_bad_source() -> None:
    plain = run(MemoryState(), bookstores(copies=6))
    assessed_state = MemoryState()
    assessed = run(
        assessed_state,
        [*bookstores(copies=6), AssessSources(op_id="op-as", author="ada", at=AT)],
    )
    covered = {f"q{q}" for q in range(0, 40, 4)}
    bad_books = {q: i for q, i in best(plain).items() if q in covered}
    assert accuracy(bad_books) == 0.0  # seven bad voices outvote the honest stores
    learned = best(assessed)
    assert accuracy({q: i for q, i in learned.items() if q in covered}) >= 0.8
    assert accuracy(learned) > accuracy(best(plain)) + 0.15
    bad = assess.learned(assessed_state, W, "bad-3")
    good = assess.learned(assessed_state, W, "store-1")
    assert bad is not None
    assert good is not None
    assert bad.factor < 0.2 < 1.0 < good.factor
    assert bad.independence < 0.5  # seen as copies of one another


def test_an_assessment_is_replay_identical_and_a_lock_pins_a_source() -> None:
    log = [
        *bookstores(copies=2),
        SetTrust(
            op_id="op-lock", author="ada", at=AT, source="bad-0", trust=1.0, lock=True
        ),
        AssessSources(op_id="op-as", author="ada", at=AT),
    ]
    first, second = MemoryState(), MemoryState()
    assert run(first, log) == run(second, log)
    assert first.data == second.data
    trust = records.trust_of(first, W, [item("x", "bad-0"), item("x", "bad-1")])
    assert trust["bad-0"] == 1.0  # locked: the learned factor does not apply
    assert trust["bad-1"] < 0.5


def test_re_adding_a_statement_is_reconciled_as_evidence() -> None:
    state = MemoryState()
    first = run(state, [answer("a", "Tolkien", slot="q", confidence=0.6)])
    again = AddBelief(
        op_id="op-again",
        author="bob",
        at=AT + timedelta(hours=1),
        belief_id="a",
        text="Tolkien",
        slot="q",
    )
    step = fusion.handle(
        state,
        again,
        Context(world=W, author="bob", subject=ops(W, "bob"), seq=2, now=AT),
    )
    state.apply(step)
    update = step.out[0].message
    assert isinstance(update, PosteriorUpdate)
    assert update.belief.evidence_count == 1
    assert first["a"].confidence is not None
    assert update.belief.confidence is not None
    assert update.belief.confidence > first["a"].confidence
    stored = fusion.decode_fused(state.data[fusion.belief_key(W, "a")])
    assert [(e.kind, e.source, e.author) for e in stored.evidence] == [
        ("user-assertion", "agent:bob", "bob")
    ]
    other_slot = msgspec.structs.replace(again, op_id="op-slot", slot="q2")
    refused = fusion.handle(state, other_slot, ctx("bob", 3)).out[0].message
    assert isinstance(refused, OpVerdict)
    assert refused.code == "conflict"


def test_membership_is_known_in_every_shard() -> None:
    states = [MemoryState() for _ in range(3)]
    for index, state in enumerate(states):
        run(state, [answer("a", "Tolkien", slot="q9")], shard=(index, 3))
    for state in states:
        assert slots.slot_of(state, W, "a") == "q9"


def test_only_the_extractor_reports_evidence_as_another_agent() -> None:
    def statement(author: str) -> Statement:
        ev = msgspec.structs.replace(item("s1", "doc"), author="bob")
        return Statement(
            op_id=f"op-st-{author}",
            author=author,
            at=AT,
            belief_id="s1",
            text="The cache is cold.",
            evidence=ev,
        )

    state = MemoryState()
    forged = fusion.handle(state, statement("mallory"), ctx("mallory", 1))
    verdict = forged.out[0].message
    assert isinstance(verdict, OpVerdict)
    assert (verdict.outcome, verdict.code) == ("rejected", "invalid")
    assert not forged.writes
    observed = fusion.handle(state, statement("extractor"), ctx("extractor", 2))
    assert isinstance(observed.out[0].message, PosteriorUpdate)


def test_an_assessment_is_applied_off_the_event_loop() -> None:
    """The runtime applies a batch holding a heavy op in a worker thread."""
    from worldline.actors.fusion.service import spec
    from worldline.protocols.messages import encode

    (fusion_input,) = spec().inputs
    assert fusion_input.heavy is not None
    assessment = AssessSources(op_id="op-as", author="ada", at=AT)
    assert fusion_input.heavy(encode(assessment))
    assert not fusion_input.heavy(encode(answer("a", "Tolkien")))


def test_stores_that_write_one_answer_differently_agree_when_learning() -> None:
    """Two stores give the true author in two spellings of the same words, a third a
    wrong one: the assessment counts the two as agreeing (one answer key)."""
    log: list[OpsInbox] = []
    for q in range(8):
        first, last = f"Ann{q}", f"Lee{q}"
        log += [
            answer(f"q{q}-a", f"{first} {last}", slot=f"q{q}"),
            answer(f"q{q}-b", f"{last}, {first}", slot=f"q{q}"),
            answer(f"q{q}-c", f"Bob{q} Ray{q}", slot=f"q{q}"),
            cite(f"q{q}-a", "store-a", q),
            cite(f"q{q}-b", "store-b", q),
            cite(f"q{q}-c", "store-c", q),
        ]
    state = MemoryState()
    run(state, [*log, AssessSources(op_id="op-as", author="ada", at=AT)])
    a, b, c = (assess.learned(state, W, f"store-{s}") for s in "abc")
    assert a is not None
    assert b is not None
    assert c is not None
    assert a.accuracy == b.accuracy
    assert a.accuracy > 0.8 > c.accuracy
    assert rivals.answer_key("Ann Lee", "q") == rivals.answer_key("Lee, Ann", "q")


def test_an_assessment_with_nothing_new_changes_nothing() -> None:
    state = MemoryState()
    log = [*bookstores(copies=1), AssessSources(op_id="op-as1", author="ada", at=AT)]
    run(state, log)
    again = fusion.handle(
        state, AssessSources(op_id="op-as2", author="ada", at=AT), ctx("ada", 900)
    )
    assert not again.writes
    (verdict,) = [o.message for o in again.out]
    assert isinstance(verdict, OpVerdict)
    assert verdict.outcome == "unchanged"
    state.apply(fusion.handle(state, cite("q1-v0", "store-new"), ctx("ada", 901)))
    third = fusion.handle(
        state, AssessSources(op_id="op-as3", author="ada", at=AT), ctx("ada", 902)
    )
    assert third.writes  # a new answer's evidence: something to learn again


def test_the_heavy_marker_names_the_assessment_tag() -> None:
    from worldline.actors.fusion import learning

    tag = AssessSources.__struct_config__.tag
    assert isinstance(tag, str)
    assert tag.encode() == learning.ASSESS_TAG

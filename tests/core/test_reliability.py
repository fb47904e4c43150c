"""The reliability core (issue 18): source accuracy learned from agreement, rival
answers exclusive, copy detection; pinned property by property
(docs/belief-math.md, "Source reliability and copying")."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model.reliability import (
    Claim,
    Estimate,
    Params,
    best_answers,
    estimate,
    majority,
)

_claims = st.lists(
    st.builds(
        Claim,
        question=st.sampled_from(["q0", "q1", "q2", "q3"]),
        answer=st.sampled_from(["a", "b", "c"]),
        source=st.sampled_from(["s0", "s1", "s2", "s3", "s4"]),
    ),
    min_size=1,
    max_size=24,
)


def _conf(result: Estimate, question: str, answer: str) -> float:
    return next(
        r.confidence
        for r in result.answers
        if (r.question, r.answer) == (question, answer)
    )


@settings(max_examples=60, deadline=None)
@given(_claims, st.randoms(use_true_random=False), st.booleans())
def test_order_independent(claims: list[Claim], rng: object, copies: bool) -> None:
    """Any permutation (and repetition) of the same claims gives identical bytes."""
    shuffled = list(claims) + list(claims[: len(claims) // 2])
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    params = Params(detect_copies=copies)
    first = msgspec.json.encode(estimate(claims, params))
    assert msgspec.json.encode(estimate(shuffled, params)) == first


@settings(max_examples=60, deadline=None)
@given(_claims, st.data())
def test_a_duplicate_claim_is_one_witness(
    claims: list[Claim], data: st.DataObject
) -> None:
    """Repeating a source's claim (ten paraphrases of one source) changes nothing."""
    repeated = data.draw(st.sampled_from(claims))
    more = claims + [repeated] * data.draw(st.integers(1, 10))
    assert msgspec.json.encode(estimate(more)) == msgspec.json.encode(estimate(claims))


@settings(max_examples=80, deadline=None)
@given(_claims, st.data())
def test_an_agreeing_source_never_lowers_the_answer(
    claims: list[Claim], data: st.DataObject
) -> None:
    """Adding a new source that gives an answer does not lower that answer's
    confidence, and rivals' confidences do not rise together above it. Without copy
    detection only: with it, hypothesis found a newcomer that agrees with a source
    on its one claim judged that source's likely copy, and the pair's discount then
    cost the answer a little (3.7e-4 -> 2.7e-4; docs/belief-math.md)."""
    target = data.draw(st.sampled_from(claims))
    params = Params(detect_copies=False)
    before = estimate(claims, params)
    after = estimate([*claims, Claim(target.question, target.answer, "new")], params)
    assert (
        _conf(after, target.question, target.answer)
        >= _conf(before, target.question, target.answer) - 1e-12
    )


def _world(clones: int) -> list[Claim]:
    """100 questions whose truth is "t", answered by three honest sources each wrong on
    a different tenth; one bad source answers 30 of them, always wrongly ("f"), and
    ``clones`` sources copy it verbatim (the same 30 questions, the same answers)."""
    claims: list[Claim] = []
    for i in range(100):
        q = f"q{i:03d}"
        claims.extend(
            Claim(q, f"x{h}" if i % 10 == h else "t", f"honest{h}") for h in range(3)
        )
        if i < 30:
            copiers = ["bad"] + [f"clone{k}" for k in range(clones)]
            claims.extend(Claim(q, "f", name) for name in copiers)
    return claims


def test_clones_of_a_bad_source_are_not_independent_witnesses() -> None:
    """Ten copies of one bad source outvote three honest sources under a vote and
    without copy detection; with it, the copies count as about one witness and the
    truth wins every question they copied."""
    claims = _world(10)
    copied = {f"q{i:03d}" for i in range(30)}
    assert {majority(claims)[q] for q in copied} == {"f"}
    blind = best_answers(estimate(claims, Params(detect_copies=False)))
    assert {blind[q] for q in copied} == {"f"}
    seeing = estimate(claims)
    assert {best_answers(seeing)[q] for q in copied} == {"t"}
    for row in seeing.answers:
        if row.answer == "f":
            assert row.providers == 11
            assert row.witnesses < 1.2
    assert any({d.a, d.b} == {"bad", "clone0"} for d in seeing.dependence)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 12))
def test_the_number_of_clones_barely_matters(clones: int) -> None:
    """With copy detection the truth's confidence under k clones stays within a small
    margin of the one with none: the clones are one witness, not k."""
    alone = estimate(_world(0))
    with_clones = estimate(_world(clones))
    assert best_answers(with_clones) == best_answers(alone)
    for i in range(100):
        q = f"q{i:03d}"
        assert _conf(with_clones, q, "t") >= _conf(alone, q, "t") - 0.05


def test_reliability_is_learned_from_agreement() -> None:
    """A source that agrees with the consensus elsewhere outweighs two that do not,
    on a question where it stands against them (a vote would pick the pair)."""
    claims: list[Claim] = []
    for i in range(20):
        q = f"q{i:02d}"
        claims += [Claim(q, "t", "good"), Claim(q, "t", "w1"), Claim(q, "t", "w2")]
        claims += [Claim(q, f"n{i}", "noisy1"), Claim(q, f"m{i}", "noisy2")]
    claims += [Claim("x", "right", "good"), Claim("x", "wrong", "noisy1")]
    claims += [Claim("x", "wrong", "noisy2")]
    assert majority(claims)["x"] == "wrong"
    result = estimate(claims)
    assert best_answers(result)["x"] == "right"
    accuracy = {s.source: s.accuracy for s in result.sources}
    assert accuracy["good"] > 0.9 > 0.2 > accuracy["noisy1"]


def test_rival_answers_are_exclusive() -> None:
    """Confidences over one question's rivals sum to at most 1 (the rest is the mass
    of answers nobody gave)."""
    result = estimate(_world(3))
    totals: dict[str, float] = {}
    for row in result.answers:
        totals[row.question] = totals.get(row.question, 0.0) + row.confidence
    assert all(0.0 < t <= 1.0 + 1e-12 for t in totals.values())


def _prolific(lone: int = 400) -> list[Claim]:
    """A prolific source answering ``lone`` questions nobody else answers and 30 that
    two others answer too (agreeing with both on 20, standing alone against them on
    10), beside the clones world: with today's plain update its accuracy moves only
    30 / 430 of the way to its fixed point each round."""
    claims = _world(3)
    for i in range(lone):
        claims.append(Claim(f"p{i:03d}", "v", "prolific"))
    for i in range(30):
        q = f"c{i:02d}"
        claims += [Claim(q, "t", "honest0"), Claim(q, "t", "honest1")]
        claims.append(Claim(q, "t" if i < 20 else "w", "prolific"))
    return claims


@pytest.mark.parametrize("copies", [False, True])
def test_the_estimate_converges_whatever_the_round_cap(copies: bool) -> None:
    """The fixed point is reached (no accuracy or discount moves by more than the
    tolerance) well within 50 rounds, so caps of 50, 100 and 200 give the same picks
    and the same accuracies within the tolerance, and the estimate says so."""
    results = [
        estimate(_prolific(), Params(detect_copies=copies, max_rounds=cap))
        for cap in (50, 100, 200)
    ]
    tolerance = Params().tolerance
    for result in results:
        assert result.converged
        assert result.rounds < 50
        assert 0.0 <= result.change <= tolerance
    first = results[0]
    for other in results[1:]:
        assert best_answers(other) == best_answers(first)
        for a, b in zip(first.sources, other.sources, strict=True):
            assert a.source == b.source
            assert abs(a.accuracy - b.accuracy) <= tolerance


def test_the_converged_accuracy_is_the_fixed_point_of_the_plain_update() -> None:
    """Questions a source alone answers are solved, not iterated: the accuracy they
    converge to is the one the plain update reaches after many rounds (the prolific
    source's accuracy rests on its 30 contested answers alone)."""
    result = estimate(_prolific(), Params(detect_copies=False))
    again = estimate(_prolific(lone=40), Params(detect_copies=False))
    accuracy = {s.source: s.accuracy for s in result.sources}
    fewer = {s.source: s.accuracy for s in again.sources}
    assert abs(accuracy["prolific"] - fewer["prolific"]) <= 1e-5
    assert 0.5 < accuracy["prolific"] < 0.8


def test_the_copy_prior_is_learned_from_the_data_unless_set() -> None:
    """With copy detection the prior that a pair copies is estimated from the data:
    one pair a priori plus the expected number of sources whose answers agree with
    another's beyond independence, over both directions of every pair of sources. The
    bad source and its ten clones are 11 such sources (not the 55 pairs among them);
    with no clone, none; a set prior is used as given."""
    none = estimate(_world(0))
    clones = estimate(_world(10))
    assert none.copy_prior == pytest.approx(1.0 / (2 * (4 * 3 // 2)), rel=1e-6)
    assert clones.copy_prior == pytest.approx((1 + 11) / (2 * (14 * 13 // 2)), rel=1e-6)
    assert estimate(_world(10), Params(copy_prior=1e-3)).copy_prior == 1e-3
    assert estimate(_world(10), Params(detect_copies=False)).copy_prior == 0.0

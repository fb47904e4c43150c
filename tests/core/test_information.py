"""The expected information gain of a move (worldline/actors/belief_model/
information.py): entropies, the preposterior, and gains toward goals."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import information as info
from worldline.actors.belief_model.posterior import beta_sd, read, spread
from worldline.protocols.beliefs import BeliefEdge

positive = st.floats(min_value=0.05, max_value=200.0)
weights = st.floats(min_value=0.1, max_value=10.0)


def edge(
    eid: str, source: str, target: str, type: str = "depends_on", c: float = 0.9
) -> BeliefEdge:
    return BeliefEdge(id=eid, type=type, source=source, target=target, confidence=c)  # type: ignore[arg-type]


def test_entropy_in_bits() -> None:
    assert info.entropy(0.5) == 1.0
    assert info.entropy(0.0) == info.entropy(1.0) == 0.0
    assert info.entropy(0.2) == pytest.approx(info.entropy(0.8))
    assert info.entropy(0.25) == pytest.approx(0.8112781, abs=1e-7)
    with pytest.raises(ValueError, match="probability"):
        info.entropy(1.5)
    with pytest.raises(ValueError, match="probability"):
        info.entropy(math.nan)


def test_own_gain_by_hand() -> None:
    # Beta(1, 1) and one unit of evidence: either way the mean goes to 2/3 or 1/3.
    h = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    assert info.own_gain(1.0, 1.0, 1.0) == pytest.approx(1.0 - h)
    (p_s, m_s), (p_r, m_r) = info.preposterior(1.0, 3.0, 2.0)
    assert (p_s, m_s, p_r, m_r) == pytest.approx((0.25, 0.5, 0.75, 1 / 6))


@given(positive, positive)
def test_beta_parameters_invert_the_mean_and_sd(alpha: float, beta: float) -> None:
    mean = alpha / (alpha + beta)
    a, b = info.beta_parameters(mean, beta_sd(alpha, beta))
    assert a == pytest.approx(alpha, rel=1e-6)
    assert b == pytest.approx(beta, rel=1e-6)


def test_beta_parameters_read_disagreement_as_less_evidence() -> None:
    # Same mean, same total weight: the disputed belief holds less net evidence,
    # so one more check is worth more there.
    one_sided = info.beta_parameters(0.6, spread(6.0, 4.0, 0.0, 0.0))
    disputed = info.beta_parameters(0.6, spread(6.0, 4.0, 5.0, 3.0))
    assert sum(disputed) < sum(one_sided)
    assert info.own_gain(*disputed) > info.own_gain(*one_sided)


def test_beta_parameters_refuse_what_is_no_beta() -> None:
    with pytest.raises(ValueError, match="inside"):
        info.beta_parameters(1.0, 0.1)
    with pytest.raises(ValueError, match="at least 0"):
        info.beta_parameters(0.5, -0.1)
    with pytest.raises(ValueError, match="infinite"):
        info.beta_parameters(0.5, 0.0)
    # Wider than any Beta with that mean can be: the least concentrated one.
    a, b = info.beta_parameters(0.5, 0.9)
    assert 0 < a + b < 1e-3
    with pytest.raises(ValueError, match="positive"):
        info.own_gain(0.0, 1.0)
    with pytest.raises(ValueError, match="positive"):
        info.preposterior(1.0, 1.0, 0.0)


@given(positive, positive, weights)
def test_the_posterior_mean_is_a_martingale(a: float, b: float, w: float) -> None:
    (p_s, m_s), (p_r, m_r) = info.preposterior(a, b, w)
    assert p_s + p_r == pytest.approx(1.0)
    assert p_s * m_s + p_r * m_r == pytest.approx(a / (a + b), rel=1e-9)
    assert m_r <= a / (a + b) <= m_s


@given(positive, positive, weights)
def test_own_gain_is_never_negative_and_bounded_by_the_entropy(
    a: float, b: float, w: float
) -> None:
    gain = info.own_gain(a, b, w)
    assert 0.0 <= gain <= info.entropy(a / (a + b)) + 1e-12


def test_more_evidence_leaves_less_to_learn() -> None:
    # Same mean, growing concentration: each check is worth less.
    found = [info.own_gain(0.6 * n, 0.4 * n) for n in (1, 2, 4, 8, 16, 64)]
    assert found == sorted(found, reverse=True)
    assert found[-1] < found[0] / 5
    # A heavier check is worth more than a lighter one.
    assert info.own_gain(3.0, 2.0, 4.0) > info.own_gain(3.0, 2.0, 1.0)


def test_the_preposterior_matches_fusion_on_one_more_item() -> None:
    """The supporting outcome is what fusion's reading gives after one more
    supporting item of that weight (a fresh measurement weighs PROBE)."""
    from datetime import UTC, datetime

    from worldline.protocols.beliefs import Evidence

    now = datetime(2026, 1, 1, tzinfo=UTC)
    item = Evidence(
        id="ev-1", belief_id="b", direction="supports", kind="measurement",
        source="probe", observed_at=now, author="ada",
    )  # fmt: skip
    before = read(0.7, [], {}, now)
    after = read(0.7, [item], {}, now)
    (_, mean), _ = info.preposterior(before.alpha, before.beta, info.PROBE)
    assert mean == pytest.approx(after.confidence)


def test_premise_edges_point_from_the_dependent_to_its_premise() -> None:
    edges = [
        edge("e1", "a", "b"),  # a depends on b
        edge("e2", "c", "d", "derived_from"),  # c rests on d
        edge("e3", "s", "t", "supports"),  # t rests on s
        edge("e4", "x", "y", "contradicts"),
        edge("e5", "p", "q", c=0.0),  # believed absent
        BeliefEdge(id="e6", type="depends_on", source="m", target="n", removed=True),
    ]
    rest = info.premise_edges(edges)
    assert [(e.source, e.target, e.type) for e in rest] == [
        ("a", "b", "depends_on"),
        ("c", "d", "depends_on"),
        ("t", "s", "depends_on"),
    ]
    assert info.premises("a", rest) == {"b"}
    assert info.premises("b", rest) == set()


def test_gain_toward_a_goal_follows_what_the_goal_rests_on() -> None:
    beliefs = dict.fromkeys(("x", "deep", "aside", "backer"), (1.0, 1.0))
    edges = [
        edge("e1", "goal", "x"),
        edge("e2", "x", "deep"),
        edge("e3", "backer", "goal", "supports"),
        edge("e4", "aside", "other"),  # rests on something; nothing rests on it
    ]
    found = info.gains(beliefs, ["goal"], edges)
    assert set(found) == set(beliefs)
    assert found["aside"].goals == {}
    assert found["aside"].total == pytest.approx(info.OWN_SHARE * found["aside"].own)
    # One hop further, through an edge of strength 0.9, is worth less.
    assert found["x"].goals["goal"] > found["deep"].goals["goal"] > 0
    assert found["backer"].goals["goal"] > 0
    assert found["x"].served() == [("goal", found["x"].goals["goal"])]
    assert found["x"].total > found["aside"].total


def test_a_goal_settled_by_another_premise_gains_little() -> None:
    """If a sibling premise is almost surely false, the goal fails whatever x
    turns out to be: checking x tells the goal almost nothing."""
    edges = [edge("e1", "goal", "x", c=1.0), edge("e2", "goal", "y", c=1.0)]

    def toward(y: tuple[float, float]) -> float:
        return info.gains({"x": (1.0, 1.0), "y": y}, ["goal"], edges)["x"].goals["goal"]

    assert toward((0.01, 20.0)) < toward((20.0, 0.01)) / 10


def test_a_belief_two_goals_rest_on_serves_both() -> None:
    edges = [edge("e1", "g1", "x"), edge("e2", "g2", "x"), edge("e3", "g2", "y")]
    found = info.gains({"x": (2.0, 2.0), "y": (2.0, 2.0)}, ["g1", "g2"], edges)
    assert [g for g, _ in found["x"].served()] == sorted(
        ["g1", "g2"], key=lambda g: -found["x"].goals[g]
    )
    assert found["x"].toward_goals > found["y"].toward_goals
    assert set(found["y"].goals) == {"g2"}


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_gains_are_never_negative_and_do_not_depend_on_order(seed: int) -> None:
    rng = random.Random(seed)
    ids = [f"b{i}" for i in range(8)]
    beliefs = {b: (rng.uniform(0.1, 9), rng.uniform(0.1, 9)) for b in ids}
    goals = ["g0", "g1"]
    edges = []
    for n in range(rng.randint(0, 14)):
        # Acyclic: a belief rests only on beliefs after it, a goal on any belief.
        i = rng.randrange(len(ids) - 1)
        source = rng.choice([*goals, ids[i]])
        target = rng.choice(ids[i + 1 :])
        kind = rng.choice(["depends_on", "derived_from", "supports"])
        if kind == "supports":
            source, target = target, source
        edges.append(edge(f"e{n}", source, target, kind, rng.uniform(0.1, 1.0)))
    found = info.gains(beliefs, goals, edges)
    shuffled = list(edges)
    rng.shuffle(shuffled)
    again = info.gains(dict(reversed(beliefs.items())), goals[::-1], shuffled)
    assert found == again
    for gain in found.values():
        assert gain.own >= 0
        assert all(v >= 0 for v in gain.goals.values())


def test_pair_of_reads_what_the_projector_holds() -> None:
    assert info.pair_of(None, None) == info.OPEN  # an open question
    a, b = info.pair_of(0.7, beta_sd(7.0, 3.0))
    assert a == pytest.approx(7.0)
    assert b == pytest.approx(3.0)
    # A stated certainty (no spread, or a mean of 0 or 1): settled, nothing to learn.
    for confidence, sd in ((1.0, 0.0), (0.0, 0.0), (0.6, 0.0)):
        pair = info.pair_of(confidence, sd)
        assert sum(pair) == pytest.approx(info.SETTLED)
        assert info.own_gain(*pair) < 1e-6

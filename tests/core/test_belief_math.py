"""The belief math, pinned property by property (P1-P9, docs/belief-math.md).

Each property is checked on the pure model (``worldline.actors.belief_model.posterior``)
and, where it applies, end to end through the fusion core: ops in (encoded and decoded
as the runtime does), :class:`PosteriorUpdate` out, state in a :class:`MemoryState`. All
clocks are fixed, timezone-aware UTC datetimes.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import posterior
from worldline.actors.fusion import core as fusion
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import DIRECTIONS, EVIDENCE_KINDS, BeliefEdge, Evidence
from worldline.protocols.messages import (
    FUSION_INBOX,
    AddBelief,
    AddEvidence,
    Belief,
    BeliefType,
    DeclareWorld,
    OpVerdict,
    PosteriorUpdate,
    SetTrust,
    encode,
)
from worldline.protocols.subjects import ops
from worldline.protocols.world import Authority, WorldDecl, WorldInfo

if TYPE_CHECKING:
    from collections.abc import Sequence

    from worldline.protocols.beliefs import Direction, EvidenceKind
    from worldline.protocols.messages import OpsInbox

W: Final = "w1"
T0: Final = datetime(2024, 1, 1, 9, 0, 0, tzinfo=UTC)  # beliefs are added here
CLOCK: Final = datetime(2024, 6, 1, 12, 0, 0, tzinfo=UTC)  # evidence ops arrive here
DAY: Final = timedelta(days=1)
OPEN_ALPHA: Final = (
    posterior.DEFAULT_CONFIDENCE * posterior.PRIOR_STRENGTH
)  # = beta0 too


# --- helpers ----------------------------------------------------------------------


def ev(
    eid: str,
    *,
    belief_id: str = "b1",
    direction: Direction = "supports",
    kind: EvidenceKind = "citation",
    source: str = "src-1",
    observed_at: datetime = CLOCK,
    author: str = "alice",
) -> Evidence:
    return Evidence(
        id=eid,
        belief_id=belief_id,
        direction=direction,
        kind=kind,
        source=source,
        observed_at=observed_at,
        author=author,
    )


def add_op(
    belief_id: str = "b1",
    *,
    type: BeliefType = "claim",
    confidence: float | None = None,
    author: str = "alice",
    at: datetime = T0,
) -> AddBelief:
    return AddBelief(
        op_id=f"op-add-{belief_id}",
        author=author,
        at=at,
        belief_id=belief_id,
        text=f"Statement {belief_id}.",
        type=type,
        confidence=confidence,
    )


def evidence_op(item: Evidence, *, at: datetime = CLOCK) -> AddEvidence:
    return AddEvidence(
        op_id=f"op-ev-{item.id}", author=item.author, at=at, evidence=item
    )


def trust_op(
    source: str,
    trust: float,
    *,
    author: str = "alice",
    lock: bool = False,
    at: datetime = CLOCK,
    op_id: str | None = None,
) -> SetTrust:
    return SetTrust(
        op_id=op_id or f"op-trust-{source.replace(':', '-')}-{author}",
        author=author,
        at=at,
        source=source,
        trust=trust,
        lock=lock,
    )


DECLARE: Final = DeclareWorld(
    op_id="op-declare",
    author="alice",
    at=T0,
    declaration=WorldDecl(
        world=WorldInfo(id=W),
        authority=Authority(admins=["alice", "bob"]),
        sources={"*": ["alice"]},
    ),
)


def ctx(agent: str, seq: int) -> Context:
    return Context(world=W, author=agent, subject=ops(W, agent), seq=seq, now=CLOCK)


def run(
    log: Sequence[tuple[int, OpsInbox]],
    *,
    shard: tuple[int, int] = (0, 1),
    state: MemoryState | None = None,
) -> tuple[MemoryState, list[PosteriorUpdate]]:
    """Feed ``(seq, op)`` pairs through the fusion core, as the runtime would: each op
    encoded, decoded with fusion's inbox decoder, handled, and its step applied."""
    memory = MemoryState() if state is None else state
    if state is None:  # the world lets alice report every source, alice and bob rule
        memory.apply(fusion.handle(memory, DECLARE, ctx("alice", 0), shard=shard))
    updates: list[PosteriorUpdate] = []
    for seq, op in log:
        decoded = FUSION_INBOX.decode(encode(op))
        step = fusion.handle(memory, decoded, ctx(op.author, seq), shard=shard)
        for out in memory.apply(step):
            if isinstance(out.message, OpVerdict):
                continue  # fusion's answer to the op's author (trust: applied)
            assert isinstance(out.message, PosteriorUpdate)
            updates.append(out.message)
    return memory, updates


def numbered(op_list: Sequence[OpsInbox]) -> list[tuple[int, OpsInbox]]:
    return list(enumerate(op_list, start=1))


def last(updates: Sequence[PosteriorUpdate], belief_id: str = "b1") -> PosteriorUpdate:
    mine = [u for u in updates if u.belief.id == belief_id]
    assert mine, f"no posterior for {belief_id}"
    return mine[-1]


def fused(
    belief_id: str, evidence: Sequence[Evidence], *, confidence: float | None = None
) -> Belief:
    """The belief after its AddBelief and one AddEvidence per item (ops at CLOCK)."""
    log: list[OpsInbox] = [add_op(belief_id, confidence=confidence)]
    log += [evidence_op(item) for item in evidence]
    _, updates = run(numbered(log))
    return last(updates, belief_id).belief


def conf(reading: posterior.Reading) -> float:
    assert reading.confidence is not None
    return reading.confidence


def value(confidence: float | None) -> float:
    assert confidence is not None
    return confidence


def bconf(belief: Belief) -> float:
    assert belief.confidence is not None
    return belief.confidence


def read(
    evidence: Sequence[Evidence],
    *,
    confidence: float | None = None,
    trust: dict[str, float] | None = None,
    now: datetime = CLOCK,
) -> posterior.Reading:
    return posterior.read(confidence, evidence, trust or {}, now)


# --- P1: a measurement outweighs three inferences ----------------------------------


@pytest.mark.parametrize("direction", ["supports", "refutes"])
def test_p1_one_measurement_moves_more_than_three_inferences(
    direction: Direction,
) -> None:
    measurement = [ev("m1", kind="measurement", direction=direction, source="lab")]
    inferences = [
        ev(f"i{n}", kind="inference", direction=direction, source=f"analyst-{n}")
        for n in range(3)
    ]
    base = conf(read([]))
    by_measurement = abs(conf(read(measurement)) - base)
    by_inferences = abs(conf(read(inferences)) - base)
    assert by_inferences > 0.0
    assert by_measurement > by_inferences

    # Through the fusion core: same ordering of the shifts.
    core_m = abs(bconf(fused("b1", measurement)) - 0.5)
    core_i = abs(bconf(fused("b1", inferences)) - 0.5)
    assert core_i > 0.0
    assert core_m > core_i
    assert core_m == pytest.approx(by_measurement)
    assert core_i == pytest.approx(by_inferences)


# --- P2: corroboration is a likelihood, not a vote -------------------------------


def test_p2_paraphrases_from_one_source_count_once_ten_sources_count_ten() -> None:
    one = [ev("p0", source="blog")]
    paraphrases = [ev(f"p{n}", source="blog") for n in range(10)]
    independent = [ev(f"s{n}", source=f"outlet-{n}") for n in range(10)]

    r_one, r_para, r_ind = read(one), read(paraphrases), read(independent)
    assert conf(r_para) == conf(r_one)
    assert r_para.evidence_weight == r_one.evidence_weight
    assert conf(r_ind) > conf(r_para)
    w = posterior.KIND_WEIGHT["citation"]
    alpha = OPEN_ALPHA + 10 * w
    assert conf(r_ind) == pytest.approx(alpha / (alpha + OPEN_ALPHA), rel=1e-12)
    assert r_ind.evidence_weight == pytest.approx(10 * w, rel=1e-12)
    # "Much more": ten sources move it further from 0.5 than one does, by a lot.
    assert conf(r_ind) - 0.5 > 1.5 * (conf(r_one) - 0.5)

    b_one, b_para, b_ind = (
        fused("b1", one),
        fused("b1", paraphrases),
        fused("b1", independent),
    )
    assert b_para.confidence == b_one.confidence
    assert b_para.evidence_weight == b_one.evidence_weight
    assert b_para.evidence_count == 10
    assert bconf(b_ind) > bconf(b_para)
    assert bconf(b_ind) == pytest.approx(alpha / (alpha + OPEN_ALPHA), rel=1e-12)


# --- P3: supports raises, refutes lowers, neutral only adds weight ----------------


@pytest.mark.parametrize("prior", [None, 0.2, 0.5, 0.9])
def test_p3_direction_of_evidence(prior: float | None) -> None:
    start = read([], confidence=prior)
    up = read([ev("e1", direction="supports")], confidence=prior)
    down = read([ev("e1", direction="refutes")], confidence=prior)
    flat = read([ev("e1", direction="neutral")], confidence=prior)
    assert conf(up) > conf(start)
    assert conf(down) < conf(start)
    assert conf(flat) == conf(start)
    assert flat.evidence_weight == posterior.KIND_WEIGHT["citation"]
    assert flat.evidence_weight > start.evidence_weight == 0.0

    b_start = fused("b1", [], confidence=prior)
    b_up = fused("b1", [ev("e1", direction="supports")], confidence=prior)
    b_down = fused("b1", [ev("e1", direction="refutes")], confidence=prior)
    b_flat = fused("b1", [ev("e1", direction="neutral")], confidence=prior)
    assert bconf(b_up) > bconf(b_start)
    assert bconf(b_down) < bconf(b_start)
    assert b_flat.confidence == b_start.confidence
    assert b_flat.evidence_weight == posterior.KIND_WEIGHT["citation"]
    assert b_start.evidence_weight == 0.0


def test_p3_neutral_evidence_alone_never_makes_a_belief_stable() -> None:
    """Neutral evidence adds weight and moves nothing, so it settles nothing: one
    neutral measurement (weight 4, over ``STABLE_WEIGHT``) left the open question at
    0.5 flagged ``[stable, uncertain]``. Directional weight still counts as before."""
    one = read([ev("e1", direction="neutral", kind="measurement")])
    many = read(
        [
            ev(f"e{n}", direction="neutral", kind="measurement", source=f"s{n}")
            for n in range(10)
        ]
    )
    assert one.evidence_weight == posterior.KIND_WEIGHT["measurement"]
    assert one.evidence_weight >= posterior.STABLE_WEIGHT
    assert one.flags == ("uncertain",)
    assert "stable" not in many.flags
    agreed = [
        ev(f"s{n}", direction="supports", kind="measurement", source=f"s{n}")
        for n in range(10)
    ]
    assert "stable" in read(agreed).flags
    mixed = read([*agreed, ev("n1", direction="neutral", source="other")])
    assert "stable" in mixed.flags  # neutral weight takes nothing away either
    b_one = fused("b1", [ev("e1", direction="neutral", kind="measurement")])
    assert "stable" not in b_one.flags


# --- P4: split evidence is contradiction, not ignorance ---------------------------


def test_p4_split_evidence_matches_confidence_not_weight_and_is_contradicted() -> None:
    split = [
        ev(
            f"e{n:02}",
            source=f"src-{n:02}",
            direction="supports" if n < 20 else "refutes",
        )
        for n in range(40)
    ]
    one_sided = [ev(f"e{n:02}", source=f"src-{n:02}") for n in range(40)]

    empty, r_split, r_one = read([]), read(split), read(one_sided)
    assert conf(empty) == conf(r_split) == 0.5
    assert empty.evidence_weight == 0.0
    assert r_split.evidence_weight == pytest.approx(
        40 * posterior.KIND_WEIGHT["citation"]
    )
    assert r_split.evidence_weight == r_one.evidence_weight
    assert "contradicted" in r_split.flags
    assert "contradicted" not in empty.flags
    assert "contradicted" not in r_one.flags
    assert r_split.uncertainty is not None
    assert r_one.uncertainty is not None
    assert r_split.uncertainty >= r_one.uncertainty

    b_empty, b_split, b_one = (
        fused("b1", []),
        fused("b1", split),
        fused("b1", one_sided),
    )
    assert b_empty.confidence == b_split.confidence == 0.5
    assert b_empty.evidence_weight == 0.0
    assert b_split.evidence_weight == b_one.evidence_weight > 0.0
    assert "contradicted" in b_split.flags
    assert "contradicted" not in b_empty.flags
    assert b_split.uncertainty is not None
    assert b_one.uncertainty is not None
    assert b_split.uncertainty >= b_one.uncertainty


# --- P5: half-life decay and staleness --------------------------------------------


@pytest.mark.parametrize("kind", EVIDENCE_KINDS)
def test_p5_one_half_life_counts_half(kind: EvidenceKind) -> None:
    half_life = timedelta(days=posterior.HALF_LIFE_DAYS[kind])
    assert posterior.decay(0.0, kind) == 1.0
    assert posterior.decay(half_life.total_seconds(), kind) == 0.5
    assert posterior.decay(2 * half_life.total_seconds(), kind) == 0.25

    item = ev("e1", kind=kind, observed_at=T0)
    fresh = read([item], now=T0)
    later = read([item], now=T0 + half_life)
    assert fresh.evidence_weight == posterior.KIND_WEIGHT[kind]
    assert later.evidence_weight == posterior.KIND_WEIGHT[kind] / 2
    assert later.alpha == OPEN_ALPHA + posterior.KIND_WEIGHT[kind] / 2

    # Through the core: the posterior is evaluated at the op's own time.
    log: list[OpsInbox] = [add_op(), evidence_op(item, at=T0 + half_life)]
    _, updates = run(numbered(log))
    assert last(updates).belief.evidence_weight == posterior.KIND_WEIGHT[kind] / 2


def test_p5_stale_exactly_when_decayed_support_falls_under_the_floor() -> None:
    kind: EvidenceKind = "inference"
    half_life = timedelta(days=posterior.HALF_LIFE_DAYS[kind])
    # Under the floor after log2(1 / STALE_FLOOR) half-lives.
    crossing = half_life * math.log2(1.0 / posterior.STALE_FLOOR)
    item = ev("e1", kind=kind, observed_at=T0)
    for now, stale in (
        (T0, False),
        (T0 + half_life, False),
        (T0 + crossing - timedelta(hours=1), False),
        (T0 + crossing + timedelta(hours=1), True),
        (T0 + 10 * half_life, True),
    ):
        reading = read([item], now=now)
        assert ("stale" in reading.flags) is stale, (now, reading)
        under = (
            reading.evidence_weight
            < posterior.STALE_FLOOR * posterior.KIND_WEIGHT[kind]
        )
        assert under is stale

        log: list[OpsInbox] = [add_op(), evidence_op(item, at=now)]
        _, updates = run(numbered(log))
        assert ("stale" in last(updates).belief.flags) is stale, now


# --- P6: goals and gaps carry no probability --------------------------------------


@pytest.mark.parametrize("kind", ["goal", "gap"])
def test_p6_goal_evidence_never_moves_a_claim(kind: BeliefType) -> None:
    claim_1 = evidence_op(ev("c1", belief_id="claim", source="lab"))
    claim_2 = evidence_op(ev("c2", belief_id="claim", source="survey"))
    goal_ev = [
        evidence_op(ev("g1", belief_id="goal", source="lab", kind="measurement")),
        evidence_op(ev("g2", belief_id="goal", source="survey", direction="refutes")),
    ]
    # Same seq for the same op in both logs; the goal's ops get seqs of their own.
    without: list[tuple[int, OpsInbox]] = [
        (1, add_op("claim")),
        (2, add_op("goal", type=kind)),
        (10, claim_1),
        (20, claim_2),
    ]
    with_goal: list[tuple[int, OpsInbox]] = [
        (1, add_op("claim")),
        (2, add_op("goal", type=kind)),
        (10, claim_1),
        (11, goal_ev[0]),
        (12, goal_ev[1]),
        (20, claim_2),
    ]
    st_without, up_without = run(without)
    st_with, up_with = run(with_goal)

    goal = last(up_with, "goal").belief
    assert goal.type == kind
    assert goal.confidence is None
    assert goal.uncertainty is None
    assert goal.evidence_count == 2
    assert goal.evidence_weight > 0.0  # recorded, just not a probability

    claim_without, claim_with = last(up_without, "claim"), last(up_with, "claim")
    assert encode(claim_with) == encode(claim_without)
    key = fusion.belief_key(W, "claim")
    assert st_with.get(key) == st_without.get(key)
    assert [encode(u) for u in up_with if u.belief.id == "claim"] == [
        encode(u) for u in up_without if u.belief.id == "claim"
    ]

    # And in the model: no probability, whatever the evidence.
    items = [op.evidence for op in goal_ev]
    assert (
        posterior.read(None, items, {}, CLOCK, probabilistic=False).confidence is None
    )


# --- P7: a stated confidence is a weak prior --------------------------------------


def test_p7_hand_entered_confidence_is_moved_by_first_evidence() -> None:
    refute = ev("e1", direction="refutes", kind="citation")
    assert conf(read([], confidence=0.9)) == pytest.approx(0.9)
    assert conf(read([refute], confidence=0.9)) < 0.9 - 0.2

    log: list[OpsInbox] = [add_op(confidence=0.9), evidence_op(refute)]
    _, updates = run(numbered(log))
    first, after = updates[0].belief, updates[-1].belief
    assert first.confidence == pytest.approx(0.9)
    assert bconf(after) < bconf(first) - 0.2
    assert after.prior == 0.9  # the stated value is kept as the prior


# --- P8: order independence and sharding ------------------------------------------

BELIEF_IDS: Final = tuple(f"b-{n}" for n in range(6))
SOURCES: Final = ("lab", "blog", "survey", "agent:bob")
AUTHORS: Final = ("alice", "bob")


@st.composite
def evidence_lists(
    draw: st.DrawFn, belief_ids: Sequence[str] = ("b1",), max_size: int = 8
) -> list[Evidence]:
    ids = draw(
        st.lists(
            st.text(alphabet="abcxyz019", min_size=1, max_size=4),
            min_size=1,
            max_size=max_size,
            unique=True,
        )
    )
    return [
        ev(
            f"e-{eid}",
            belief_id=draw(st.sampled_from(belief_ids)),
            direction=draw(st.sampled_from(DIRECTIONS)),
            kind=draw(st.sampled_from(EVIDENCE_KINDS)),
            source=draw(st.sampled_from(SOURCES)),
            observed_at=CLOCK - timedelta(hours=draw(st.integers(0, 24 * 500))),
            author=draw(st.sampled_from(AUTHORS)),
        )
        for eid in ids
    ]


@settings(database=None, max_examples=60, deadline=None)
@given(data=st.data())
def test_p8_any_permutation_gives_byte_identical_posteriors(
    data: st.DataObject,
) -> None:
    items = data.draw(evidence_lists())
    perm = data.draw(st.permutations(items))
    prior = data.draw(st.none() | st.floats(0.0, 1.0))
    trust = data.draw(
        st.dictionaries(st.sampled_from(SOURCES), st.floats(0.0, 2.0), max_size=2)
    )

    # The model: identical readings (and trajectories) for every order.
    assert posterior.read(prior, perm, trust, CLOCK) == posterior.read(
        prior, items, trust, CLOCK
    )
    assert posterior.trajectory(prior, perm, trust) == posterior.trajectory(
        prior, items, trust
    )

    # The core: each evidence op keeps its own seq, whatever order it arrives in.
    seq_of = {item.id: 10 + n for n, item in enumerate(items)}

    def feed(order: Sequence[Evidence]) -> tuple[MemoryState, PosteriorUpdate]:
        log: list[tuple[int, OpsInbox]] = [(1, add_op(confidence=prior))]
        log += [(seq_of[item.id], evidence_op(item)) for item in order]
        memory, updates = run(log)
        return memory, last(updates)

    st_a, up_a = feed(items)
    st_b, up_b = feed(perm)
    assert encode(up_a.belief) == encode(up_b.belief)
    assert st_a.data == st_b.data
    # The update names the op that caused it (the last to arrive) and the evidence
    # that op added; all else is equal.
    assert encode(
        msgspec.structs.replace(up_a, cause="x", cause_seq=0, added=[])
    ) == encode(msgspec.structs.replace(up_b, cause="x", cause_seq=0, added=[]))
    assert [e.recorded_seq for e in up_a.added] == [seq_of[e.id] for e in up_a.added]

    # Even numbered by arrival (so recorded_seq differs) the posterior is the same.
    log_a = numbered([add_op(confidence=prior), *map(evidence_op, items)])
    log_b = numbered([add_op(confidence=prior), *map(evidence_op, perm)])
    assert encode(last(run(log_a)[1]).belief) == encode(last(run(log_b)[1]).belief)


def test_p8_belief_ids_spread_over_two_shards() -> None:
    """The sharding property test below is only meaningful if both shards own some."""
    assert {fusion.shard_of(b, 2) for b in BELIEF_IDS} == {0, 1}
    assert all(fusion.shard_of(b, 1) == 0 for b in BELIEF_IDS)
    assert fusion.shard_of("b-0", 2) == fusion.shard_of("b-0", 2)


@settings(database=None, max_examples=40, deadline=None)
@given(
    items=evidence_lists(belief_ids=BELIEF_IDS, max_size=12),
    trust=st.lists(
        st.tuples(st.sampled_from(SOURCES), st.floats(0.0, 2.0), st.integers(0, 12)),
        max_size=2,
        unique_by=lambda t: t[0],
    ),
)
def test_p8_sharded_fusion_equals_one_instance(
    items: list[Evidence], trust: list[tuple[str, float, int]]
) -> None:
    log: list[OpsInbox] = [add_op(b) for b in BELIEF_IDS]
    log += [evidence_op(item) for item in items]
    for source, value, position in trust:  # trust settings interleaved anywhere
        log.insert(len(BELIEF_IDS) + min(position, len(items)), trust_op(source, value))
    seqd = numbered(log)

    single, single_out = run(seqd, shard=(0, 1))
    shard0, out0 = run(seqd, shard=(0, 2))
    shard1, out1 = run(seqd, shard=(1, 2))

    for b in BELIEF_IDS:
        owner = fusion.shard_of(b, 2)
        from_0 = [encode(u) for u in out0 if u.belief.id == b]
        from_1 = [encode(u) for u in out1 if u.belief.id == b]
        # Exactly one shard produces each belief, and it produces what one would.
        assert (from_0 if owner == 1 else from_1) == []
        assert (from_0 if owner == 0 else from_1) == [
            encode(u) for u in single_out if u.belief.id == b
        ]
        key = fusion.belief_key(W, b)
        states = (shard0, shard1)
        assert states[owner].get(key) == single.get(key)
        assert states[1 - owner].get(key) is None
        assert encode(last(out0 + out1, b).belief) == encode(last(single_out, b).belief)
    # Trust settings apply in every shard.
    for source, _, _ in trust:
        key = f"trust/{W}/{source}".encode()
        assert shard0.get(key) == shard1.get(key) == single.get(key) is not None


# --- P9: edges carry their own posterior ------------------------------------------


def depends(eid: str, dependent: str, assumption: str, strength: float) -> BeliefEdge:
    return BeliefEdge(
        id=eid,
        type="depends_on",
        source=dependent,
        target=assumption,
        confidence=strength,
    )


def test_p9_depends_on_lowers_in_proportion_to_edge_strength() -> None:
    base = {"claim": 0.8, "assumption": 0.3}
    effect = {
        s: posterior.effective_confidence(
            base, [depends("e1", "claim", "assumption", s)]
        )
        for s in (0.0, 0.5, 1.0)
    }
    assert effect[0.0]["claim"] == base["claim"]
    assert effect[1.0]["claim"] < effect[0.5]["claim"] < effect[0.0]["claim"]
    for s in (0.5, 1.0):
        expected = base["claim"] * (1.0 - s * (1.0 - base["assumption"]))
        assert effect[s]["claim"] == pytest.approx(expected, rel=1e-12)
    drop_half = base["claim"] - effect[0.5]["claim"]
    drop_full = base["claim"] - effect[1.0]["claim"]
    assert drop_half == pytest.approx(drop_full / 2, rel=1e-12)
    # The assumption itself is not moved by what rests on it.
    assert all(e["assumption"] == base["assumption"] for e in effect.values())
    # A sound assumption costs nothing; a weaker one costs more.
    sound = posterior.effective_confidence(
        {"claim": 0.8, "assumption": 1.0}, [depends("e1", "claim", "assumption", 1.0)]
    )
    assert sound["claim"] == pytest.approx(0.8, rel=1e-12)


def test_p9_dependency_chain_propagates() -> None:
    base = {"a": 0.9, "b": 0.8, "c": 0.2}
    edges = [depends("e1", "a", "b", 0.7), depends("e2", "b", "c", 0.6)]
    eff = posterior.effective_confidence(base, edges)
    b_eff = 0.8 * (1.0 - 0.6 * (1.0 - 0.2))
    a_eff = 0.9 * (1.0 - 0.7 * (1.0 - b_eff))
    assert eff["c"] == 0.2
    assert eff["b"] == pytest.approx(b_eff, rel=1e-12)
    assert eff["a"] == pytest.approx(a_eff, rel=1e-12)
    # C's weakness reaches A: A is lower than if B stood on its own.
    alone = posterior.effective_confidence(base, edges[:1])
    assert eff["a"] < alone["a"]


@pytest.mark.parametrize("strength", [0.3, 0.8, 1.0])
def test_p9_dependency_cycle_terminates(strength: float) -> None:
    base = {"a": 0.8, "b": 0.3, "c": 0.6}
    edges = [
        depends("e1", "a", "b", strength),
        depends("e2", "b", "c", strength),
        depends("e3", "c", "a", strength),
    ]
    eff = posterior.effective_confidence(base, edges)
    assert set(eff) == set(base)
    for bid, value in eff.items():
        assert math.isfinite(value)
        assert 0.0 <= value <= base[bid]
    assert eff == posterior.effective_confidence(base, list(reversed(edges)))


# --- trust ------------------------------------------------------------------------


def test_trust_scales_only_that_sources_contribution() -> None:
    items = [
        ev("e1", source="lab", kind="measurement"),
        ev("e2", source="blog", kind="citation"),
        ev("e3", source="troll", kind="citation", direction="refutes"),
    ]
    plain = read(items)
    halved = read(items, trust={"lab": 0.5})
    w_lab, w_blog = (
        posterior.KIND_WEIGHT["measurement"],
        posterior.KIND_WEIGHT["citation"],
    )
    assert plain.alpha == OPEN_ALPHA + w_lab + w_blog
    assert halved.alpha == OPEN_ALPHA + 0.5 * w_lab + w_blog
    assert plain.alpha - halved.alpha == 0.5 * w_lab
    assert halved.beta == plain.beta  # the other sources are untouched
    agent = read(items, trust={"agent:alice": 0.5})
    assert agent.alpha == OPEN_ALPHA + 0.5 * (w_lab + w_blog)

    log: list[OpsInbox] = [add_op(), *map(evidence_op, items)]
    _, before = run(numbered(log))
    _, after = run(numbered([*log, trust_op("lab", 0.5)]))
    update = last(after)
    assert update.trust == {"lab": 0.5}
    assert update.belief.confidence == pytest.approx(conf(halved), rel=1e-12)
    assert update.belief.evidence_weight == pytest.approx(halved.evidence_weight)
    assert bconf(update.belief) < bconf(last(before).belief)


def test_locked_trust_refuses_another_author() -> None:
    item = ev("e1", source="lab")
    log: list[OpsInbox] = [
        add_op(),
        evidence_op(item),
        trust_op("lab", 0.2, author="alice", lock=True),
    ]
    memory, _ = run(numbered(log))
    before = dict(memory.data)
    bob = trust_op("lab", 5.0, author="bob")
    step = fusion.handle(memory, bob, ctx("bob", 10))
    (out,) = step.out  # answered to bob, not dead-lettered
    assert isinstance(out.message, OpVerdict)
    assert (out.message.outcome, out.message.code) == ("rejected", "locked")
    assert not step.writes
    assert memory.data == before
    # The lock holder may still change it.
    _, updates = run([(11, trust_op("lab", 0.4, op_id="op-relax"))], state=memory)
    assert last(updates).trust == {"lab": 0.4}


# --- influence and trajectory -----------------------------------------------------


def test_influence_ranks_the_load_bearing_belief_first_and_sums_to_one() -> None:
    ids = ["hub", "x1", "x2", "x3", "x4", "lone"]
    edges = [depends(f"e{n}", f"x{n}", "hub", 0.9) for n in range(1, 5)]
    score = posterior.influence(ids, edges)
    assert set(score) == set(ids)
    assert math.fsum(score.values()) == pytest.approx(1.0, abs=1e-12)
    assert max(score, key=score.__getitem__) == "hub"
    assert all(score["hub"] > score[b] for b in ids if b != "hub")
    no_edges = posterior.influence(ids, [])
    assert math.fsum(no_edges.values()) == pytest.approx(1.0, abs=1e-12)


def test_influence_sums_to_one_with_a_zero_confidence_edge() -> None:
    """BeliefEdge allows confidence 0.0; influence must still be a distribution."""
    edges = [
        depends("e1", "x1", "hub", 0.9),
        depends("e2", "x2", "hub", 0.0),
    ]
    score = posterior.influence(["hub", "x1", "x2"], edges)
    assert all(math.isfinite(v) for v in score.values()), score
    assert math.fsum(score.values()) == pytest.approx(1.0, abs=1e-12)
    assert max(score, key=score.__getitem__) == "hub"


def test_trajectory_steps_in_observed_order_from_the_prior() -> None:
    items = [
        ev("a-late", source="s1", observed_at=CLOCK - 1 * DAY),
        ev("b-early", source="s2", observed_at=CLOCK - 9 * DAY, direction="refutes"),
        ev("c-mid", source="s3", observed_at=CLOCK - 5 * DAY, kind="measurement"),
    ]
    steps = posterior.trajectory(0.7, items, {})
    assert [e.id for e, _, _ in steps] == ["b-early", "c-mid", "a-late"]
    assert steps[0][1] == pytest.approx(0.7)
    ordered = [e for e, _, _ in steps]
    for n, (item, before, after) in enumerate(steps):
        assert (
            before == posterior.read(0.7, ordered[:n], {}, item.observed_at).confidence
        )
        assert (
            after
            == posterior.read(0.7, ordered[: n + 1], {}, item.observed_at).confidence
        )
    moves = [(value(after) - value(before)) for _, before, after in steps]
    assert moves[0] < 0.0  # the refutation
    assert moves[1] > 0.0  # the measurement
    assert moves[2] > 0.0


def test_an_agents_trust_counts_once_when_it_is_also_the_source() -> None:
    now = datetime(2026, 2, 1, tzinfo=UTC)
    own = Evidence(id="e1", belief_id="b", direction="supports", kind="citation",
                   source="agent:zora", observed_at=now, author="zora")  # fmt: skip
    other = Evidence(id="e2", belief_id="b", direction="supports", kind="citation",
                     source="blog", observed_at=now, author="zora")  # fmt: skip
    trust = {"agent:zora": 0.5}
    assert posterior.read(None, [own], trust, now).support == pytest.approx(1.0)
    assert posterior.read(None, [other], trust, now).support == pytest.approx(1.0)
    assert posterior.read(None, [own], {}, now).support == pytest.approx(2.0)


@settings(database=None, max_examples=200, deadline=None)
@given(
    evidence=evidence_lists(max_size=12),
    prior=st.floats(0.0, 1.0),
    trust=st.dictionaries(st.sampled_from(SOURCES), st.floats(0.0, 2.0), max_size=3),
)
def test_the_plain_python_reading_of_few_groups_is_numpys_bit_for_bit(
    evidence: list[Evidence], prior: float, trust: dict[str, float]
) -> None:
    """Beliefs with fewer than 8 (source, direction) groups are read in plain Python
    (posterior._small); it must give exactly the numpy path's numbers, or replaying an
    old log would not reproduce the stored posteriors."""
    assume(len({(e.source, e.direction) for e in evidence}) < posterior._SMALL)
    alpha0, beta0 = (
        prior * posterior.PRIOR_STRENGTH,
        (1 - prior) * posterior.PRIOR_STRENGTH,
    )
    grouped, grouped_raw, sources, sign = posterior._contributions(
        evidence, trust, CLOCK
    )
    support = float(grouped[sign > 0].sum())
    refute = float(grouped[sign < 0].sum())
    fragility = posterior._fragility(
        alpha0 + support, beta0 + refute, grouped, sources, sign
    )
    numpy_path = (
        support,
        refute,
        float(grouped.sum()),
        float(grouped_raw.sum()),
        fragility,
    )
    assert posterior._small(evidence, trust, CLOCK, alpha0, beta0) == numpy_path


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_sides_are_the_reading_s_support_and_refute_to_the_bit(
    data: st.DataObject,
) -> None:
    """Issue 24: a contradiction's strength reads only (support, refute), through
    :func:`posterior.sides`, which must be exactly what the whole reading says."""
    n = data.draw(st.integers(0, 12))
    now = datetime(2026, 6, 1, tzinfo=UTC)
    evidence = [
        Evidence(
            id=f"e{i}",
            belief_id="b",
            direction=data.draw(st.sampled_from(["supports", "refutes", "neutral"])),
            kind=data.draw(st.sampled_from(sorted(posterior.KIND_WEIGHT))),
            source=f"s{data.draw(st.integers(0, 9))}",
            observed_at=now - timedelta(hours=data.draw(st.integers(0, 5000))),
            author="ada",
        )
        for i in range(n)
    ]
    trust = data.draw(st.sampled_from([{}, {"s1": 0.5}, {"agent:ada": 1.7}]))
    reading = posterior.read(0.6, evidence, trust, now)
    assert posterior.sides(evidence, trust, now) == (reading.support, reading.refute)

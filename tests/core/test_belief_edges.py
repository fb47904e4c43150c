"""The belief model's honest edges (issue 18, part 5): ``stable`` is never on a
disputed claim, disagreement widens the uncertainty, a read without ``at`` uses one
clock for the whole answer, and ``get``/``list``/``read`` at a clock agree about a
belief that did not exist yet (docs/belief-math.md, "Flags" and "Clocks")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import posterior
from worldline.actors.projector import beliefs, core, pages, upgrade
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context, Step
from worldline.protocols.beliefs import BeliefEdge, Evidence
from worldline.protocols.messages import (
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    BeliefListReply,
    BeliefReply,
    GetBelief,
    ListBeliefs,
    ReadWorld,
    WorldReply,
)
from worldline.protocols.subjects import state

if TYPE_CHECKING:
    from collections.abc import Sequence

    from worldline.protocols.beliefs import Direction, EvidenceKind

W: Final = "w1"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
DAY: Final = timedelta(days=1)


def ev(
    eid: str,
    source: str,
    direction: Direction = "supports",
    kind: EvidenceKind = "citation",
    observed_at: datetime = T0,
    belief_id: str = "b1",
) -> Evidence:
    return Evidence(id=eid, belief_id=belief_id, direction=direction, kind=kind,
                    source=source, observed_at=observed_at, author="ada")  # fmt: skip


def read(evidence: Sequence[Evidence], prior: float | None = None) -> posterior.Reading:
    return posterior.read(prior, evidence, {}, T0)


# --- stable is never on a disputed claim ----------------------------------------


def stores(support: int, refute: int) -> list[Evidence]:
    """One listing per store: ``support`` stores for the claim, ``refute`` against."""
    return [
        ev(f"e{n:03}", f"store-{n:03}", "supports" if n < support else "refutes")
        for n in range(support + refute)
    ]


def test_a_claim_disputed_by_20_of_28_stores_is_not_stable() -> None:
    reading = read(stores(8, 20))
    citation = posterior.KIND_WEIGHT["citation"]
    assert reading.evidence_weight == pytest.approx(28 * citation)
    assert reading.confidence == pytest.approx((1 + 8 * citation) / (2 + 28 * citation))
    assert reading.fragility < posterior.STABLE_SHIFT  # no single store moves it...
    assert reading.evidence_weight >= posterior.STABLE_WEIGHT  # ...on much evidence
    assert "stable" not in reading.flags  # ...and still it is not settled
    assert posterior.disputed(reading.support, reading.refute)
    # A claim all 28 stores back is stable, and one lone dissenter among 28 (under
    # a tenth of the weight) does not unsettle it.
    assert "stable" in read(stores(28, 0)).flags
    assert "stable" in read(stores(27, 1)).flags


groups = st.lists(
    st.tuples(
        st.sampled_from(["supports", "refutes", "neutral"]),
        st.sampled_from(sorted(posterior.KIND_WEIGHT)),
        st.integers(min_value=0, max_value=400),  # age in days
    ),
    max_size=24,
)


@settings(max_examples=300, deadline=None)
@given(items=groups, prior=st.one_of(st.none(), st.floats(0.0, 1.0)))
def test_stable_is_never_on_a_disputed_or_contradicted_claim(
    items: list[tuple[Direction, EvidenceKind, int]], prior: float | None
) -> None:
    evidence = [
        ev(f"e{n:03}", f"s{n:03}", d, k, T0 - age * DAY)
        for n, (d, k, age) in enumerate(items)
    ]
    reading = read(evidence, prior)
    if "stable" in reading.flags:
        assert not posterior.disputed(reading.support, reading.refute)
        assert "contradicted" not in reading.flags


def test_a_contradicts_edge_takes_stable_away_in_the_projector() -> None:
    st_ = MemoryState()
    evidence = [ev(f"e{n}", f"s{n}", belief_id=bid) for n in range(30)
                for bid in ("b1",)]  # fmt: skip
    put(st_, "b1", evidence, at=T0)
    put(st_, "b2", [], at=T0)
    assert "stable" in get(st_, "b1").flags
    edge = BeliefEdge(id="x1", type="contradicts", source="b2", target="b1",
                      confidence=0.9, version=50)  # fmt: skip
    ctx = Context(world=W, author="m", subject=state(W, "belief"), seq=50, now=T0)
    st_.apply(core.handle(st_, BeliefEdgeChanged(edge=edge), ctx))
    flags = get(st_, "b1").flags
    assert "contradicted" in flags
    assert "stable" not in flags


# --- disagreement widens the uncertainty ------------------------------------------


def test_an_even_split_is_as_uncertain_as_no_evidence_and_flagged() -> None:
    empty, split = read([]), read(stores(20, 20))
    assert split.confidence == empty.confidence == 0.5
    assert split.uncertainty is not None
    assert empty.uncertainty is not None
    assert split.uncertainty >= empty.uncertainty - 1e-12
    assert "uncertain" in split.flags
    # One-sided evidence keeps the plain Beta sd, bit for bit.
    one = read(stores(40, 0))
    assert one.uncertainty == posterior.beta_sd(one.alpha, one.beta)


@settings(max_examples=300, deadline=None)
@given(
    support=st.integers(0, 40),
    refute=st.integers(0, 40),
    prior=st.one_of(st.none(), st.floats(0.0, 1.0)),
)
@example(support=40, refute=38, prior=None)  # the plain Beta sd narrows here
def test_evidence_against_the_leading_side_never_narrows_the_uncertainty(
    support: int, refute: int, prior: float | None
) -> None:
    if refute + 1 > support:  # only while the supporting side still leads
        return
    before = read(stores(support, refute), prior)
    after = read(stores(support, refute + 1), prior)
    assert before.uncertainty is not None
    assert after.uncertainty is not None
    assert after.uncertainty >= before.uncertainty - 1e-12


# --- one clock for a read without ``at`` -----------------------------------------


def put(
    st_: MemoryState,
    belief_id: str,
    evidence: list[Evidence],
    *,
    at: datetime,
    created: datetime = T0,
    version: int = 0,
    **fields: object,
) -> None:
    """A belief as the materializer hands it on: fusion's reading at ``at``, the
    time of the op that last changed it."""
    reading = posterior.read(None, evidence, {}, at)
    belief = Belief(
        id=belief_id,
        text=f"text of {belief_id}",
        type="claim",
        confidence=reading.confidence,
        evidence_weight=reading.evidence_weight,
        uncertainty=reading.uncertainty,
        fragility=reading.fragility,
        flags=reading.flags,
        evidence_count=len(evidence),
        author="ada",
        created_at=created,
        updated_at=at,
        version=version or len(st_.data) + 1,
        **fields,  # type: ignore[arg-type]
    )
    ctx = Context(world=W, author="m", subject=state(W, "belief"),
                  seq=belief.version, now=at)  # fmt: skip
    st_.apply(core.handle(st_, BeliefChanged(belief=belief, evidence=evidence), ctx))


def get(st_: MemoryState, belief_id: str, at: datetime | None = None) -> Belief:
    found = get_or_none(st_, belief_id, at)
    assert found is not None
    return found


def get_or_none(
    st_: MemoryState, belief_id: str, at: datetime | None = None
) -> Belief | None:
    reply = core.serve(st_, GetBelief(belief_id=belief_id, at=at), W)
    assert isinstance(reply, BeliefReply)
    return reply.belief


def listed(st_: MemoryState, **fields: object) -> dict[str, Belief]:
    reply = core.serve(st_, ListBeliefs(**fields), W)  # type: ignore[arg-type]
    assert isinstance(reply, BeliefListReply)
    return {b.id: b for b in reply.beliefs}


def world(st_: MemoryState, at: datetime | None = None) -> dict[str, Belief]:
    reply = pages.read_world(st_, W, ReadWorld(at=at))
    assert isinstance(reply, WorldReply)
    return {b.id: b for b in reply.beliefs}


def rivals(first: datetime, second: datetime) -> MemoryState:
    """Two rival answers with the same evidence (one citation each, observed at T0),
    whose last ops came at ``first`` and ``second``: load timing."""
    st_ = MemoryState()
    put(st_, "b-a", [ev("ea", "store-1", belief_id="b-a")], at=first)
    put(st_, "b-b", [ev("eb", "store-2", belief_id="b-b")], at=second)
    return st_


def numbers(b: Belief) -> tuple[object, ...]:
    return (b.confidence, b.evidence_weight, b.uncertainty, b.fragility, b.flags)


def test_a_read_without_at_reads_every_belief_at_one_clock() -> None:
    st_ = rivals(T0 + 30 * DAY, T0 + 400 * DAY)
    stored_a = posterior.read(None, [ev("ea", "store-1", belief_id="b-a")], {},
                              T0 + 30 * DAY)  # fmt: skip
    stored_b = posterior.read(None, [ev("eb", "store-2", belief_id="b-b")], {},
                              T0 + 400 * DAY)  # fmt: skip
    assert stored_a.confidence != stored_b.confidence  # fusion read them apart
    assert beliefs.world_clock(st_, W) == T0 + 400 * DAY
    a, b = get(st_, "b-a"), get(st_, "b-b")
    assert numbers(a) == numbers(b)  # one clock: the same evidence reads the same
    assert numbers(a) == numbers(get(st_, "b-a", T0 + 400 * DAY))
    # list and read report what get reports, and a repeat is identical.
    for reply in (listed(st_), world(st_), listed(st_), world(st_)):
        assert numbers(reply["b-a"]) == numbers(a)
        assert numbers(reply["b-b"]) == numbers(b)


def test_load_order_does_not_settle_a_tie() -> None:
    one = rivals(T0 + 30 * DAY, T0 + 400 * DAY)
    other = rivals(T0 + 400 * DAY, T0 + 30 * DAY)
    for st_ in (one, other):
        for reply in (listed(st_), world(st_)):
            assert numbers(reply["b-a"]) == numbers(reply["b-b"])
    assert numbers(get(one, "b-a")) == numbers(get(other, "b-a"))


def test_the_world_clock_survives_a_replica_written_before_it_was_kept() -> None:
    st_ = rivals(T0 + 30 * DAY, T0 + 400 * DAY)
    kept = {k: v for k, v in st_.data.items() if k != b"bclock/" + W.encode()}
    assert len(kept) < len(st_.data)
    older = MemoryState()
    older.data.update(kept)
    # The start-up upgrade brings the clock back (reads never scan for it).
    while (writes := upgrade.upgrade(older)) is not None:
        older.apply(Step(writes=writes))
    assert beliefs.world_clock(older, W) == T0 + 400 * DAY
    assert numbers(get(older, "b-a")) == numbers(get(st_, "b-a"))


# --- get, list and read agree at a clock ------------------------------------------


def test_list_and_read_agree_about_a_belief_not_yet_made() -> None:
    st_ = MemoryState()
    put(st_, "b-old", [ev("e1", "s1", belief_id="b-old")], at=T0)
    put(st_, "b-new", [ev("e2", "s2", belief_id="b-new", observed_at=T0 + 9 * DAY)],
        at=T0 + 10 * DAY, created=T0 + 10 * DAY)  # fmt: skip
    then = T0 + 5 * DAY
    assert "b-new" not in listed(st_, at=then)
    assert "b-new" not in world(st_, then)
    assert get(st_, "b-new", T0 + 10 * DAY).id == "b-new"
    assert set(listed(st_, at=then)) == set(world(st_, then)) == {"b-old"}
    assert numbers(get(st_, "b-old", then)) == numbers(listed(st_, at=then)["b-old"])


def test_get_list_and_read_agree_about_a_belief_retracted_later() -> None:
    st_ = MemoryState()
    put(st_, "b1", [ev("e1", "s1")], at=T0 + 20 * DAY, status="retracted",
        valid_until=T0 + 20 * DAY)  # fmt: skip
    then = T0 + 5 * DAY
    assert get(st_, "b1", then).status == "active"
    assert listed(st_, at=then)["b1"].status == "active"
    assert world(st_, then)["b1"].status == "active"
    assert "b1" not in listed(st_)  # retracted now
    assert "b1" in listed(st_, status="retracted")

"""Two time axes, consistent across get, list and read (issue 18, item 5): valid
time ``at`` (what was true then: evidence observed by then) and recorded time
``as_of`` (what the world had been told by then: evidence recorded by then, by the
``at`` of the op that recorded it). docs/belief-math.md, "Two time axes"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.test_contradictions import Stack, add, evidence
from worldline.actors.projector import beliefs
from worldline.actors.projector import core as projector
from worldline.protocols.messages import (
    Belief,
    BeliefListReply,
    BeliefReply,
    CloseBelief,
    GetBelief,
    ListBeliefs,
    ReadWorld,
    WorldReply,
)

if TYPE_CHECKING:
    from worldline.actors.runtime.memory import MemoryState

W: Final = "w1"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
DAY: Final = timedelta(days=1)


def late_report() -> MemoryState:
    """b1 is cited on day 0; a lab measured against it on day 1 but reported it
    only on day 30 (observed day 1, recorded day 30); b2 is added on day 20 and
    retracted on day 40."""
    s = Stack()
    s.op(add("b1"))
    s.op(evidence("e1", "b1", "paper"))
    s.op(add("b2", at=T0 + 20 * DAY))
    s.op(evidence("e2", "b1", "lab", "refutes", "measurement",
                  observed=T0 + DAY, at=T0 + 30 * DAY))  # fmt: skip
    s.op(CloseBelief(op_id="close-b2", author="ada", at=T0 + 40 * DAY,
                     belief_id="b2", how="retracted"))  # fmt: skip
    return s.run()


def three_ways(
    st_: MemoryState, at: datetime | None, as_of: datetime | None
) -> tuple[dict[str, Belief], dict[str, Belief], dict[str, Belief]]:
    """What get, list and read report about b1 and b2 at these clocks."""
    got = {}
    for bid in ("b1", "b2"):
        reply = projector.serve(st_, GetBelief(belief_id=bid, at=at, as_of=as_of), W)
        assert isinstance(reply, BeliefReply)
        if reply.belief is not None:
            got[bid] = reply.belief
    listed = projector.serve(st_, ListBeliefs(at=at, as_of=as_of, status="any"), W)
    assert isinstance(listed, BeliefListReply)
    world = projector.serve(st_, ReadWorld(at=at, as_of=as_of), W)
    assert isinstance(world, WorldReply)
    return (
        got,
        {b.id: b for b in listed.beliefs},
        {b.id: b for b in world.beliefs if b.status == "active"},
    )


def agree(
    st_: MemoryState, at: datetime | None, as_of: datetime | None
) -> dict[str, Belief]:
    got, listed, read = three_ways(st_, at, as_of)
    assert got == listed
    active = {k: v for k, v in got.items() if v.status == "active"}
    assert active == read
    return got


def test_fusion_stamps_each_item_with_the_time_it_was_recorded() -> None:
    st_ = late_report()

    items = {e.id: e for e in beliefs.evidence(st_, W, "b1")}
    assert items["e1"].recorded_at == T0
    assert items["e2"].recorded_at == T0 + 30 * DAY
    assert items["e2"].observed_at == T0 + DAY


def test_valid_time_counts_what_was_observed_then_as_known_now() -> None:
    st_ = late_report()
    then = agree(st_, T0 + 2 * DAY, None)
    assert set(then) == {"b1"}  # b2 did not exist yet: get agrees with list/read
    assert then["b1"].evidence_count == 2  # the late measurement was observed by then
    assert then["b1"].confidence is not None
    assert then["b1"].confidence < 0.5


def test_recorded_time_counts_only_what_the_world_had_been_told() -> None:
    st_ = late_report()
    told = agree(st_, None, T0 + 10 * DAY)
    assert set(told) == {"b1"}
    assert told["b1"].evidence_count == 1  # the measurement was not reported yet
    assert told["b1"].confidence is not None
    assert told["b1"].confidence > 0.5
    both = agree(st_, T0 + 2 * DAY, T0 + 10 * DAY)
    assert both["b1"].evidence_count == 1
    now = agree(st_, None, None)
    assert now["b1"].evidence_count == 2
    # b2 as the world stood on day 25: created, not yet retracted.
    assert agree(st_, None, T0 + 25 * DAY)["b2"].status == "active"
    assert agree(st_, None, None)["b2"].status == "retracted"
    assert agree(st_, None, T0 + 5 * DAY).get("b2") is None


@settings(max_examples=40, deadline=None)
@given(
    at=st.one_of(st.none(), st.integers(0, 60)),
    as_of=st.one_of(st.none(), st.integers(0, 60)),
)
def test_get_list_and_read_agree_on_both_axes(
    at: int | None, as_of: int | None
) -> None:
    st_ = _STATE
    found = agree(
        st_,
        None if at is None else T0 + at * DAY,
        None if as_of is None else T0 + as_of * DAY,
    )
    created = {"b1": 0, "b2": 20}
    for bid, day in created.items():
        exists = all(c is None or c >= day for c in (at, as_of))
        assert (bid in found) == exists


_STATE: Final = late_report()

"""Bi-temporal reads that are exact (issue 25, point 5): a read as of recorded time
T shows each belief as the world knew it at T, on every read verb (get, list, read,
search, trace): the version, ``updated_at``, status, confidence, trust and evidence
of its last change at or before T, never a later change's; a belief created after T
is not found. docs/belief-math.md, "Two time axes"."""

from __future__ import annotations

from datetime import timedelta, timezone
from typing import TYPE_CHECKING, Any, Final

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.test_contradictions import DAY, T0, Stack, W, add, ctx, evidence
from tests.core.test_order_independence import BELIEFS, Drawn, build_log
from worldline.actors.projector import core as projector
from worldline.actors.projector import history as clock_history
from worldline.actors.registry import build
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Step
from worldline.protocols.messages import (
    Before,
    Belief,
    BeliefChanged,
    BeliefListReply,
    BeliefReply,
    CloseBelief,
    GetBelief,
    ListBeliefs,
    ReadWorld,
    SearchBeliefs,
    SearchReply,
    SetTrust,
    TraceBelief,
    TraceReply,
    WorldReply,
    WorldviewReply,
    encode,
)
from worldline.protocols.subjects import state

if TYPE_CHECKING:
    from datetime import datetime

    from tests.core.test_contradictions import Order

T1: Final = T0 + DAY  # b1 is cited
T2: Final = T0 + 10 * DAY  # a lab measures against it
BETWEEN: Final = T0 + 5 * DAY
HOUR: Final = timedelta(hours=1)
MINUTE: Final = timedelta(minutes=1)


def history(upto: int = 99, order: Order = "live") -> tuple[Stack, dict[str, int]]:
    """b1 created on day 0, cited on day 1 (t1), refuted by a lab on day 10 (t2),
    the paper's trust cut on day 12, b1 retracted on day 20; b2 created on day 15.
    ``upto``: only the first ``upto`` of those ops. Returns the stack (not run) and
    each op's OPS sequence."""
    s = Stack(order=order)
    ops = [
        ("add", add("b1")),
        ("t1", evidence("e1", "b1", "paper", at=T1, observed=T1)),
        ("t2", evidence("e2", "b1", "lab", "refutes", "measurement", observed=T2)),
        (
            "trust",
            SetTrust(
                op_id="op-trust",
                author="ada",
                at=T0 + 12 * DAY,
                source="paper",
                trust=0.2,
            ),
        ),
        ("b2", add("b2", at=T0 + 15 * DAY)),
        (
            "close",
            CloseBelief(
                op_id="close-b1",
                author="ada",
                at=T0 + 20 * DAY,
                belief_id="b1",
                how="retracted",
            ),
        ),
    ]
    seqs = {name: s.op(op) for name, op in ops[:upto]}
    return s, seqs


def get(st_: MemoryState, bid: str, as_of: datetime | None = None) -> Belief | None:
    reply = projector.serve(st_, GetBelief(belief_id=bid, as_of=as_of), W)
    assert isinstance(reply, BeliefReply)
    return reply.belief


def listed(st_: MemoryState, as_of: datetime | None = None) -> dict[str, Belief]:
    reply = projector.serve(st_, ListBeliefs(status="any", as_of=as_of), W)
    assert isinstance(reply, BeliefListReply)
    return {b.id: b for b in reply.beliefs}


def read(st_: MemoryState, as_of: datetime | None = None) -> dict[str, Belief]:
    reply = projector.serve(st_, ReadWorld(as_of=as_of), W)
    assert isinstance(reply, WorldReply)
    return {b.id: b for b in reply.beliefs}


def searched(st_: MemoryState, as_of: datetime | None = None) -> dict[str, Belief]:
    reply = projector.serve(st_, SearchBeliefs(query="claim", as_of=as_of), W)
    assert isinstance(reply, SearchReply)
    return {h.belief.id: h.belief for h in reply.hits}


def traced(st_: MemoryState, bid: str, as_of: datetime | None = None) -> TraceReply:
    reply = projector.serve(st_, TraceBelief(belief_id=bid, as_of=as_of), W)
    assert isinstance(reply, TraceReply)
    return reply


def test_a_read_as_of_a_time_shows_the_change_known_then_on_every_verb() -> None:
    stack, seq = history()
    st_ = stack.run()
    then = get(st_, "b1", as_of=BETWEEN)
    assert then is not None
    assert then.version == seq["t1"]  # not the lab's, the trust cut's or the close's
    assert then.updated_at == T1
    assert then.status == "active"
    assert then.evidence_count == 1
    # The confidence a replica that held only the changes up to t1 reports.
    known, _ = history(upto=2)
    only_t1 = known.run()
    assert then == get(only_t1, "b1")
    assert then == get(only_t1, "b1", as_of=BETWEEN)
    now = get(st_, "b1")
    assert now is not None
    assert (now.version, now.status) == (seq["close"], "retracted")
    assert then.confidence != now.confidence
    # list, read, search and trace say the same.
    assert listed(st_, as_of=BETWEEN) == {"b1": then}
    assert read(st_, as_of=BETWEEN) == {"b1": then}
    assert searched(st_, as_of=BETWEEN) == {"b1": then}
    trace = traced(st_, "b1", as_of=BETWEEN)
    assert trace.belief == traced(only_t1, "b1").belief  # as it was stored then
    assert trace.belief is not None
    assert (trace.belief.version, trace.belief.updated_at) == (seq["t1"], T1)
    assert [step.evidence.id for step in trace.steps] == ["e1"]
    assert trace.weights == {}  # the paper's trust was cut after
    assert traced(st_, "b1").weights == {"paper": 0.2}


def test_as_of_each_change_the_read_equals_the_replica_of_the_log_up_to_it() -> None:
    """As of the time of each op, get, list and read report what a replica that
    held only the changes recorded by then reports (its plain read)."""
    stack, _ = history()
    st_ = stack.run()
    times = [op.at for op, _ in stack.ops]
    for n, at in enumerate(times, start=1):
        if n < len(times) and times[n] == at:
            continue  # the next op is at the same time: both were known then
        known, _ = history(upto=n)
        ref = known.run()
        for bid in ("b1", "b2"):
            assert get(st_, bid, as_of=at) == get(ref, bid), (n, bid)
        assert listed(st_, as_of=at) == listed(ref)
        assert read(st_, as_of=at) == read(ref)


def test_a_belief_not_created_by_then_is_not_found_as_of_then() -> None:
    stack, _ = history()
    st_ = stack.run()
    before = T0 + 12 * DAY  # b2 comes on day 15
    assert get(st_, "b2", as_of=before) is None
    assert "b2" not in listed(st_, as_of=before)
    assert "b2" not in read(st_, as_of=before)
    assert "b2" not in searched(st_, as_of=before)
    assert traced(st_, "b2", as_of=before) == TraceReply()
    assert get(st_, "b2", as_of=T0 + 16 * DAY) is not None
    assert traced(st_, "b2", as_of=T0 + 16 * DAY).belief is not None


def test_search_as_of_a_time_finds_a_belief_closed_since() -> None:
    stack, _ = history()
    st_ = stack.run()
    assert "b1" not in searched(st_)  # retracted on day 20
    assert "b1" in searched(st_, as_of=T0 + 16 * DAY)


def test_a_change_coalesced_away_in_a_feed_batch_is_read_from_its_evidence() -> None:
    """The feed may restate a belief several times in one batch and the projector
    apply only the last (core.newest_only): the t1 change then leaves no version
    of its own, and an as-of read between t1 and t2 still shows t1's version and
    time, from the evidence item it recorded."""
    stack, seq = history(upto=3)
    stack.run()
    proj_in = build("projector", replica="r1").inputs[0]
    changes = [c for c in stack.changes if c.subject.startswith(state(W, ""))]
    b1 = [
        n
        for n, c in enumerate(changes)
        if isinstance(c.message, BeliefChanged) and c.message.belief.id == "b1"
    ]
    assert len(b1) >= 3  # created, cited, refuted
    st_ = MemoryState()
    for n, change in enumerate(changes, start=1):
        if n - 1 not in b1[:-1]:  # every change of b1 but the last coalesced away
            st_.feed(proj_in, encode(change.message), ctx(change.subject, n))
    then = get(st_, "b1", as_of=BETWEEN)
    assert then is not None
    assert (then.version, then.updated_at, then.evidence_count) == (seq["t1"], T1, 1)
    known, _ = history(upto=2)
    assert then == get(known.run(), "b1")
    created = get(st_, "b1", as_of=T0)
    assert created is not None
    assert created.evidence_count == 0


def test_coalesced_items_count_whatever_order_their_ids_sort_in() -> None:
    """Evidence is held in id order, not recording order: the times of the items a
    coalesced change recorded are found all the same, so a read as of a time
    between two of them is read at the world's clock as it stood then."""
    t = [T0 + n * DAY for n in range(4)]
    ops = [
        add("b1"),
        evidence("z", "b1", "paper", at=t[1], observed=t[1]),
        evidence("m", "b1", "blog", at=t[2], observed=t[2]),
        evidence("a", "b1", "lab", "refutes", "measurement", observed=t[3]),
    ]
    s = Stack()
    for op in ops:
        s.op(op)
    s.run()
    proj_in = build("projector", replica="r1").inputs[0]
    st_ = MemoryState()
    for n, change in enumerate(s.changes, start=1):
        message = change.message
        if isinstance(message, BeliefChanged) and message.belief.updated_at == t[2]:
            continue  # "m" coalesced into "a"'s change
        if change.subject.startswith(state(W, "")):
            st_.feed(proj_in, encode(message), ctx(change.subject, n))
    ref = Stack()
    for op in ops[:3]:
        ref.op(op)
    between = t[2] + DAY / 2
    assert get(st_, "b1", as_of=between) == get(ref.run(), "b1")


def test_the_world_clock_as_it_stood_is_the_last_change_time_by_then() -> None:
    """``history.clock_at``: the newest change time at or before T, in T's hour or
    an earlier one, whatever order the changes came in and their offsets (the
    times are the beliefs' own; the index names the hours and who changed in
    them)."""
    st_ = MemoryState()
    base = T0 + 10 * HOUR
    stack, _ = history(upto=1)
    stack.run()
    (created,) = [
        c.message for c in stack.changes if isinstance(c.message, BeliefChanged)
    ]
    for n, at in enumerate((base + HOUR + 15 * MINUTE, base, base + 30 * MINUTE)):
        belief = msgspec.structs.replace(
            created.belief,
            id=f"b{n}",
            version=n + 1,
            created_at=at,
            updated_at=at.astimezone(timezone(timedelta(hours=2))),
        )
        change = msgspec.structs.replace(created, belief=belief)
        record: dict[bytes, bytes | None] = {
            f"belief/{W}/{belief.id}".encode(): encode(change)
        }
        st_.apply(Step(writes=record | clock_history.writes(st_, W, change, None)))
    assert clock_history.clock_at(st_, W, base - MINUTE) is None
    assert clock_history.clock_at(st_, W, base) == base
    assert clock_history.clock_at(st_, W, base + 45 * MINUTE) == base + 30 * MINUTE
    assert clock_history.clock_at(st_, W, base + HOUR) == base + 30 * MINUTE
    assert clock_history.clock_at(st_, W, base + 2 * HOUR) == base + HOUR + 15 * MINUTE


# Kinds whose reads as of a time are exact (an edge keeps only its last write).
_EXACT: Final = ("for", "against", "close", "trust")


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    drawn=st.lists(
        st.tuples(
            st.sampled_from(_EXACT),
            st.integers(0, 2),
            st.integers(0, 3),
            st.just(0),
        ),
        min_size=1,
        max_size=10,
    ),
    slotted=st.booleans(),
)
def test_as_of_any_time_every_belief_reads_as_a_replica_of_the_log_by_then(
    drawn: list[Drawn], slotted: bool
) -> None:
    """Ops in time order, one an hour (beliefs, evidence from several sources, trust
    settings, closings; rival answers or not): as of each op's time, get, read and
    trace answer what a replica holding only the ops recorded by then answers
    plainly."""
    # Each op at its own time: fusion re-reads a rival answer for an item of its
    # rivals when the item moves its clock (or its reading); and each trust
    # setting sets another value.
    timed = [(kind, k, j, n) for n, (kind, k, j, _) in enumerate(drawn, start=1)]
    log = [
        msgspec.structs.replace(op, trust=0.2 + 0.05 * n)
        if isinstance(op, SetTrust)
        else op
        for n, op in enumerate(build_log(timed, slotted))
    ]
    whole = _stack(log).run()
    for at in sorted({op.at for op in log}):
        ref = _stack([op for op in log if op.at <= at]).run()
        for bid in BELIEFS:
            assert get(whole, bid, as_of=at) == get(ref, bid), (at, bid)
            assert traced(whole, bid, as_of=at) == traced(ref, bid), (at, bid)
        assert read(whole, as_of=at) == read(ref)


def _stack(log: list[Any]) -> Stack:
    s = Stack()
    for op in log:
        s.op(op)
    return s


def worldview(st_: MemoryState, at: datetime, as_of: datetime | None = None) -> Any:
    request = Before(agent="ada", query="claim b1", at=at, as_of=as_of)
    reply = projector.serve(st_, request, W)
    assert isinstance(reply, WorldviewReply)
    return reply.view


def test_before_as_of_a_time_shows_each_belief_as_it_stood_then() -> None:
    """``before`` as of T: the beliefs in play as the world had been told by T (b1
    before the lab's refutation and the paper's trust cut, although retracted
    since; b2, created later, not at all), read as a replica of the log up to T
    reads them (the ranking itself, recency included, is today's index's)."""
    stack, _ = history()
    st_ = stack.run()
    known, _ = history(upto=2)

    def shown(view: Any) -> list[tuple[str, float | None]]:
        return [(leaf.id, leaf.confidence) for leaf in view.beliefs]

    then = worldview(st_, BETWEEN, as_of=BETWEEN)
    assert shown(then) == shown(worldview(known.run(), BETWEEN))
    assert [leaf.id for leaf in then.beliefs] == ["b1"]
    assert "b1" not in [leaf.id for leaf in worldview(st_, BETWEEN).beliefs]  # closed
    later = T0 + 16 * DAY  # refuted by the lab and the paper's trust cut, still active
    (b1,) = worldview(st_, later, as_of=later).beliefs
    reference, _ = history(upto=5)
    assert shown(worldview(reference.run(), later)) == [("b1", b1.confidence)]
    assert b1.confidence != then.beliefs[0].confidence

"""Contradictions with ids and a lifecycle (issue 18, item 5): recorded from the log
as posteriors and edges are applied, open until resolved by an op or dissolved,
widening their ends' uncertainty while open (docs/belief-math.md,
"Contradictions"). The stack runs in memory: fusion, the materializer (both
inputs) and a projector, through their real cores."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import contradictions as model
from worldline.actors.belief_model import posterior
from worldline.actors.projector import core as projector
from worldline.actors.projector import upgrade
from worldline.actors.registry import build
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context, Step
from worldline.protocols.beliefs import BeliefEdge, Contradiction, Evidence
from worldline.protocols.messages import (
    AddBelief,
    AddEvidence,
    Belief,
    BeliefChanged,
    BeliefListReply,
    BeliefReply,
    CloseBelief,
    ContradictionResolved,
    ContradictionsReply,
    DeclareWorld,
    GetBelief,
    LinkBeliefs,
    ListBeliefs,
    ListContradictions,
    ReadWorld,
    Rejection,
    ResolveContradiction,
    WorldReply,
    encode,
)
from worldline.protocols.subjects import (
    MATERIALIZER_IN,
    MATERIALIZER_OPS_IN,
    author_of,
    ops,
    state,
    world_of,
)
from worldline.protocols.world import Authority, WorldDecl, WorldInfo

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Outgoing
    from worldline.protocols.beliefs import Direction, EvidenceKind

W: Final = "w1"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
DAY: Final = timedelta(days=1)
Order = Literal["live", "ops-first", "posteriors-first"]


DECLARE: Final = DeclareWorld(
    op_id="op-declare",
    author="ada",
    at=T0,
    declaration=WorldDecl(
        world=WorldInfo(id=W),
        authority=Authority(admins=["ada"]),
        sources={"*": ["ada"]},
    ),
)


def ctx(subject: str, seq: int) -> Context:
    return Context(world=world_of(subject), author=author_of(subject),
                   subject=subject, seq=seq, now=T0)  # fmt: skip


@dataclass
class Stack:
    """Fusion, the materializer and a projector in memory. ``order``: how the
    materializer's two inputs interleave (as live, or every op before every
    posterior, or the reverse: what a replay may do)."""

    order: Order = "live"
    ops: list[tuple[Any, str]] = field(default_factory=list)

    def op(self, op: Any) -> int:
        self.ops.append((op, op.author))
        return len(self.ops)

    def run(self) -> MemoryState:
        fusion_in = build("fusion").inputs[0]
        mat = build("materializer").inputs
        mat_ops = next(i for i in mat if i.consumer == MATERIALIZER_OPS_IN)
        mat_post = next(i for i in mat if i.consumer == MATERIALIZER_IN)
        proj_in = build("projector", replica="r1").inputs[0]
        fusion_st, mat_st, self.projector = MemoryState(), MemoryState(), MemoryState()
        # Before the log: a world where ada, an admin (she may settle), reports every
        # source she names as its own voice (tests/core/test_source_identity.py).
        declared = encode(DECLARE)
        fusion_st.feed(fusion_in, declared, ctx(ops(W, "ada"), 0))
        mat_st.feed(mat_ops, declared, ctx(ops(W, "ada"), 0))
        per_op: list[tuple[tuple[bytes, Context], list[Outgoing]]] = []
        for seq, (op, author) in enumerate(self.ops, start=1):
            c = ctx(ops(W, author), seq)
            per_op.append(((encode(op), c), fusion_st.feed(fusion_in, encode(op), c)))
        changes: list[Outgoing] = []
        n = 0

        def posteriors(outs: list[Outgoing]) -> None:
            nonlocal n
            for out in outs:
                n += 1
                changes.extend(
                    mat_st.feed(mat_post, encode(out.message), ctx(out.subject, n))
                )

        if self.order == "live":
            for (payload, c), outs in per_op:
                changes.extend(mat_st.feed(mat_ops, payload, c))
                posteriors(outs)
        elif self.order == "ops-first":
            for (payload, c), _ in per_op:
                changes.extend(mat_st.feed(mat_ops, payload, c))
            for _, outs in per_op:
                posteriors(outs)
        else:
            for _, outs in per_op:
                posteriors(outs)
            for (payload, c), _ in per_op:
                changes.extend(mat_st.feed(mat_ops, payload, c))
        self.changes = changes
        for seq, out in enumerate(changes, start=1):
            if out.subject.startswith(state(W, "")):  # inbox messages go to agents
                self.projector.feed(proj_in, encode(out.message), ctx(out.subject, seq))
        return self.projector


def add(bid: str, at: datetime = T0, author: str = "ada") -> AddBelief:
    return AddBelief(op_id=f"add-{bid}", author=author, at=at, belief_id=bid,
                     text=f"claim {bid}")  # fmt: skip


def evidence(
    eid: str,
    bid: str,
    source: str,
    direction: Direction = "supports",
    kind: EvidenceKind = "citation",
    *,
    observed: datetime = T0,
    at: datetime | None = None,
) -> AddEvidence:
    item = Evidence(id=eid, belief_id=bid, direction=direction, kind=kind,
                    source=source, observed_at=observed, author="ada")  # fmt: skip
    return AddEvidence(op_id=f"op-{eid}", author="ada", at=at or observed,
                       evidence=item)  # fmt: skip


def link(eid: str, a: str, b: str, at: datetime, *, removed: bool = False,
         confidence: float = 0.9) -> LinkBeliefs:  # fmt: skip
    edge = BeliefEdge(id=eid, type="contradicts", source=a, target=b,
                      confidence=confidence, removed=removed)  # fmt: skip
    return LinkBeliefs(op_id=f"link-{eid}-{at:%j%H}-{removed}", author="ada", at=at,
                       edge=edge)  # fmt: skip


def resolve(cid: str, at: datetime, winner: str | None = None,
            author: str = "ada") -> ResolveContradiction:  # fmt: skip
    return ResolveContradiction(op_id=f"res-{cid}-{at:%j%H}", author=author, at=at,
                                contradiction_id=cid, reason="checked the source",
                                winner=winner)  # fmt: skip


def listing(
    st_: MemoryState,
    status: Literal["open", "resolved", "dissolved", "all"] = "all",
    at: datetime | None = None,
    as_of: datetime | None = None,
) -> dict[str, Contradiction]:
    reply = projector.serve(
        st_, ListContradictions(status=status, at=at, as_of=as_of), W
    )
    assert isinstance(reply, ContradictionsReply)
    assert reply.total == len(reply.contradictions)
    return {c.id: c for c in reply.contradictions}


def get(st_: MemoryState, bid: str, at: datetime | None = None) -> Belief:
    reply = projector.serve(st_, GetBelief(belief_id=bid, at=at), W)
    assert isinstance(reply, BeliefReply)
    assert reply.belief is not None
    return reply.belief


def read(st_: MemoryState, at: datetime | None = None) -> WorldReply:
    reply = projector.serve(st_, ReadWorld(at=at), W)
    assert isinstance(reply, WorldReply)
    return reply


def pair(a: str, b: str) -> str:
    return model.contradiction_id(W, "edge", (a, b))


# --- ids ---------------------------------------------------------------------------


def test_an_id_names_the_world_kind_and_ends_not_their_order() -> None:
    one = model.contradiction_id(W, "edge", ("b1", "b2"))
    assert one == model.contradiction_id(W, "edge", ("b2", "b1"))
    assert one.startswith("c-")
    assert len(one) == 18
    int(one[2:], 16)
    assert one != model.contradiction_id("w2", "edge", ("b1", "b2"))
    assert one != model.contradiction_id(W, "split", ("b1", "b2"))


# --- the seed's example: a citation for, a measurement against --------------------


def seed_example() -> Stack:
    """Two citations for b1 and a measurement against it ten days later: split
    evidence when the measurement is recorded (3.9 against 4.0)."""
    s = Stack()
    s.op(add("b1"))
    s.op(evidence("e1", "b1", "paper-a", at=T0 + timedelta(hours=1)))
    s.op(evidence("e2", "b1", "paper-b", at=T0 + timedelta(hours=2)))
    s.op(evidence("e3", "b1", "lab", "refutes", "measurement", observed=T0 + 10 * DAY))
    return s


def test_the_seeds_split_has_one_id_and_stays_open_whatever_the_read_clock() -> None:
    st_ = seed_example().run()
    found = listing(st_)
    sid = model.contradiction_id(W, "split", ("b1",))
    assert list(found) == [sid]
    split = found[sid]
    assert (split.kind, split.status, split.beliefs) == ("split", "open", ("b1",))
    assert split.opened_at == T0 + 10 * DAY
    assert split.opened_seq == 4
    # The flag is the reading at a clock (the measurement ages twice as fast as the
    # citations, so years later the split is read as even)...
    clocks = [T0 + 10 * DAY + k * 100 * DAY for k in range(8)]
    flags = {"contradicted" in get(st_, "b1", at).flags for at in clocks}
    assert True in flags
    # ...the contradiction is a record of the log: the same at every clock.
    for at in clocks:
        assert listing(st_, at=at) == found
        assert [c.id for c in read(st_, at).contradictions] == [sid]
        assert "stable" not in get(st_, "b1", at).flags
    # Before it was opened (valid time), it is not listed; its status never moves.
    assert listing(st_, at=T0 + 5 * DAY) == {}


# --- edges: open, widen, resolve, dissolve -----------------------------------------


def rivals() -> Stack:
    s = Stack()
    s.op(add("b1"))
    s.op(add("b2"))
    for n in range(12):  # b1 is well supported: stable and narrow on its own
        s.op(evidence(f"e{n}", "b1", f"src-{n}", at=T0 + n * timedelta(hours=1)))
    s.op(link("x1", "b1", "b2", T0 + DAY))
    return s


def test_a_contradicts_edge_opens_a_contradiction_that_widens_both_ends() -> None:
    base = Stack(ops=rivals().ops[:-1]).run()
    before = get(base, "b1")
    assert "stable" in before.flags
    st_ = rivals().run()
    cid = pair("b1", "b2")
    c = listing(st_)[cid]
    assert (c.kind, c.status, c.strength, c.beliefs) == (
        "edge",
        "open",
        0.9,
        ("b1", "b2"),
    )
    assert c.opened_at == T0 + DAY
    assert c.trace == ("b1", "b2", "x1")
    after = get(st_, "b1")
    assert after.confidence == before.confidence
    assert before.uncertainty is not None
    assert after.uncertainty is not None
    assert after.confidence is not None
    floor = 0.9 * math.sqrt(after.confidence * (1 - after.confidence))
    assert after.uncertainty == pytest.approx(max(before.uncertainty, floor))
    assert after.uncertainty > before.uncertainty
    assert "stable" not in after.flags
    assert "uncertain" in after.flags
    assert "contradicted" in after.flags
    # read shows it with its lifecycle; list and get agree on the widened ends.
    assert [x.id for x in read(st_).contradictions] == [cid]
    reply = projector.serve(st_, ListBeliefs(), W)
    assert isinstance(reply, BeliefListReply)
    assert {b.id: b for b in reply.beliefs}["b1"] == after


def test_resolving_with_a_winner_stops_the_widening() -> None:
    s = rivals()
    s.op(resolve(pair("b1", "b2"), T0 + 2 * DAY, winner="b1"))
    st_ = s.run()
    c = listing(st_)[pair("b1", "b2")]
    assert (c.status, c.winner, c.resolved_at, c.resolved_by) == (
        "resolved", "b1", T0 + 2 * DAY, "ada")  # fmt: skip
    assert c.reason == "checked the source"
    base = Stack(ops=rivals().ops[:-1]).run()
    for end in ("b1", "b2"):
        assert get(st_, end).uncertainty == get(base, end).uncertainty
        assert "contradicted" not in get(st_, end).flags
    assert "stable" in get(st_, "b1").flags
    assert listing(st_, "open") == {}
    assert list(listing(st_, "resolved")) == [pair("b1", "b2")]
    # As the world stood before the resolution was recorded, it was open.
    then = listing(st_, as_of=T0 + DAY + timedelta(hours=1))[pair("b1", "b2")]
    assert then.status == "open"
    assert then.resolved_at is None


def test_removing_the_edge_or_retracting_an_end_dissolves_it() -> None:
    s = rivals()
    s.op(link("x1", "b1", "b2", T0 + 3 * DAY, removed=True))
    c = listing(s.run())[pair("b1", "b2")]
    assert (c.status, c.resolved_at) == ("dissolved", T0 + 3 * DAY)
    s = rivals()
    s.op(CloseBelief(op_id="close-b2", author="ada", at=T0 + 4 * DAY, belief_id="b2",
                     how="retracted"))  # fmt: skip
    st_ = s.run()
    c = listing(st_)[pair("b1", "b2")]
    assert (c.status, c.resolved_at, c.reason) == (
        "dissolved", T0 + 4 * DAY, "belief b2 was retracted")  # fmt: skip
    assert "contradicted" not in get(st_, "b1").flags
    # A resolution after it dissolved changes nothing.
    s.op(resolve(pair("b1", "b2"), T0 + 5 * DAY))
    assert listing(s.run())[pair("b1", "b2")].status == "dissolved"


def test_a_resolution_before_the_contradiction_opened_does_not_settle_it() -> None:
    s = Stack()
    s.op(add("b1"))
    s.op(add("b2"))
    s.op(resolve(pair("b1", "b2"), T0 + timedelta(hours=1)))
    s.op(link("x1", "b1", "b2", T0 + DAY))
    assert listing(s.run())[pair("b1", "b2")].status == "open"


def test_a_readded_edge_reopens_it_and_an_old_resolution_does_not_count() -> None:
    s = rivals()
    s.op(resolve(pair("b1", "b2"), T0 + 2 * DAY))
    s.op(link("x1", "b1", "b2", T0 + 3 * DAY, removed=True))
    s.op(link("x1", "b1", "b2", T0 + 4 * DAY))
    c = listing(s.run())[pair("b1", "b2")]
    assert (c.status, c.opened_at) == ("open", T0 + 4 * DAY)


def test_a_replica_written_before_records_were_kept_gets_them_at_start_up() -> None:
    s = seed_example()
    s.op(add("b2"))
    s.op(add("b3"))
    s.op(link("x1", "b1", "b2", T0 + 11 * DAY))
    s.op(link("x2", "b2", "b3", T0 + 12 * DAY))
    s.op(CloseBelief(op_id="close-b3", author="ada", at=T0 + 13 * DAY,
                     belief_id="b3", how="retracted"))  # fmt: skip
    st_ = s.run()
    kept = listing(st_)
    assert {c.status for c in kept.values()} == {"open", "dissolved"}
    older = MemoryState()
    older.data.update(
        (k, v) for k, v in st_.data.items() if not k.startswith((b"contra", b"format/"))
    )
    assert listing(older) == {}
    while (writes := upgrade.upgrade(older)) is not None:
        older.apply(Step(writes=writes))
    assert listing(older) == kept


# --- the materializer passes a resolution on ----------------------------------------


def test_the_materializer_checks_the_winner_and_the_author() -> None:
    s = Stack()
    s.op(add("b1"))
    s.op(resolve(pair("b1", "b2"), T0, winner="b-nope"))
    s.run()
    rejected = [o.message for o in s.changes if isinstance(o.message, Rejection)]
    assert [r.code for r in rejected] == ["unknown_entity"]
    assert "b-nope" in rejected[0].reason
    s = Stack()
    s.op(add("b1"))
    s.ops.append((resolve(pair("b1", "b2"), T0, author="mallory"), "ada"))
    s.run()
    rejected = [o.message for o in s.changes if isinstance(o.message, Rejection)]
    assert [r.code for r in rejected] == ["unauthorized"]
    s = Stack()
    s.op(add("b1"))
    s.op(resolve(pair("b1", "b2"), T0, winner="b1"))
    s.run()
    passed = [
        (o.subject, o.message.seq)
        for o in s.changes
        if isinstance(o.message, ContradictionResolved)
    ]
    assert passed == [(state(W, "contradiction"), 2)]


def test_a_change_that_may_open_or_dissolve_one_is_never_coalesced() -> None:
    base = Belief(id="b1", text="t", type="claim", author="ada", created_at=T0,
                  updated_at=T0)  # fmt: skip
    plain = BeliefChanged(belief=base)
    split = BeliefChanged(
        belief=Belief(**{**_fields(base), "flags": ("contradicted",)})
    )
    closed = BeliefChanged(belief=Belief(**{**_fields(base), "status": "retracted"}))
    assert projector.newest_only(plain) == ("b1", "", ())
    assert projector.newest_only(split) is None
    assert projector.newest_only(closed) is None


def _fields(b: Belief) -> dict[str, Any]:
    return {f: getattr(b, f) for f in b.__struct_fields__}


# --- properties ----------------------------------------------------------------------

steps = st.lists(
    st.tuples(
        st.sampled_from(
            ["for", "against", "for", "against", "link", "unlink", "resolve", "retract"]
        ),
        st.integers(0, 2),  # which belief / source
        st.integers(1, 40),  # days after the last step
    ),
    min_size=1,
    max_size=14,
)


SPLIT_RESOLVED: Final = [
    ("for", 0, 1), ("against", 0, 1), ("resolve", 0, 2),
    ("link", 1, 1), ("retract", 2, 3), ("against", 0, 300),
]  # fmt: skip


def scripted(script: list[tuple[str, int, int]], order: Order = "live") -> Stack:
    """A random history over four beliefs: evidence for and against from four
    sources, contradicts edges linked and removed, resolutions, retractions."""
    s = Stack(order=order)
    for n in range(4):
        s.op(add(f"b{n}"))
    at = T0
    closed: set[str] = set()
    for n, (what, k, days) in enumerate(script):
        at += days * DAY
        bid, other = f"b{k}", f"b{(k + 1) % 4}"
        if what in ("for", "against") and bid not in closed:
            kind: EvidenceKind = "measurement" if k == 2 else "citation"
            d: Direction = "supports" if what == "for" else "refutes"
            s.op(evidence(f"e{n}", bid, f"src-{n % 4}", d, kind, observed=at))
        elif what == "link":
            s.op(link(f"x{k}", bid, other, at))
        elif what == "unlink":
            s.op(link(f"x{k}", bid, other, at, removed=True))
        elif what == "resolve":
            for cid in (pair(bid, other), model.contradiction_id(W, "split", (bid,))):
                s.op(resolve(cid, at, winner=bid))
        elif bid not in closed:
            s.op(CloseBelief(op_id=f"close-{bid}", author="ada", at=at, belief_id=bid,
                             how="retracted"))  # fmt: skip
            closed.add(bid)
    return s


def lifecycle_of(st_: MemoryState, **clock: Any) -> dict[str, tuple[object, ...]]:
    return {
        cid: (c.kind, c.beliefs, c.status, c.opened_seq, c.resolved_seq, c.winner)
        for cid, c in listing(st_, **clock).items()
    }


@settings(max_examples=60, deadline=None)
@given(script=steps, clocks=st.lists(st.integers(0, 800), min_size=2, max_size=4))
@example(script=SPLIT_RESOLVED, clocks=[0, 2, 4, 400])
def test_a_contradictions_status_does_not_change_with_the_read_clock(
    script: list[tuple[str, int, int]], clocks: list[int]
) -> None:
    st_ = scripted(script).run()
    now = lifecycle_of(st_)
    for days in clocks:
        at = T0 + days * DAY
        then = lifecycle_of(st_, at=at)
        assert set(then) <= set(now)
        assert all(then[cid] == now[cid] for cid in then)  # listed: same status
        hidden = set(now) - set(then)
        assert all(listing(st_)[cid].opened_at > at for cid in hidden)  # type: ignore[operator]
        # read shows the same records (open or resolved, ends active then).
        for c in read(st_, at).contradictions:
            assert lifecycle_of(st_)[c.id] == then[c.id]


@settings(max_examples=60, deadline=None)
@given(script=steps, days=st.one_of(st.none(), st.integers(0, 800)))
@example(script=SPLIT_RESOLVED, days=None)
@example(script=[("for", 0, 1), ("against", 0, 1)], days=None)
def test_an_open_contradiction_never_narrows_the_uncertainty(
    script: list[tuple[str, int, int]], days: int | None
) -> None:
    st_ = scripted(script).run()
    at = None if days is None else T0 + days * DAY
    open_ends = {b for c in listing(st_, "open", at=at).values() for b in c.beliefs}
    for n in range(4):
        bid = f"b{n}"
        reply = projector.serve(st_, GetBelief(belief_id=bid, at=at), W)
        assert isinstance(reply, BeliefReply)
        if reply.belief is None or reply.belief.uncertainty is None:
            continue
        plain = _plain(st_, bid, at)
        assert reply.belief.uncertainty >= plain - 1e-12
        if bid in open_ends and reply.belief.status == "active":
            assert "stable" not in reply.belief.flags


def _plain(st_: MemoryState, bid: str, at: datetime | None) -> float:
    """The uncertainty of the belief's own evidence at the read's clock, with no
    contradiction counted."""
    from worldline.actors.projector import clocks

    reads = clocks.Reads(st_, W, at)
    found = reads.belief(bid)
    assert found is not None
    assert found.uncertainty is not None
    return found.uncertainty


@settings(max_examples=40, deadline=None)
@given(script=steps)
@example(script=SPLIT_RESOLVED)
@example(script=[("link", 0, 1), ("retract", 0, 1), ("unlink", 0, 1)])
@example(script=[("link", 0, 1), ("link", 0, 1), ("retract", 0, 1)])
def test_the_same_log_gives_the_same_contradictions_on_replay(
    script: list[tuple[str, int, int]],
) -> None:
    live = lifecycle_of(scripted(script).run())
    again = lifecycle_of(scripted(script).run())
    assert live == again
    orders: tuple[Order, ...] = ("ops-first", "posteriors-first")
    for order in orders:
        assert lifecycle_of(scripted(script, order).run()) == live


@given(
    u=st.floats(0, 0.5),
    c=st.floats(0, 1),
    d=st.lists(st.floats(0, 1), max_size=4),
)
def test_widening_is_never_narrower_and_never_beyond_the_outcomes_sd(
    u: float, c: float, d: list[float]
) -> None:
    wide = model.widened(u, c, d)
    assert wide is not None
    assert wide >= u
    assert wide <= max(u, math.sqrt(c * (1 - c))) + 1e-12
    assert model.widened(None, c, d) is None
    assert model.widened(u, None, d) == u


def test_an_even_split_disputes_fully_and_a_settled_one_not_at_all() -> None:
    split = model.opened(W, "split", ("b1",), strength=0.5, trace=("b1",), at=T0, seq=3)
    assert model.disagreement(split) == 1.0
    assert model.split_strength(2.0, 2.0) == 0.5
    assert model.split_strength(0.0, 0.0) == 0.0
    done = model.dissolve(split, T0 + DAY, 9, "closed")
    assert model.disagreement(done) == 0.0
    widest = model.widened(0.0, 0.5, [1.0])
    assert widest is not None
    assert widest > posterior.UNCERTAIN_SD

"""Everything derived from the log is the same whatever the order of causally
independent ops (issue 25, point 2): fusion's store, the materializer's state and
the projector's replica (its contradictions included) and what ``contradictions``
answers.

Causally independent: ops on different beliefs (or edges), and evidence items on
one belief (or one edge). Ops that touch a common belief otherwise keep their order
(a belief's ``AddBelief`` before its evidence, a ``CloseBelief`` or a
``ResolveContradiction`` where it stands among that belief's ops), and a
``SetTrust`` or a declaration keeps its place among all ops.

Two logs differ in their OPS sequences by definition (a version is the sequence of
the op that last changed a thing, an evidence item keeps the sequence of the op that
recorded it), so the states are compared byte for byte once every OPS sequence in
them is blanked (:func:`canonical`): every other byte, times, floats, flags,
statuses, contradiction ids and records included, must be equal.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import msgspec
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import contradictions as model
from worldline.actors.belief_model import posterior
from worldline.actors.projector import contradictions as pcontra
from worldline.actors.projector import core as projector
from worldline.actors.projector import upgrade
from worldline.actors.registry import build
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context, Step
from worldline.protocols.beliefs import BeliefEdge, Evidence
from worldline.protocols.messages import (
    AddBelief,
    AddEdgeEvidence,
    AddEvidence,
    BeliefReply,
    CloseBelief,
    ContradictionsReply,
    DeclareWorld,
    GetBelief,
    LinkBeliefs,
    ListContradictions,
    ReadWorld,
    ResolveContradiction,
    SetTrust,
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
    from worldline.protocols.messages import Belief

W: Final = "w1"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
BELIEFS: Final = ("b1", "b2", "b3")
SOURCES: Final = ("s1", "s2", "s3", "s4")
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


def split_id(bid: str) -> str:
    return model.contradiction_id(W, "split", (bid,))


def pair_id(a: str, b: str) -> str:
    return model.contradiction_id(W, "edge", (a, b))


# --- the log ---------------------------------------------------------------------


def _evidence(n: int, bid: str, source: str, direction: str, hours: int) -> Any:
    at = T0 + timedelta(hours=hours)
    item = Evidence(id=f"e{n}", belief_id=bid, direction=direction,  # type: ignore[arg-type]
                    kind="measurement", source=source, observed_at=at,
                    author="ada")  # fmt: skip
    return AddEvidence(op_id=f"op-e{n}", author="ada", at=at, evidence=item)


Drawn = tuple[str, int, int, int]  # (kind, which belief/source, which other, hours)

KINDS: Final = ("for", "against") * 3 + (
    "link", "unlink", "resolve", "resolve_pair", "close", "trust",
    "edge_for", "edge_against",
)  # fmt: skip
draws = st.lists(
    st.tuples(
        st.sampled_from(KINDS),
        st.integers(0, 2),  # which belief
        st.integers(0, 3),  # which source
        st.integers(0, 72),  # hours after T0: the op's at
    ),
    min_size=1,
    max_size=16,
)


def build_log(drawn: list[Drawn], slotted: bool = False) -> list[Any]:
    """The ops of one log in a causal order: the beliefs first, then the drawn ops.
    ``slotted``: b1 and b2 are rival answers to one question."""
    log: list[Any] = [
        AddBelief(
            op_id=f"add-{b}",
            author="ada",
            at=T0,
            belief_id=b,
            text=f"claim {b}",
            slot="who signs" if slotted and b != "b3" else None,
        )
        for b in BELIEFS
    ]
    for n, (kind, k, j, hours) in enumerate(drawn):
        bid, other = BELIEFS[k], BELIEFS[(k + 1) % len(BELIEFS)]
        at = T0 + timedelta(hours=hours)
        if kind in ("for", "against"):
            direction = "supports" if kind == "for" else "refutes"
            log.append(_evidence(n, bid, SOURCES[j], direction, hours))
        elif kind in ("link", "unlink"):
            edge = BeliefEdge(id=f"x{k}", type="contradicts", source=bid,
                              target=other, confidence=0.9,
                              removed=kind == "unlink")  # fmt: skip
            log.append(LinkBeliefs(op_id=f"op-l{n}", author="ada", at=at, edge=edge))
        elif kind in ("resolve", "resolve_pair"):
            cid = split_id(bid) if kind == "resolve" else pair_id(bid, other)
            log.append(
                ResolveContradiction(
                    op_id=f"op-r{n}",
                    author="ada",
                    at=at,
                    contradiction_id=cid,
                    reason="checked",
                    winner=bid,
                )
            )
        elif kind in ("edge_for", "edge_against"):
            item = Evidence(
                id=f"ee{n}",
                belief_id=f"x{k}",
                direction="supports" if kind == "edge_for" else "refutes",
                kind="measurement",
                source=SOURCES[j],
                observed_at=at,
                author="ada",
            )
            log.append(
                AddEdgeEvidence(
                    op_id=f"op-ee{n}",
                    author="ada",
                    at=at,
                    edge_id=f"x{k}",
                    evidence=item,
                )
            )
        elif kind == "close":
            log.append(CloseBelief(op_id=f"op-c{n}", author="ada", at=at,
                                   belief_id=bid, how="retracted"))  # fmt: skip
        else:
            log.append(SetTrust(op_id=f"op-t{n}", author="ada", at=at,
                                source=SOURCES[j], trust=0.5))  # fmt: skip
    return log


def touches(op: Any) -> tuple[set[str], bool]:
    """What ``op`` touches (belief and edge names; ``*``: everything), and whether
    it is an evidence item (free among the evidence items of its belief)."""
    match op:
        case AddEvidence():
            return {op.evidence.belief_id}, True
        case AddBelief() | CloseBelief():
            return {op.belief_id}, False
        case AddEdgeEvidence():
            return {f"edge:{op.edge_id}"}, True
        case LinkBeliefs():
            return {op.edge.source, op.edge.target, f"edge:{op.edge.id}"}, False
        case ResolveContradiction():
            ends = {b for b in BELIEFS if op.contradiction_id == split_id(b)}
            ends |= {
                b
                for a in BELIEFS
                for b in BELIEFS
                if a != b and op.contradiction_id == pair_id(a, b)
            }
            return ends, False
        case _:
            return {"*"}, False


def depends(first: Any, then: Any, slotted: frozenset[str] = frozenset()) -> bool:
    """Whether ``then`` must stay after ``first``. Rival answers (``slotted``) are
    read together, so an op on one touches the slot: evidence on them stays free,
    anything else keeps its place among the slot's ops."""
    a, a_evidence = touches(first)
    b, b_evidence = touches(then)
    if "*" in a or "*" in b:
        return True
    if a & slotted:
        a.add("slot")
    if b & slotted:
        b.add("slot")
    return bool(a & b) and not (a_evidence and b_evidence)


@st.composite
def reorder(draw: st.DrawFn, log: list[Any]) -> list[Any]:
    """Another causal order of ``log``: a random topological order of its ops under
    :func:`depends` (each op after every earlier op it depends on)."""
    slotted = frozenset(o.belief_id for o in log if isinstance(o, AddBelief) and o.slot)
    before = [
        {i for i in range(j) if depends(log[i], log[j], slotted)}
        for j in range(len(log))
    ]
    done: set[int] = set()
    order: list[Any] = []
    while len(order) < len(log):
        ready = [j for j in range(len(log)) if j not in done and before[j] <= done]
        j = draw(st.sampled_from(ready))
        done.add(j)
        order.append(log[j])
    return order


# --- the cores, wired as the bus wires them --------------------------------------


def ctx(subject: str, seq: int) -> Context:
    return Context(world=world_of(subject), author=author_of(subject),
                   subject=subject, seq=seq, now=T0)  # fmt: skip


def run(log: list[Any]) -> dict[str, MemoryState]:
    """Fusion, the materializer (each op's posteriors right after it) and a
    projector fed the change feed, in memory."""
    fusion_in = build("fusion").inputs[0]
    mat = build("materializer").inputs
    mat_ops = next(i for i in mat if i.consumer == MATERIALIZER_OPS_IN)
    mat_post = next(i for i in mat if i.consumer == MATERIALIZER_IN)
    proj_in = build("projector", replica="r1").inputs[0]
    fusion, mat_st, proj = MemoryState(), MemoryState(), MemoryState()
    changes: list[Outgoing] = []
    derived_seq = 0
    for seq, op in enumerate([DECLARE, *log], start=1):
        c = ctx(ops(W, op.author), seq)
        payload = encode(op)
        outs = fusion.feed(fusion_in, payload, c)
        changes.extend(mat_st.feed(mat_ops, payload, c))
        for out in outs:
            derived_seq += 1
            changes.extend(
                mat_st.feed(
                    mat_post, encode(out.message), ctx(out.subject, derived_seq)
                )
            )
    for seq, out in enumerate(changes, start=1):
        if out.subject.startswith(state(W, "")):
            proj.feed(proj_in, encode(out.message), ctx(out.subject, seq))
    return {"fusion": fusion, "materializer": mat_st, "projector": proj}


# --- the comparison ----------------------------------------------------------------

# Fields that hold an OPS (or derived-stream) sequence: positions in one log (and
# ``cause``, the id of the op at an edge posterior's ``cause_seq``: its version).
SEQ_FIELDS: Final = frozenset(
    {
        "version",
        "created_seq",
        "recorded_seq",
        "opened_seq",
        "resolved_seq",
        "seq",
        "cause_seq",
        "posterior_seq",
        "cause",
    }
)
_SEQ_PART = re.compile(rb"(?<=/)\d{12}(?=/|$)")
# The materializer's keys whose value is a bare OPS sequence (the last op applied,
# the last that changed the world, the version an unchanging write kept; the
# projector's last change applied; fusion's last change to a slot answer).
SEQ_VALUED: Final = (
    b"lastop/",
    b"lastchange/",
    b"unchanged/",
    b"version/",
    b"slotclock/",
)


# A rejection's id hashes its op's OPS sequence in (crew.py): blanked like one.
_REJECTION_ID = re.compile(rb"rej-[0-9a-f]{20}")


def _blank(value: Any) -> Any:
    if isinstance(value, str) and _REJECTION_ID.fullmatch(value.encode()):
        return "rej-#"
    if isinstance(value, dict):
        return {k: (None if k in SEQ_FIELDS else _blank(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_blank(v) for v in value]
    return value


def canonical(st_: MemoryState) -> bytes:
    """The store's bytes with every OPS sequence blanked, as one msgpack blob."""
    rows = []
    for key, raw in st_.scan(b""):
        key = _REJECTION_ID.sub(b"rej-#", _SEQ_PART.sub(b"#", key))
        if key.startswith(SEQ_VALUED):
            rows.append((key, b""))
            continue
        try:
            value = _blank(msgspec.msgpack.decode(raw))
        except msgspec.DecodeError:
            value = raw
        rows.append((key, msgspec.msgpack.encode(value)))
    return msgspec.msgpack.encode(sorted(rows))


def answers(st_: MemoryState) -> ContradictionsReply:
    reply = projector.serve(st_, ListContradictions(status="all"), W)
    assert isinstance(reply, ContradictionsReply)
    return reply


def reads(st_: MemoryState) -> list[Any]:
    """What ``contradictions`` and ``read`` answer (now and at a later clock), and
    ``get`` for each belief, OPS sequences blanked."""
    later = T0 + timedelta(days=30)
    replies = [
        answers(st_),
        projector.serve(st_, ReadWorld(), W),
        projector.serve(st_, ReadWorld(at=later), W),
        *(projector.serve(st_, GetBelief(belief_id=b), W) for b in BELIEFS),
    ]
    return [_blank(msgspec.to_builtins(r)) for r in replies]


def describe(log: list[Any]) -> str:
    return "\n".join(f"{n:3d} {op!r}" for n, op in enumerate(log, start=2))


# The user's report: three measurements for, one against. Against first, the
# evidence is split after the second op and a contradiction opened and stayed open.
USERS_CASE: Final = [
    ("for", 0, 0, 1), ("for", 0, 1, 1), ("for", 0, 2, 1), ("against", 0, 3, 1),
]  # fmt: skip


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data(), drawn=draws, slotted=st.booleans())
@example(data=None, drawn=USERS_CASE, slotted=False)
def test_the_derived_state_does_not_depend_on_the_order_of_independent_ops(
    data: st.DataObject | None, drawn: list[Drawn], slotted: bool
) -> None:
    log = build_log(drawn, slotted)
    # data None: the user's case, the refuting measurement moved first.
    other = [*log[:3], log[-1], *log[3:-1]] if data is None else data.draw(reorder(log))
    first, second = run(log), run(other)
    for name in ("fusion", "materializer", "projector"):
        assert canonical(first[name]) == canonical(second[name]), (
            f"{name} differs\n--- one order\n{describe(log)}\n--- the other\n"
            + describe(other)
        )
    assert reads(first["projector"]) == reads(second["projector"])


# --- what a contradiction is, as a function of the state ----------------------------


def _claim(bid: str) -> AddBelief:
    return AddBelief(
        op_id=f"add-{bid}", author="ada", at=T0, belief_id=bid, text=f"claim {bid}"
    )


def _ev(n: int, direction: str, hours: int, bid: str = "b1") -> Any:
    return _evidence(n, bid, SOURCES[n % len(SOURCES)], direction, hours)


def _listed(log: list[Any]) -> dict[str, Any]:
    return {c.id: c for c in answers(run(log)["projector"]).contradictions}


def _read(log: list[Any], bid: str = "b1") -> Belief:
    reply = projector.serve(run(log)["projector"], GetBelief(belief_id=bid), W)
    assert isinstance(reply, BeliefReply)
    assert reply.belief is not None
    return reply.belief


def test_a_split_is_open_exactly_while_the_evidence_is_split() -> None:
    """Open while the belief's evidence is split, opened by the item whose
    recording made the current split; gone once it is not (no trace of the path);
    a resolution counts only for the split it was recorded after."""
    sid = split_id("b1")
    split = [_claim("b1"), _ev(0, "supports", 1), _ev(1, "refutes", 2)]
    opened = _listed(split)[sid]
    assert (opened.status, opened.opened_at) == ("open", T0 + timedelta(hours=2))
    resolved = [*split, ResolveContradiction(
        op_id="op-r", author="ada", at=T0 + timedelta(hours=3),
        contradiction_id=sid, reason="checked", winner="b1")]  # fmt: skip
    assert _listed(resolved)[sid].status == "resolved"
    # Two more for: 3 against 1 is no split, and no contradiction is left of it.
    settled = [*resolved, _ev(2, "supports", 4), _ev(3, "supports", 5)]
    assert sid not in _listed(settled)
    assert "uncertain" not in _read(settled).flags
    # Split again (3 against 2): a new split, opened by the item that made it,
    # and the resolution recorded before it does not settle it.
    again = _listed([*settled, _ev(4, "refutes", 6)])[sid]
    assert (again.status, again.opened_at) == ("open", T0 + timedelta(hours=6))


def test_two_orders_of_one_beliefs_evidence_read_the_same() -> None:
    """The user's report: three measurements for and one against, the one against
    first or last: the same reading, the same (absent) contradiction."""
    fors = [_ev(n, "supports", 1) for n in range(3)]
    against = _ev(3, "refutes", 1)
    last = [_claim("b1"), *fors, against]
    first = [_claim("b1"), against, *fors]
    assert _read(last) == _read(first)
    assert _listed(last) == _listed(first) == {}


def test_a_beliefs_clock_never_runs_back() -> None:
    """Evidence told late with an earlier ``at`` is read at the belief's latest
    clock, so the last reading does not depend on which op came last."""
    late, early = _ev(0, "supports", 30), _ev(1, "refutes", 2)
    one = _read([_claim("b1"), late, early])
    other = _read([_claim("b1"), early, late])
    assert one.updated_at == other.updated_at == T0 + timedelta(hours=30)
    assert (one.confidence, one.uncertainty) == (other.confidence, other.uncertainty)


def test_of_two_ends_closed_independently_the_first_in_time_dissolves_it() -> None:
    def close(bid: str, hours: int) -> CloseBelief:
        return CloseBelief(op_id=f"op-c-{bid}", author="ada", belief_id=bid,
                           at=T0 + timedelta(hours=hours), how="retracted")  # fmt: skip

    edge = BeliefEdge(id="x", type="contradicts", source="b1", target="b2")
    linked = [_claim("b1"), _claim("b2"),
              LinkBeliefs(op_id="op-l", author="ada", at=T0, edge=edge)]  # fmt: skip
    one = _listed([*linked, close("b2", 5), close("b1", 3)])
    other = _listed([*linked, close("b1", 3), close("b2", 5)])
    dissolved = one[pair_id("b1", "b2")]
    assert (dissolved.status, dissolved.reason) == (
        "dissolved",
        "belief b1 was retracted",
    )
    assert dissolved.resolved_at == T0 + timedelta(hours=3)
    assert _blank(msgspec.to_builtins(one)) == _blank(msgspec.to_builtins(other))


def test_rival_answers_read_the_same_whatever_order_the_slots_evidence_came_in() -> (
    None
):
    """b1 and b2 answer one question: evidence on b1 moves b2 too. b2 is read at the
    latest ``at`` of the slot's ops and carries the slot's trust, whichever op moved
    its reading (and whether or not the last one did)."""
    head = [
        *build_log([], slotted=True),
        SetTrust(op_id="op-t", author="ada", at=T0, source="s2", trust=0.5),
    ]
    first = _evidence(1, "b1", "s1", "supports", 0)
    for hours in (1, 0):  # b2's clock moves; b2's reading does not, its trust does
        then = _evidence(2, "b1", "s2", "refutes", hours)
        one, other = run([*head, first, then]), run([*head, then, first])
        for name in ("fusion", "materializer", "projector"):
            assert canonical(one[name]) == canonical(other[name]), (hours, name)


def test_a_replicas_splits_are_re_derived_from_the_evidence_at_start_up() -> None:
    """A replica written before: the split its first split posterior opened is
    still open though the evidence is no longer split (and another opened by its
    first split, not by the item that made the current one). The start-up upgrade
    re-derives both from the evidence as it stands."""
    settled = [_claim("b1"), *(_ev(n, "supports", 1) for n in range(3))]
    split = [_claim("b2"), _ev(4, "supports", 1, "b2"), _ev(5, "refutes", 2, "b2")]
    st_ = run([*settled, _ev(3, "refutes", 1), *split])["projector"]
    now = answers(st_)
    assert [c.beliefs for c in now.contradictions] == [("b2",)]
    older = MemoryState()
    older.data.update(st_.data)
    for bid in ("b1", "b2"):
        stale = model.opened(W, "split", (bid,), strength=0.25, trace=(bid,),
                             at=T0, seq=4)  # fmt: skip
        older.data[pcontra.record_key(W, stale.id)] = encode(stale)
    older.data[upgrade.FORMAT_KEY] = b"lexical-v3"
    assert len(answers(older).contradictions) == 2
    while (writes := upgrade.upgrade(older)) is not None:
        older.apply(Step(writes=writes))
    assert answers(older) == now
    assert older.data.pop(upgrade.FORMAT_KEY) == upgrade.FORMAT
    assert older.data == st_.data


@settings(max_examples=150, deadline=None)
@given(
    told=st.lists(
        st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 48)), max_size=12
    )
)
def test_the_opening_kept_as_items_arrive_is_the_opening_of_the_whole_evidence(
    told: list[tuple[bool, int, int]],
) -> None:
    """The projector keeps a split's opening as items arrive (one reading when the
    new item is the last told); that is always the full walk's answer."""
    evidence: list[Evidence] = []
    held: tuple[datetime, int] | None = None
    for n, (supports, source, hours) in enumerate(told, start=1):
        at = T0 + timedelta(hours=hours)
        item = Evidence(id=f"e{n:02d}", belief_id="b1",
                        direction="supports" if supports else "refutes",
                        kind="measurement", source=SOURCES[source], observed_at=at,
                        author="ada", recorded_seq=n, recorded_at=at)  # fmt: skip
        evidence.append(item)
        clock = max(e.observed_at for e in evidence)
        if not model.is_split(*posterior.sides(evidence, {}, clock)):
            held = None
            continue
        kept = model.split_opening(evidence, {}, after=item, held=held)
        assert kept is not None
        assert kept is model.split_opening(evidence, {})
        assert kept.recorded_at is not None
        held = (kept.recorded_at, kept.recorded_seq)

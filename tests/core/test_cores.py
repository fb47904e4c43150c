"""The pure actor cores, driven through MemoryState: no NATS, no LMDB, no event loop."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Final

import msgspec
import pytest

from worldline.actors.extractor import core as extractor
from worldline.actors.fusion import core as fusion
from worldline.actors.materializer import core as materializer
from worldline.actors.projector import core as projector
from worldline.actors.registry import build
from worldline.actors.runtime.errors import InvalidInput
from worldline.actors.runtime.memory import MemoryState, state_hash
from worldline.actors.runtime.spec import Context, Outgoing, Step
from worldline.actors.simulator import core as simulator
from worldline.protocols.messages import (
    FUSION_INBOX,
    PROJECTOR_RPC,
    AckInbox,
    AddBelief,
    AddEdge,
    Belief,
    BeliefChanged,
    BeliefListReply,
    BeliefReply,
    BeliefType,
    DeclareWorld,
    GetBelief,
    ListBeliefs,
    Observe,
    OpsInbox,
    OpVerdict,
    PosteriorUpdate,
    PutWork,
    RemoveEdge,
    SetField,
    SimStatus,
    SimStatusReply,
    StateHash,
    StateHashReply,
    Transition,
    UpsertEntity,
    encode,
)
from worldline.protocols.subjects import (
    MATERIALIZER_IN,
    MATERIALIZER_OPS_IN,
    RpcVerb,
    author_of,
    check_name,
    derived,
    obs,
    ops,
    rpc_pattern,
    state,
    world_of,
)
from worldline.protocols.world import Edge, WorldDecl, WorldInfo

W1: Final = "w1"
W2: Final = "w2"
NOW: Final = datetime(2024, 6, 1, 12, 0, 0, tzinfo=UTC)
T0: Final = datetime(2024, 6, 1, 8, 0, 0, tzinfo=UTC)


def ops_ctx(agent: str, world: str = W1, seq: int = 1) -> Context:
    return Context(
        world=world, author=agent, subject=ops(world, agent), seq=seq, now=NOW
    )


def obs_ctx(agent: str, world: str = W1, seq: int = 1) -> Context:
    return Context(
        world=world, author=agent, subject=obs(world, agent), seq=seq, now=NOW
    )


def ctx_for(subject: str, seq: int = 1) -> Context:
    """The context the runtime builds for a message delivered on ``subject``."""
    return Context(
        world=world_of(subject),
        author=author_of(subject),
        subject=subject,
        seq=seq,
        now=NOW,
    )


def add(
    belief_id: str = "b1",
    *,
    op_id: str = "op-1",
    author: str = "alice",
    text: str = "The build is flaky.",
    type: BeliefType = "claim",
    confidence: float | None = None,
    at: datetime = T0,
) -> AddBelief:
    return AddBelief(
        op_id=op_id,
        author=author,
        at=at,
        belief_id=belief_id,
        text=text,
        type=type,
        confidence=confidence,
    )


def belief(
    belief_id: str = "b1",
    *,
    confidence: float | None = 0.5,
    type: BeliefType = "claim",
    created_at: datetime = T0,
    version: int = 0,
) -> Belief:
    return Belief(
        id=belief_id,
        text=f"statement {belief_id}",
        type=type,
        confidence=confidence,
        author="alice",
        created_at=created_at,
        updated_at=created_at,
        version=version,
    )


def only(out: list[Outgoing]) -> Outgoing:
    assert len(out) == 1, out
    return out[0]


def is_empty(step: Step) -> bool:
    return not step.writes and not step.out


def verdict_of(step: Step) -> OpVerdict:
    """The verdict a step carries alone: fusion changed nothing, and says so."""
    assert not step.writes
    (out,) = step.out
    assert isinstance(out.message, OpVerdict)
    return out.message


# --- fusion -----------------------------------------------------------------------


def fuse(st: MemoryState, op: AddBelief, world: str = W1) -> Belief:
    out = only(st.apply(fusion.handle(st, op, ops_ctx(op.author, world))))
    assert isinstance(out.message, PosteriorUpdate)
    return out.message.belief


@pytest.mark.parametrize("stated", [0.0, 0.2, 0.8, 1.0])
def test_fusion_seeds_a_weak_prior(stated: float) -> None:
    st = MemoryState()
    b = fuse(st, add(confidence=stated))
    assert b.confidence == pytest.approx(stated)
    assert b.evidence_weight == 0.0
    # Beta(c*n, (1-c)*n) has variance c(1-c)/(n+1).
    expected_sd = math.sqrt(stated * (1 - stated) / (fusion.PRIOR_STRENGTH + 1))
    assert b.uncertainty == pytest.approx(expected_sd, abs=1e-12)
    raw = st.get(fusion.belief_key(W1, "b1"))
    assert raw is not None
    fused = msgspec.msgpack.decode(raw, type=fusion.FusedBelief)
    assert fused.belief.prior == stated  # kept, so later evidence starts from it
    assert fused.evidence == []
    assert fused.belief == b


@pytest.mark.parametrize("kind", ["claim", "assumption", "risk", "evidence"])
def test_fusion_defaults_to_an_open_question(kind: BeliefType) -> None:
    b = fuse(MemoryState(), add(type=kind))
    assert b.confidence == 0.5
    assert b.uncertainty == pytest.approx(math.sqrt(0.25 / (fusion.PRIOR_STRENGTH + 1)))


@pytest.mark.parametrize("kind", ["goal", "gap"])
def test_goals_and_gaps_carry_no_probability(kind: BeliefType) -> None:
    b = fuse(MemoryState(), add(type=kind))
    assert b.type == kind
    assert b.confidence is None
    assert b.uncertainty is None
    assert b.evidence_weight == 0.0


@pytest.mark.parametrize("kind", ["goal", "gap"])
def test_goal_with_confidence_is_rejected(kind: BeliefType) -> None:
    st = MemoryState()
    verdict = verdict_of(
        fusion.handle(st, add(type=kind, confidence=0.9), ops_ctx("alice"))
    )
    assert (verdict.outcome, verdict.code) == ("rejected", "invalid")
    assert "no probability" in verdict.reason
    assert st.data == {}


def test_fusion_rejects_op_from_another_author() -> None:
    with pytest.raises(InvalidInput, match="author"):
        fusion.handle(MemoryState(), add(author="mallory"), ops_ctx("alice"))


def test_fusion_same_op_twice_is_a_no_op() -> None:
    st = MemoryState()
    op = add(confidence=0.3)
    fuse(st, op)
    before = dict(st.data)
    again = fusion.handle(st, op, ops_ctx("alice", seq=2))
    assert verdict_of(again).outcome == "unchanged"  # answered, nothing changed
    assert st.data == before


def test_fusion_rejects_a_taken_belief_id() -> None:
    st = MemoryState()
    fuse(st, add(op_id="op-1"))
    taken = fusion.handle(st, add(op_id="op-2", text="Other."), ops_ctx("alice", seq=2))
    verdict = verdict_of(taken)
    assert (verdict.outcome, verdict.code, verdict.seq) == ("rejected", "conflict", 2)
    assert "already exists" in verdict.reason


def test_fusion_belief_ids_are_per_world() -> None:
    st = MemoryState()
    fuse(st, add(op_id="op-1"), world=W1)
    b = fuse(st, add(op_id="op-2"), world=W2)
    assert b.id == "b1"


def test_fusion_outputs_a_posterior_with_a_deterministic_msg_id() -> None:
    op = add(confidence=0.6)
    first = only(fusion.handle(MemoryState(), op, ops_ctx("alice", seq=1)).out)
    second = only(fusion.handle(MemoryState(), op, ops_ctx("alice", seq=99)).out)
    assert first.msg_id == second.msg_id
    assert first.subject == second.subject == derived(W1, "posterior", "0")
    assert isinstance(first.message, PosteriorUpdate)
    assert isinstance(second.message, PosteriorUpdate)
    # Same op, same posterior; only the OPS sequence it came in at differs.
    assert first.message.belief == msgspec.structs.replace(
        second.message.belief, created_seq=1
    )
    assert (first.message.cause_seq, second.message.cause_seq) == (1, 99)
    assert second.message.belief.created_seq == 99
    assert first.message.cause == op.op_id
    assert first.message.belief.id == op.belief_id
    assert first.message.belief.author == op.author
    assert first.message.belief.created_at == op.at
    other_op = only(
        fusion.handle(MemoryState(), add(op_id="op-2"), ops_ctx("alice")).out
    )
    other_world = only(fusion.handle(MemoryState(), op, ops_ctx("alice", W2)).out)
    assert len({first.msg_id, other_op.msg_id, other_world.msg_id}) == 3


def test_fusion_sets_cause_seq_to_the_ops_sequence() -> None:
    st = MemoryState()
    for seq, belief_id in ((3, "b1"), (17, "b2"), (4096, "b3")):
        op = add(belief_id, op_id=f"op-{belief_id}")
        out = only(st.apply(fusion.handle(st, op, ops_ctx("alice", seq=seq))))
        assert isinstance(out.message, PosteriorUpdate)
        assert out.message.cause_seq == seq
        assert out.message.cause == op.op_id


CREW_OPS: Final = (
    DeclareWorld(
        op_id="op-d",
        author="henry",
        at=T0,
        declaration=WorldDecl(world=WorldInfo(id=W1)),
    ),
    UpsertEntity(op_id="op-u", author="alice", at=T0, entity="agent:alice"),
    SetField(
        op_id="op-s", author="alice", at=T0, entity="agent:alice", field="x", value=1
    ),
    AddEdge(
        op_id="op-e",
        author="alice",
        at=T0,
        edge=Edge(id="e1", type="knows", source="agent:alice", target="agent:bob"),
    ),
    RemoveEdge(op_id="op-r", author="alice", at=T0, edge_id="e1"),
    PutWork(
        op_id="op-w",
        author="alice",
        at=T0,
        work_id="w1",
        work_kind="review_request",
        assigned_to="bob",
        goal="Review it.",
        requested_by="alice",
    ),
    AckInbox(op_id="op-a", author="alice", at=T0, message_ids=["m1"]),
)


@pytest.mark.parametrize("op", CREW_OPS, ids=lambda op: type(op).__name__)
def test_fusion_ignores_crew_ops(op: OpsInbox) -> None:
    st = MemoryState()
    fuse(st, add("b1"))
    before = dict(st.data)
    decoded = FUSION_INBOX.decode(encode(op))
    assert decoded == op
    # Even one naming another author: crew ops are the materializer's to judge.
    for ctx in (ops_ctx(op.author, seq=2), ops_ctx("mallory", seq=3)):
        assert is_empty(fusion.handle(st, decoded, ctx))
    assert st.data == before


# --- materializer -----------------------------------------------------------------


def materialize(
    st: MemoryState, b: Belief, cause_seq: int, world: str = W1
) -> list[Outgoing]:
    subject = derived(world, "posterior", "0")
    update = PosteriorUpdate(belief=b, cause=f"op-{b.id}", cause_seq=cause_seq)
    return st.apply(materializer.handle(st, update, ctx_for(subject, seq=1000)))


def test_materializer_version_is_the_causing_ops_sequence() -> None:
    st = MemoryState()
    # The same causing sequences in two worlds, fed interleaved and out of order:
    # versions come from the op log, not from a counter of applied changes.
    for cause_seq, belief_id in ((9, "b0"), (4, "b1"), (31, "b2")):
        for world in (W1, W2):
            out = only(materialize(st, belief(belief_id, version=77), cause_seq, world))
            assert isinstance(out.message, BeliefChanged)
            assert out.message.belief.version == cause_seq
            raw = st.get(materializer.belief_key(world, belief_id))
            assert raw is not None
            held = msgspec.msgpack.decode(raw, type=BeliefChanged)
            assert held.belief.version == cause_seq


def test_materializer_emits_belief_changed_on_the_state_feed() -> None:
    st = MemoryState()
    b = belief("b7", confidence=0.4)
    out = only(materialize(st, b, cause_seq=12))
    assert out.subject == state(W1, "belief")
    assert out.message == BeliefChanged(belief=msgspec.structs.replace(b, version=12))
    assert out.msg_id == f"state:{W1}:belief:b7:12"
    raw = st.get(materializer.belief_key(W1, "b7"))
    assert raw is not None
    assert msgspec.msgpack.decode(raw, type=BeliefChanged).belief.version == 12
    nxt = only(materialize(st, belief("b8"), cause_seq=13))
    assert nxt.msg_id == f"state:{W1}:belief:b8:13"
    elsewhere = only(materialize(st, b, cause_seq=12, world=W2))
    assert len({out.msg_id, nxt.msg_id, elsewhere.msg_id}) == 3


def test_materializer_suppresses_a_redelivered_posterior() -> None:
    st = MemoryState()
    b = belief("b1", confidence=0.4)
    materialize(st, b, cause_seq=5)
    before = dict(st.data)
    assert materialize(st, b, cause_seq=5) == []
    assert st.data == before
    changed = only(materialize(st, belief("b1", confidence=0.7), cause_seq=8))
    assert isinstance(changed.message, BeliefChanged)
    assert changed.message.belief.version == 8
    assert changed.message.belief.confidence == 0.7


def test_materializer_state_is_independent_of_input_interleaving() -> None:
    """Posteriors and crew ops reach the materializer through two durables; a replay
    may interleave them differently from the live run and must rebuild the same
    bytes."""
    spec = build("materializer")
    ops_in = next(i for i in spec.inputs if i.consumer == MATERIALIZER_OPS_IN)
    posterior_in = next(i for i in spec.inputs if i.consumer == MATERIALIZER_IN)
    op_feed = [
        (encode(add("b1", op_id="op-1")), ops_ctx("alice", seq=1)),
        (encode(CREW_OPS[0]), ops_ctx("henry", seq=2)),
        (encode(add("b2", op_id="op-3")), ops_ctx("alice", seq=3)),
    ]
    posteriors = [
        (
            encode(PosteriorUpdate(belief=belief(b), cause=op_id, cause_seq=seq)),
            ctx_for(derived(W1, "posterior", "0"), seq=n),
        )
        for n, (b, op_id, seq) in enumerate((("b1", "op-1", 1), ("b2", "op-3", 3)), 1)
    ]
    ops_first, posteriors_first = MemoryState(), MemoryState()
    for payload, ctx in op_feed:
        ops_first.feed(ops_in, payload, ctx)
    for payload, ctx in posteriors:
        ops_first.feed(posterior_in, payload, ctx)
    for payload, ctx in posteriors:
        posteriors_first.feed(posterior_in, payload, ctx)
    for payload, ctx in op_feed:
        posteriors_first.feed(ops_in, payload, ctx)
    assert ops_first.get(materializer.belief_key(W1, "b2")) is not None
    assert ops_first.data == posteriors_first.data
    assert state_hash(ops_first, world=W1) == state_hash(posteriors_first, world=W1)
    reply = materializer.serve(ops_first, StateHash(), W1)
    assert reply == StateHashReply(hash=state_hash(ops_first, world=W1), applied=3)


# --- projector --------------------------------------------------------------------


def project(st: MemoryState, b: Belief, world: str = W1) -> None:
    step = projector.handle(
        st, BeliefChanged(belief=b), ctx_for(state(world, "belief"))
    )
    st.apply(step)


def get(st: MemoryState, belief_id: str, world: str = W1) -> Belief | None:
    reply = projector.serve(st, GetBelief(belief_id=belief_id), world)
    assert isinstance(reply, BeliefReply)
    return reply.belief


def list_(st: MemoryState, request: ListBeliefs, world: str = W1) -> BeliefListReply:
    reply = projector.serve(st, request, world)
    assert isinstance(reply, BeliefListReply)
    return reply


def test_projector_keeps_the_newest_version() -> None:
    st = MemoryState()
    project(st, belief("b1", confidence=0.2, version=1))
    project(st, belief("b1", confidence=0.6, version=3))
    project(st, belief("b1", confidence=0.4, version=2))  # arrives late
    served = get(st, "b1")
    assert served is not None
    assert (served.version, served.confidence) == (3, 0.6)


def test_projector_get_returns_the_belief_or_none() -> None:
    st = MemoryState()
    b = belief("b1", version=1)
    project(st, b)
    # Read back with what only the whole graph can add (no dependencies here).
    assert get(st, "b1") == msgspec.structs.replace(b, effective_confidence=0.5)
    assert get(st, "b2") is None
    assert get(st, "b1", world=W2) is None


def test_projector_list_orders_filters_limits_and_counts() -> None:
    st = MemoryState()
    # Key order (by id) differs from (created_at, id) order on purpose.
    project(st, belief("a", type="risk", created_at=T0 + timedelta(hours=2), version=1))
    project(st, belief("c", type="claim", created_at=T0, version=2))
    project(st, belief("b", type="risk", created_at=T0, version=3))
    project(st, belief("d", type="risk", created_at=T0 + timedelta(hours=1), version=4))
    project(st, belief("z", type="risk", created_at=T0, version=1), world=W2)

    everything = list_(st, ListBeliefs())
    assert [b.id for b in everything.beliefs] == ["b", "c", "d", "a"]
    assert everything.total == 4

    risks = list_(st, ListBeliefs(type="risk"))
    assert [b.id for b in risks.beliefs] == ["b", "d", "a"]
    assert risks.total == 3

    page = list_(st, ListBeliefs(type="risk", limit=2))
    assert [b.id for b in page.beliefs] == ["b", "d"]
    assert page.total == 3

    goals = list_(st, ListBeliefs(type="goal"))
    assert (goals.beliefs, goals.total) == ((), 0)


# --- extractor --------------------------------------------------------------------


# --- simulator --------------------------------------------------------------------


def transition(transition_id: str) -> Transition:
    return Transition(
        id=transition_id, lineage="run-1", action="ls", observation="a.txt"
    )


def sim_count(st: MemoryState, world: str) -> int:
    reply = simulator.serve(st, SimStatus(), world)
    assert isinstance(reply, SimStatusReply)
    return reply.transitions


def test_simulator_counts_each_transition_once_per_world() -> None:
    st = MemoryState()
    ctx1 = ctx_for(derived(W1, "transition", "0"))
    ctx2 = ctx_for(derived(W2, "transition", "0"))
    assert sim_count(st, W1) == 0
    for tid in ("t1", "t2", "t1", "t3", "t2"):
        st.apply(simulator.handle(st, transition(tid), ctx1))
    st.apply(simulator.handle(st, transition("t1"), ctx2))
    assert is_empty(simulator.handle(st, transition("t3"), ctx1))
    assert sim_count(st, W1) == 3
    assert sim_count(st, W2) == 1


# --- pipeline and replay ----------------------------------------------------------


def test_pipeline_add_belief_reaches_the_projector() -> None:
    fusion_in = build("fusion").inputs[0]
    materializer_in = next(
        i for i in build("materializer").inputs if i.consumer == MATERIALIZER_IN
    )
    projector_spec = build("projector", replica="r1")
    fusion_st, materializer_st, projector_st = (
        MemoryState(),
        MemoryState(),
        MemoryState(),
    )

    op = add("b-pipe", op_id="op-pipe", confidence=0.7, type="risk")
    posteriors = fusion_st.feed(fusion_in, encode(op), ops_ctx("alice", seq=1))
    changes: list[Outgoing] = []
    for seq, out in enumerate(posteriors, start=1):
        changes += materializer_st.feed(
            materializer_in, encode(out.message), ctx_for(out.subject, seq)
        )
    for seq, out in enumerate(changes, start=1):
        assert (
            projector_st.feed(
                projector_spec.inputs[0], encode(out.message), ctx_for(out.subject, seq)
            )
            == []
        )

    verbs: tuple[RpcVerb, ...] = (
        "get", "list", "read", "view", "trace", "before", "search",
        "contradictions", "calibration",
    )  # fmt: skip
    assert len(projector_spec.services) == len(verbs) == 9
    assert [svc.subject for svc in projector_spec.services] == [
        rpc_pattern(verb) for verb in verbs
    ]
    request = PROJECTOR_RPC.decode(encode(GetBelief(belief_id="b-pipe")))
    for service in projector_spec.services:
        reply = service.serve(projector_st, request, W1)
        assert isinstance(reply, BeliefReply)
        assert reply.belief is not None
        assert reply.belief.id == "b-pipe"
        assert reply.belief.type == "risk"
        assert reply.belief.confidence == pytest.approx(0.7)
        assert reply.belief.version == 1
        assert reply.belief.author == "alice"
    listed = projector_spec.services[1].serve(
        projector_st, PROJECTOR_RPC.decode(encode(ListBeliefs())), W1
    )
    assert isinstance(listed, BeliefListReply)
    assert [b.id for b in listed.beliefs] == ["b-pipe"]
    assert projector_spec.services[0].serve(projector_st, request, W2) == BeliefReply()


def replay(op_list: list[AddBelief]) -> MemoryState:
    fusion_in = build("fusion").inputs[0]
    st = MemoryState()
    for seq, op in enumerate(op_list, start=1):
        st.feed(fusion_in, encode(op), ops_ctx(op.author, seq=seq))
    return st


def test_state_hash_tracks_content() -> None:
    op_list = [
        add("b1", op_id="op-1", confidence=0.2),
        add("b2", op_id="op-2", type="goal"),
        add("b3", op_id="op-3", author="bob"),
    ]
    assert FUSION_INBOX.decode(encode(op_list[0])) == op_list[0]
    one, two = replay(op_list), replay(op_list)
    assert one.data == two.data
    assert state_hash(one) == state_hash(two)
    assert state_hash(one) != state_hash(MemoryState())
    changed = replay([*op_list[:2], add("b3", op_id="op-3", author="bob", text="X.")])
    assert state_hash(one) != state_hash(changed)
    fewer = replay(op_list[:2])
    assert state_hash(one) != state_hash(fewer)


def test_names_and_ids_with_a_trailing_newline_are_rejected() -> None:
    op = AddBelief(op_id="op-1", author="alice", at=NOW, belief_id="b1", text="x")
    for bad in (
        msgspec.structs.replace(op, author="alice\n"),
        msgspec.structs.replace(op, belief_id="b1\n"),
    ):
        with pytest.raises(msgspec.ValidationError):
            FUSION_INBOX.decode(encode(bad))
    with pytest.raises(ValueError, match="invalid world name"):
        check_name("world", "w1\n")


def test_extracted_ops_stay_valid_for_the_longest_observation_id() -> None:
    observation = Observe(obs_id="o" * 128, author="alice", at=NOW, text="A. B.")
    step = extractor.handle(MemoryState(), observation, obs_ctx("alice"))
    assert len(step.out) == 2
    for item in step.out:
        # Each extracted op must decode where fusion reads it.
        assert FUSION_INBOX.decode(encode(item.message)) == item.message

"""Golden bytes for the wire contract: every message, encoded, byte for byte.

Each message class in :mod:`worldline.protocols.messages` has one fixed sample below,
and its encoding is stored in ``tests/golden/<kind tag>.msgpack``. A change to a field
name, order, type or default shows up here as a byte difference: either the change is a
bug, or it is a deliberate new message version (a new tag, ``.v2``) with its own golden
file.

To (re)generate the golden files after a deliberate change, run::

    WORLDLINE_REGEN_GOLDEN=1 python -m pytest tests/core/test_golden.py

The encoding tests then write the files (and are reported as skipped) instead of
comparing; commit the new files with the change that caused them.
"""

from __future__ import annotations

import math
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.protocols import messages
from worldline.protocols.beliefs import BeliefEdge, Contradiction, Evidence, TraceStep
from worldline.protocols.calibration import (
    CalibrationBin,
    CalibrationGroup,
    CalibrationReply,
    GetCalibration,
)
from worldline.protocols.contradictions import (
    ContradictionResolved,
    ContradictionsReply,
    ListContradictions,
    ResolveContradiction,
)
from worldline.protocols.messages import (
    EXTRACTOR_INBOX,
    FUSION_INBOX,
    FUSION_REPLY,
    FUSION_RPC,
    INBOX,
    LEASE_VALUE,
    MATERIALIZER_INBOX,
    MATERIALIZER_REPLY,
    MATERIALIZER_RPC,
    OPS_INBOX,
    PRESENCE_VALUE,
    PROJECTOR_INBOX,
    PROJECTOR_REPLY,
    PROJECTOR_RPC,
    SIMULATOR_INBOX,
    SIMULATOR_REPLY,
    SIMULATOR_RPC,
    AckInbox,
    AddBelief,
    AddEdge,
    AddEdgeEvidence,
    AddEvidence,
    AgentView,
    AssessSources,
    Before,
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    BeliefListReply,
    BeliefReply,
    CloseBelief,
    DeadLetter,
    DeclareWorld,
    EdgeChanged,
    EdgePosterior,
    EntityChanged,
    ForecastOutcome,
    GetBelief,
    GetView,
    InboxChanged,
    Lease,
    LinkBeliefs,
    ListBeliefs,
    Message,
    Notification,
    Observe,
    OpApplied,
    OpStatus,
    OpStatusReply,
    OpVerdict,
    PosteriorUpdate,
    Presence,
    PutWork,
    ReadWorld,
    Rejection,
    RemoveEdge,
    RpcError,
    SearchBeliefs,
    SearchHit,
    SearchReply,
    SetField,
    SetTrust,
    SimEnd,
    SimEnded,
    SimError,
    SimForecast,
    SimForecastReply,
    SimStart,
    SimStarted,
    SimStatus,
    SimStatusReply,
    SimStep,
    SimStepReply,
    Sources,
    SourcesReply,
    SourceStanding,
    StateHash,
    StateHashReply,
    Statement,
    TraceBelief,
    TraceReply,
    Transition,
    UpsertEntity,
    ViewReply,
    WorkAssigned,
    WorldDeclared,
    WorldReply,
    WorldviewReply,
    encode,
)
from worldline.protocols.simulator import Limits
from worldline.protocols.subjects import ops
from worldline.protocols.world import (
    Action,
    Authority,
    Constraint,
    Dampening,
    Edge,
    EdgeSeed,
    Entity,
    EntitySeed,
    Environment,
    FieldState,
    Goal,
    Grant,
    Intent,
    Policy,
    Rule,
    Subscription,
    TrustGrant,
    TrustRules,
    WorldDecl,
    WorldInfo,
)
from worldline.protocols.worldview import Leaf, Worldview

GOLDEN_DIR: Final = Path(__file__).resolve().parent.parent / "golden"
REGEN: Final = os.environ.get("WORLDLINE_REGEN_GOLDEN") == "1"

T0: Final = datetime(2024, 5, 17, 9, 30, 0, tzinfo=UTC)
T1: Final = datetime(2024, 5, 17, 9, 31, 15, 250_000, tzinfo=UTC)
T2: Final = datetime(2024, 5, 18, 23, 59, 59, 999_999, tzinfo=UTC)

BELIEF_A: Final = Belief(
    id="b-0123456789abcdef",
    text="The cache is invalidated on every deploy.",
    type="claim",
    confidence=0.75,
    evidence_weight=3.5,
    uncertainty=0.125,
    label="cache",
    flags=("stable", "uncertain"),
    author="alice",
    created_at=T0,
    updated_at=T1,
    version=7,
)
BELIEF_B: Final = Belief(
    id="b-fedcba9876543210",
    text="Ship the migration before Friday.",
    type="goal",
    author="bob_2",
    created_at=T1,
    updated_at=T2,
    version=8,
)

DECL: Final = WorldDecl(
    world=WorldInfo(id="crew", kind="software", description="The Soteria pilot crew."),
    environment=Environment(
        entity_types=["project", "company"],
        surfaces=["repo", "tickets"],
        source_ranking=["tests", "docs"],
    ),
    intent=Intent(
        goals=[Goal(id="ship", text="Ship the pilot.", success=["pilot is live"])],
        constraints=[Constraint(id="budget", text="Stay within budget.")],
    ),
    policy=Policy(invariants=["main stays green"], conventions=["small commits"]),
    actions=[
        Action(
            id="deploy",
            text="Deploy to prod.",
            safety="needs-approval",
            constraints=["budget"],
        )
    ],
    authority=Authority(
        admins=["henry"],
        grants=[Grant(agents=["ada", "henry"], fields=["project.*", "company.name"])],
    ),
    entities=[
        EntitySeed(id="agent:spock", fields={"role": "engineer"}),
        EntitySeed(
            id="project:soteria",
            fields={"phase": "design", "budget": 12, "tags": ["pilot", "health"]},
        ),
    ],
    edges=[
        EdgeSeed(
            id="e1",
            type="collaborates_on",
            source="agent:spock",
            target="project:soteria",
        )
    ],
    subscriptions=[Subscription(agent="zora", on=["company.*", "project.phase"])],
    rules=[
        Rule(
            id="replan",
            on="project.phase",
            notify="collaborates_on",
            work_kind="replan_request",
            goal="Replan: {entity}.{field} is now {value}",
            priority=2,
            due_in_hours=24.0,
        )
    ],
    dampening=Dampening(depth=3, dedupe_window=600.0, max_fanout=8),
    sources={"grafana": ["alice"], "store:*": ["loader"]},
    trust=TrustRules(
        grants=[TrustGrant(agents=["henry"], names=["agent:*"])],
        settle=["henry"],
        close=["henry"],
    ),
)
ENTITY: Final = Entity(
    id="project:soteria",
    type="project",
    fields={
        "phase": FieldState(value="build", version=42, author="ada", at=T1),
        "tags": FieldState(value=["pilot", "health"], version=3, author="henry", at=T0),
    },
    version=42,
)
EDGE: Final = Edge(
    id="e1",
    type="collaborates_on",
    source="agent:spock",
    target="project:soteria",
    version=3,
    author="henry",
)

EVIDENCE: Final = Evidence(
    id="ev-1",
    belief_id="b-0123456789abcdef",
    direction="supports",
    kind="measurement",
    source="grafana",
    observed_at=T0,
    text="cache hit rate drops to 0 after each deploy",
    artifact="obs-42",
    author="alice",
    recorded_seq=12,
)
BELIEF_EDGE: Final = BeliefEdge(
    id="be-1",
    type="depends_on",
    source="b-0123456789abcdef",
    target="b-fedcba9876543210",
    confidence=0.9,
    author="alice",
    version=13,
    at=T2,
)

WORLDVIEW: Final = Worldview(
    world="crew",
    agent="spock",
    query="Should we deploy the cache fix today?",
    at=T1,
    environment=[
        Leaf(id="crew", kind="world", text="crew: software", score=2.0, trace=("crew",))
    ],
    current=[
        Leaf(
            id="b-0123456789abcdef",
            kind="claim",
            text="The cache is invalidated on every deploy.",
            score=1.25,
            confidence=0.75,
            flags=("stable", "uncertain"),
            trace=("b-0123456789abcdef", "b-fedcba9876543210"),
        ),
        Leaf(
            id="b-gap-1",
            kind="gap",
            text="Why is the cache cold?",
            score=0.5,
            trace=("b-gap-1",),
        ),
    ],
    affordances=[
        Leaf(
            id="deploy",
            kind="needs-approval",
            text="Deploy to prod.",
            score=1.5,
            status="flagged",
            trace=("budget",),
        )
    ],
    moves=[
        Leaf(
            id="move:b-0123456789abcdef",
            kind="move",
            text="Gather evidence on: The cache is invalidated on every deploy.",
            score=0.125,
            confidence=0.75,
            trace=("b-0123456789abcdef",),
        )
    ],
    limiting=Leaf(
        id="b-0123456789abcdef",
        kind="claim",
        text="The cache is invalidated on every deploy.",
        score=0.0625,
        trace=("b-0123456789abcdef",),
    ),
    clarity=0.5,
    prompt="# Worldview for spock in crew\n",
    tokens=8,
)

SAMPLES: Final[tuple[Message, ...]] = (
    Observe(
        obs_id="obs-42",
        author="alice",
        at=T0,
        source="notes/standup.md",
        text="- The cache is invalidated on every deploy.\n- Builds take 12 min.",
    ),
    AddBelief(
        op_id="op-7",
        author="alice",
        at=T0,
        belief_id="b-0123456789abcdef",
        text="The cache is invalidated on every deploy.",
        type="risk",
        confidence=0.8,
        source="alice:notes/standup.md",
        label="load-bearing",
    ),
    PosteriorUpdate(
        belief=BELIEF_A, cause="op-7", cause_seq=7, delta=True, added=[EVIDENCE]
    ),
    Transition(
        id="tr-1",
        lineage="run-9",
        task="fix flaky test",
        context="repo at abc123",
        action="pytest -x tests/test_cache.py",
        observation="1 failed, 12 passed",
        pairing="id",
    ),
    BeliefChanged(belief=BELIEF_B),
    GetBelief(belief_id="b-0123456789abcdef"),
    ListBeliefs(type="risk", limit=50),
    BeliefReply(belief=BELIEF_A),
    BeliefListReply(beliefs=(BELIEF_A, BELIEF_B), total=12),
    SimStatus(),
    SimStatusReply(transitions=314),
    RpcError(code="invalid", message="limit must be between 1 and 10000"),
    DeadLetter(
        actor="fusion",
        subject=ops("w1", "alice"),
        stream_seq=1234,
        reason="belief b-1 already exists in world w1",
        payload=b"\x81\xa4kind\xb0op.add_belief.v1\x00\xff",
        at=T2,
    ),
    DeclareWorld(op_id="op-decl-1", author="henry", at=T0, declaration=DECL),
    UpsertEntity(
        op_id="op-up-1",
        author="ada",
        at=T0,
        entity="company:acme",
        fields={"name": "Acme", "size": 40, "ratio": 0.5, "public": False, "x": None},
    ),
    SetField(
        op_id="op-set-1",
        author="ada",
        at=T1,
        entity="project:soteria",
        field="phase",
        value="build",
        expect_version=3,
    ),
    AddEdge(op_id="op-edge-1", author="spock", at=T1, edge=EDGE),
    RemoveEdge(op_id="op-edge-2", author="spock", at=T2, edge_id="e1"),
    PutWork(
        op_id="op-work-1",
        author="ada",
        at=T1,
        work_id="research.cache-1",
        work_kind="research_request",
        assigned_to="spock",
        goal="Find out why the cache is cold.",
        priority=1,
        due_at=T2,
        status="in_progress",
        requested_by="ada",
        expect_version=5,
    ),
    AckInbox(op_id="op-ack-1", author="spock", at=T2, message_ids=["note-1", "work-2"]),
    Rejection(
        id="rej-1",
        op_id="op-set-1",
        code="version_conflict",
        reason="project:soteria.phase is at version 4, not 3",
        current_version=4,
        current_value="review",
        at=T1,
    ),
    Notification(
        id="note-1",
        entity="project:soteria",
        field="phase",
        value="build",
        version=42,
        rule="replan",
        cause="op-set-1",
        depth=1,
        at=T1,
    ),
    WorkAssigned(
        id="work-2",
        work="work:replan-abc",
        work_kind="replan_request",
        goal="Replan: project:soteria.phase is now build",
        priority=2,
        due_at=T2,
        requested_by="ada",
        rule="replan",
        cause="op-set-1",
        at=T1,
    ),
    EntityChanged(entity=ENTITY),
    EdgeChanged(edge=EDGE, removed=True),
    WorldDeclared(declaration=DECL, version=1),
    InboxChanged(agent="spock", pending=2, recent=["a line", "another line"], seq=42),
    ReadWorld(entity_type="project"),
    WorldReply(declaration=DECL, entities=[ENTITY], edges=[EDGE], version=42),
    GetView(agent="spock"),
    ViewReply(
        view=AgentView(
            world="crew",
            agent="spock",
            me=Entity(id="agent:spock", type="agent", version=1),
            related=[ENTITY],
            edges=[EDGE],
            work=[Entity(id="work:replan-abc", type="work", version=42)],
            inbox_pending=2,
            inbox_recent=["work work:replan-abc: Replan"],
            may_write=["project.*"],
            goals=["Ship the pilot."],
        ),
        version=42,
    ),
    StateHash(),
    StateHashReply(hash="ab" * 32, applied=42),
    ResolveContradiction(
        op_id="op-rc-1",
        author="spock",
        at=T2,
        contradiction_id="c-0123456789abcdef",
        reason="the lab re-measured",
        winner="b-0123456789abcdef",
    ),
    ContradictionResolved(
        contradiction_id="c-0123456789abcdef",
        reason="the lab re-measured",
        winner="b-0123456789abcdef",
        author="spock",
        at=T2,
        seq=77,
    ),
    ListContradictions(status="all", at=T1, as_of=T2, limit=50),
    GetCalibration(bins=5, limit=20),
    CalibrationReply(
        world=CalibrationGroup(
            name="world",
            count=40,
            brier=0.125,
            ece=0.0625,
            mean_confidence=0.75,
            frequency=0.625,
            bins=(
                CalibrationBin(
                    lo=0.6, hi=0.8, count=40, mean_confidence=0.75, frequency=0.625
                ),
            ),
        ),
        by_source=(
            CalibrationGroup(
                name="lab",
                count=40,
                brier=0.125,
                ece=0.0625,
                mean_confidence=0.75,
                frequency=0.625,
                agreement=0.5,
            ),
        ),
        method="isotonic",
        fitted_on=40,
        min_records=30,
    ),
    ContradictionsReply(
        contradictions=(
            Contradiction(
                kind="edge",
                beliefs=("b-0123456789abcdef", "b-fedcba9876543210"),
                strength=0.9,
                trace=("b-0123456789abcdef", "b-fedcba9876543210", "be-1"),
                id="c-0123456789abcdef",
                status="resolved",
                opened_at=T0,
                opened_seq=12,
                resolved_at=T2,
                resolved_seq=77,
                winner="b-0123456789abcdef",
                reason="the lab re-measured",
                resolved_by="spock",
            ),
        ),
        total=1,
    ),
    Sources(source="gartner", limit=10),
    SourcesReply(
        sources=[
            SourceStanding(
                source="gartner",
                trust=0.5,
                accuracy=0.9,
                independence=0.75,
                claims=12,
                learned=1.1,
                weight=0.55,
            )
        ],
        total=1,
        rounds=23,
        change=4.5e-7,
    ),
    OpStatus(seq=43),
    OpStatusReply(
        state="rejected",
        rejection=Rejection(
            id="rej-2",
            op_id="op-set-2",
            code="unauthorized",
            reason="zora may not write project.phase",
            at=T2,
        ),
        fence=43,
    ),
    Presence(agent="spock", status="busy", task="replanning soteria", at=T2),
    Lease(holder="mat-b", term=3, published={"WL_OPS": 41, "WL_DERIVED": 17}),
    AddEvidence(op_id="op-ev-1", author="alice", at=T1, evidence=EVIDENCE),
    Statement(
        op_id="op-st-1",
        author="extractor",
        at=T1,
        belief_id="b-0123456789abcdef",
        text="The cache is invalidated on every deploy.",
        type="claim",
        evidence=msgspec.structs.replace(EVIDENCE, author="extractor"),
    ),
    SetTrust(
        op_id="op-tr-1", author="henry", at=T2, source="gartner", trust=0.5, lock=True
    ),
    LinkBeliefs(op_id="op-ln-1", author="alice", at=T2, edge=BELIEF_EDGE),
    AddEdgeEvidence(
        op_id="op-ee-1",
        author="alice",
        at=T2,
        edge_id="be-1",
        evidence=msgspec.structs.replace(
            EVIDENCE, id="ev-e1", belief_id="be-1", voice="agent:alice"
        ),
    ),
    EdgePosterior(
        edge=msgspec.structs.replace(
            BELIEF_EDGE,
            confidence=0.75,
            stated=0.9,
            evidence_count=1,
            evidence_weight=4.0,
            uncertainty=0.125,
            flags=("uncertain",),
            posterior_seq=14,
        ),
        cause="op-ee-1",
        cause_seq=14,
        evidence=[msgspec.structs.replace(EVIDENCE, id="ev-e1", belief_id="be-1")],
        trust={"grafana": 0.5},
    ),
    AssessSources(op_id="op-as-1", author="henry", at=T2),
    CloseBelief(
        op_id="op-cl-1",
        author="alice",
        at=T2,
        belief_id="b-fedcba9876543210",
        how="retracted",
        reason="superseded by the new plan",
    ),
    BeliefEdgeChanged(edge=BELIEF_EDGE),
    TraceBelief(belief_id="b-0123456789abcdef"),
    OpApplied(seq=43),
    SimStart(task="book a flight", context="user: hi", exclude_lineages=["lin-1"]),
    SimStarted(session_id="sim-00ff", limits=Limits(sessions=8), index="ab" * 32),
    SimStep(
        session_id="sim-00ff",
        message={"role": "assistant", "content": "Where?"},
        best_guess=True,
    ),
    SimStepReply(
        message={"role": "user", "content": "Lisbon"},
        terminal=True,
        grounding=["tr-1", "tr-2"],
        grounded=False,
        similarity=0.25,
        note="no grounding: the nearest real reply to a message scores 0.250",
    ),
    SimEnd(session_id="sim-00ff"),
    SimEnded(session_id="sim-00ff"),
    SimError(name="no_grounding", message="nearest 0.197", similarity=0.197),
    SimForecast(
        move='search_flights({"to": "LIS"})',
        context="user: to Lisbon",
        k=3,
        exclude_lineages=["lin-1"],
    ),
    SimForecastReply(
        move='search_flights({"to": "LIS"})',
        grounded=True,
        outcomes=(
            ForecastOutcome(
                observation='["TP1352"]',
                support=2,
                lineages=("lin-2", "lin-3"),
                transitions=("tr-2", "tr-3"),
                similarity=0.875,
            ),
        ),
        index="ab" * 32,
        note="2 of 3 nearest real transitions score above 0.50: 1 distinct outcome",
        move_kind="tool",
        floor=0.5,
    ),
    TraceReply(
        belief=BELIEF_A,
        steps=[TraceStep(evidence=EVIDENCE, before=0.5, after=0.75)],
        edges=[BELIEF_EDGE],
    ),
    Before(agent="spock", query="Should we deploy the cache fix today?", at=T1),
    WorldviewReply(view=WORLDVIEW),
    SearchBeliefs(query="cache fix", limit=5, type="claim", at=T1, cursor="c1"),
    SearchReply(
        hits=(
            SearchHit(
                belief=BELIEF_A,
                score=0.75,
                channels={"lexical": 1.0, "prior": 0.5},
                trace=("ev-1 runbook",),
            ),
        ),
        embedder="hashing-crc32-256-v1",
        next_cursor="c2",
    ),
    OpVerdict(
        op_id="op-ev-9",
        seq=44,
        outcome="rejected",
        code="unknown_belief",
        reason="no belief b-unknown in world crew; add it first",
        belief_id="b-unknown",
    ),
)


def _decode_dead_letter(data: bytes) -> DeadLetter:
    return msgspec.msgpack.decode(data, type=DeadLetter)


# Every decoder that must accept a message of each class (its inbox, RPC or reply).
DECODERS: Final[dict[type[Message], tuple[Any, ...]]] = {
    Observe: (EXTRACTOR_INBOX.decode,),
    AddBelief: (FUSION_INBOX.decode,),
    PosteriorUpdate: (MATERIALIZER_INBOX.decode,),
    Transition: (SIMULATOR_INBOX.decode,),
    BeliefChanged: (PROJECTOR_INBOX.decode,),
    GetBelief: (PROJECTOR_RPC.decode,),
    ListBeliefs: (PROJECTOR_RPC.decode,),
    BeliefReply: (PROJECTOR_REPLY.decode,),
    BeliefListReply: (PROJECTOR_REPLY.decode,),
    RpcError: (
        PROJECTOR_REPLY.decode,
        SIMULATOR_REPLY.decode,
        MATERIALIZER_REPLY.decode,
    ),
    SimStatus: (SIMULATOR_RPC.decode,),
    SimStatusReply: (SIMULATOR_REPLY.decode,),
    DeadLetter: (_decode_dead_letter,),
    DeclareWorld: (OPS_INBOX.decode,),
    UpsertEntity: (OPS_INBOX.decode,),
    SetField: (OPS_INBOX.decode,),
    AddEdge: (OPS_INBOX.decode,),
    RemoveEdge: (OPS_INBOX.decode,),
    PutWork: (OPS_INBOX.decode,),
    AckInbox: (OPS_INBOX.decode,),
    Rejection: (INBOX.decode,),
    Notification: (INBOX.decode,),
    WorkAssigned: (INBOX.decode,),
    EntityChanged: (PROJECTOR_INBOX.decode,),
    EdgeChanged: (PROJECTOR_INBOX.decode,),
    WorldDeclared: (PROJECTOR_INBOX.decode,),
    InboxChanged: (PROJECTOR_INBOX.decode,),
    ReadWorld: (PROJECTOR_RPC.decode,),
    WorldReply: (PROJECTOR_REPLY.decode,),
    GetView: (PROJECTOR_RPC.decode,),
    ViewReply: (PROJECTOR_REPLY.decode,),
    StateHash: (MATERIALIZER_RPC.decode,),
    ResolveContradiction: (OPS_INBOX.decode,),
    ContradictionResolved: (PROJECTOR_INBOX.decode,),
    ListContradictions: (PROJECTOR_RPC.decode,),
    GetCalibration: (PROJECTOR_RPC.decode,),
    CalibrationReply: (PROJECTOR_REPLY.decode,),
    ContradictionsReply: (PROJECTOR_REPLY.decode,),
    AddEdgeEvidence: (OPS_INBOX.decode,),
    EdgePosterior: (MATERIALIZER_INBOX.decode,),
    Sources: (FUSION_RPC.decode,),
    SourcesReply: (FUSION_REPLY.decode,),
    AssessSources: (OPS_INBOX.decode,),
    StateHashReply: (MATERIALIZER_REPLY.decode,),
    OpStatus: (MATERIALIZER_RPC.decode,),
    OpStatusReply: (MATERIALIZER_REPLY.decode,),
    OpVerdict: (MATERIALIZER_INBOX.decode,),
    Presence: (PRESENCE_VALUE.decode,),
    Lease: (LEASE_VALUE.decode,),
    AddEvidence: (OPS_INBOX.decode,),
    Statement: (OPS_INBOX.decode,),
    SetTrust: (OPS_INBOX.decode,),
    LinkBeliefs: (OPS_INBOX.decode,),
    CloseBelief: (OPS_INBOX.decode,),
    BeliefEdgeChanged: (PROJECTOR_INBOX.decode,),
    TraceBelief: (PROJECTOR_RPC.decode,),
    TraceReply: (PROJECTOR_REPLY.decode,),
    OpApplied: (PROJECTOR_INBOX.decode,),
    SimStart: (SIMULATOR_RPC.decode,),
    SimStarted: (SIMULATOR_REPLY.decode,),
    SimStep: (SIMULATOR_RPC.decode,),
    SimStepReply: (SIMULATOR_REPLY.decode,),
    SimEnd: (SIMULATOR_RPC.decode,),
    SimEnded: (SIMULATOR_REPLY.decode,),
    SimError: (SIMULATOR_REPLY.decode,),
    SimForecast: (SIMULATOR_RPC.decode,),
    SimForecastReply: (SIMULATOR_REPLY.decode,),
    Before: (PROJECTOR_RPC.decode,),
    WorldviewReply: (PROJECTOR_REPLY.decode,),
    SearchBeliefs: (PROJECTOR_RPC.decode,),
    SearchReply: (PROJECTOR_REPLY.decode,),
}


def tag_of(cls: type[Message]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str), f"{cls.__name__} has no string kind tag"
    return tag


def message_classes() -> list[type[Message]]:
    """Every Message subclass worldline.protocols.messages exports (aliases counted
    once)."""
    found = {
        obj
        for name in messages.__all__
        if isinstance(obj := getattr(messages, name), type)
        and issubclass(obj, Message)
        and obj is not Message
    }
    return sorted(found, key=lambda cls: cls.__name__)


def golden_path(sample: Message) -> Path:
    return GOLDEN_DIR / f"{tag_of(type(sample))}.msgpack"


def golden_bytes(sample: Message) -> bytes:
    path = golden_path(sample)
    if not path.exists():
        pytest.fail(
            f"no golden file {path.name}; generate it with WORLDLINE_REGEN_GOLDEN=1"
        )
    return path.read_bytes()


def sample_id(sample: Message) -> str:
    return type(sample).__name__


def decode_cases() -> list[tuple[Message, Any]]:
    return [(s, d) for s in SAMPLES for d in DECODERS[type(s)]]


# --- golden bytes -----------------------------------------------------------------


@pytest.mark.parametrize("sample", SAMPLES, ids=sample_id)
def test_encoding_matches_golden_bytes(sample: Message) -> None:
    if REGEN:
        GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
        golden_path(sample).write_bytes(encode(sample))
        pytest.skip(f"regenerated {golden_path(sample).name}")
    assert encode(sample) == golden_bytes(sample)


@pytest.mark.parametrize(
    ("sample", "decode"),
    decode_cases(),
    ids=[f"{sample_id(s)}-{i}" for i, (s, _) in enumerate(decode_cases())],
)
def test_golden_bytes_decode_to_sample(sample: Message, decode: Any) -> None:
    decoded = decode(golden_bytes(sample))
    assert type(decoded) is type(sample)
    assert decoded == sample


def test_every_message_class_has_a_sample_and_decoder() -> None:
    classes = set(message_classes())
    sampled = [type(s) for s in SAMPLES]
    assert len(sampled) == len(set(sampled)), "one sample per class"
    assert classes == set(sampled)
    assert classes == set(DECODERS)


def test_tags_are_unique_and_versioned() -> None:
    tags = [tag_of(cls) for cls in message_classes()]
    assert len(tags) == len(set(tags))
    for tag in tags:
        assert re.fullmatch(r"[a-z_]+(\.[a-z_]+)*\.v[1-9][0-9]*", tag), tag


# --- schema evolution -------------------------------------------------------------


def _with_extra_fields(obj: Any, raw: Any) -> Any:
    """Add an unknown field to every struct (message and nested structs) in ``raw``,
    the encoding of ``obj``; data maps (entity fields) are left as they are."""
    if isinstance(obj, msgspec.Struct):
        assert isinstance(raw, dict)
        extended = dict(raw)
        for info in msgspec.structs.fields(obj):
            if info.encode_name in raw:
                extended[info.encode_name] = _with_extra_fields(
                    getattr(obj, info.name), raw[info.encode_name]
                )
        extended["added_in_a_future_version"] = {"x": [1, 2.5, "three"]}
        return extended
    if isinstance(obj, dict):
        assert isinstance(raw, dict)
        return {k: _with_extra_fields(obj[k], v) for k, v in raw.items()}
    if isinstance(obj, list | tuple):
        assert isinstance(raw, list)
        return [_with_extra_fields(o, r) for o, r in zip(obj, raw, strict=True)]
    return raw


@pytest.mark.parametrize(
    ("sample", "decode"),
    decode_cases(),
    ids=[f"{sample_id(s)}-{i}" for i, (s, _) in enumerate(decode_cases())],
)
def test_unknown_fields_are_ignored(sample: Message, decode: Any) -> None:
    raw = msgspec.msgpack.decode(encode(sample))
    newer = msgspec.msgpack.encode(_with_extra_fields(sample, raw))
    assert newer != encode(sample)
    assert decode(newer) == sample


# --- validation on decode ---------------------------------------------------------

ADD: Final = SAMPLES[1]
assert isinstance(ADD, AddBelief)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("confidence", 1.5),
        ("confidence", -0.1),
        ("confidence", math.nan),
        ("text", ""),
        ("author", "alice.smith"),
        ("author", "alice smith"),
        ("belief_id", "b 1"),
        ("belief_id", ""),
        ("type", "opinion"),
        ("kind", "op.add_belief.v999"),
        ("kind", "op.unknown.v1"),
    ],
)
def test_invalid_values_are_rejected_on_decode(field: str, value: object) -> None:
    raw = msgspec.msgpack.decode(encode(ADD))
    assert FUSION_INBOX.decode(msgspec.msgpack.encode(raw)) == ADD  # baseline decodes
    raw[field] = value
    with pytest.raises(msgspec.ValidationError):
        FUSION_INBOX.decode(msgspec.msgpack.encode(raw))


def test_wrong_message_for_inbox_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError):
        FUSION_INBOX.decode(encode(SAMPLES[0]))


# --- property: round trip ---------------------------------------------------------

_NON_SPACE = st.characters(codec="utf-8").filter(
    lambda c: re.match(r"\S", c) is not None
)
idents = st.text(_NON_SPACE, min_size=1, max_size=128)
tokens = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
texts = st.text(st.characters(codec="utf-8"), min_size=1, max_size=300)
confidences = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
weights = st.floats(min_value=0.0, max_value=1e9, allow_nan=False)
utc_datetimes = st.datetimes(
    min_value=datetime(1970, 1, 1),
    max_value=datetime(2200, 1, 1),
    timezones=st.just(UTC),
)
belief_types = st.sampled_from(messages.BELIEF_TYPES)

add_beliefs = st.builds(
    AddBelief,
    op_id=idents,
    author=tokens,
    at=utc_datetimes,
    belief_id=idents,
    text=texts,
    type=belief_types,
    confidence=st.none() | confidences,
    source=st.text(st.characters(codec="utf-8"), max_size=100),
)
beliefs = st.builds(
    Belief,
    id=idents,
    text=texts,
    type=belief_types,
    confidence=st.none() | confidences,
    evidence_weight=weights,
    uncertainty=st.none() | weights,
    label=st.text(st.characters(codec="utf-8"), max_size=50),
    flags=st.lists(st.sampled_from(["stale", "stable", "contradicted", "uncertain"]))
    .map(tuple)
    .filter(lambda f: len(f) == len(set(f))),
    author=tokens,
    created_at=utc_datetimes,
    updated_at=utc_datetimes,
    version=st.integers(min_value=0, max_value=2**63 - 1),
)

_BELIEF_DECODER: Final = msgspec.msgpack.Decoder(Belief)


@settings(database=None, max_examples=200)
@given(add_beliefs)
def test_add_belief_round_trips(op: AddBelief) -> None:
    assert FUSION_INBOX.decode(encode(op)) == op


@settings(database=None, max_examples=200)
@given(beliefs)
def test_belief_round_trips(belief: Belief) -> None:
    assert _BELIEF_DECODER.decode(encode(belief)) == belief
    wrapped = PosteriorUpdate(belief=belief, cause="op-1")
    assert MATERIALIZER_INBOX.decode(encode(wrapped)) == wrapped


# --- crew ops: validation on decode ----------------------------------------------


def _sample(cls: type[Message]) -> Message:
    (found,) = [s for s in SAMPLES if type(s) is cls]
    return found


def _set_path(raw: Any, path: tuple[str | int, ...], value: object) -> None:
    for step in path[:-1]:
        raw = raw[step]
    raw[path[-1]] = value


@pytest.mark.parametrize(
    ("cls", "path", "value"),
    [
        (SetField, ("entity",), "soteria"),  # no type
        (SetField, ("entity",), "Project:soteria"),  # type is lower case
        (SetField, ("entity",), "project:sot eria"),
        (SetField, ("field",), "Phase"),
        (SetField, ("value",), {"nested": "maps are not values"}),
        (SetField, ("value",), [1, 2]),  # lists hold strings only
        (UpsertEntity, ("fields",), {"Bad-Name": 1}),
        (AddEdge, ("edge", "from"), "spock"),
        (RemoveEdge, ("edge_id",), "e.1"),
        (PutWork, ("priority",), 10),
        (PutWork, ("status",), "stalled"),
        (PutWork, ("work_id",), "a b"),
        (AckInbox, ("message_ids",), ["ok", ""]),
        (DeclareWorld, ("declaration", "world", "id"), "crew.one"),
        (DeclareWorld, ("declaration", "authority", "grants", 0, "fields"), ["x"]),
        (DeclareWorld, ("declaration", "rules", 0, "on"), "project"),
        (DeclareWorld, ("declaration", "rules", 0, "priority"), -1),
        (DeclareWorld, ("declaration", "dampening", "depth"), 17),
        (DeclareWorld, ("declaration", "dampening", "max_fanout"), 0),
        (DeclareWorld, ("declaration", "actions", 0, "safety"), "yolo"),
        (DeclareWorld, ("declaration", "edges", 0, "to"), "nowhere"),
    ],
)
def test_invalid_crew_ops_are_rejected_on_decode(
    cls: type[Message], path: tuple[str | int, ...], value: object
) -> None:
    sample = _sample(cls)
    raw = msgspec.msgpack.decode(encode(sample))
    assert OPS_INBOX.decode(msgspec.msgpack.encode(raw)) == sample  # baseline decodes
    _set_path(raw, path, value)
    with pytest.raises(msgspec.ValidationError):
        OPS_INBOX.decode(msgspec.msgpack.encode(raw))


def test_ops_inbox_is_the_fusion_inbox() -> None:
    assert OPS_INBOX is FUSION_INBOX
    for cls in (DeclareWorld, SetField, PutWork):
        assert FUSION_INBOX.decode(encode(_sample(cls))) == _sample(cls)
    with pytest.raises(msgspec.ValidationError):
        OPS_INBOX.decode(encode(_sample(Notification)))
    with pytest.raises(msgspec.ValidationError):
        INBOX.decode(encode(_sample(SetField)))

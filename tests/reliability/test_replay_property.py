"""Replay equivalence as a property: for random op sequences, applying them live in
batches of any size equals replaying them from scratch, byte for byte.

Pure (no NATS): fusion and materializer stores in LMDB, wired as the bus wires them
(ops feed both; fusion's posteriors feed the materializer's second input), against
``worldline.ops.replay.replay`` and against in-memory states fed one op at a time.

The long run is ``WORLDLINE_REPLAY_EXAMPLES=500 python -m pytest tests/reliability``.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worldline.actors.registry import build
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.errors import InvalidInput
from worldline.actors.runtime.memory import MemoryState, state_hash
from worldline.actors.runtime.spec import Context
from worldline.actors.runtime.store import Store
from worldline.ops.replay import replay
from worldline.protocols.beliefs import BeliefEdge, Evidence
from worldline.protocols.messages import (
    AddBelief,
    AddEdge,
    AddEdgeEvidence,
    AddEvidence,
    AssessSources,
    CloseBelief,
    DeadLetter,
    DeclareWorld,
    LinkBeliefs,
    OpsInbox,
    PutWork,
    RemoveEdge,
    SetField,
    SetTrust,
    UpsertEntity,
    encode,
)
from worldline.protocols.subjects import (
    DERIVED_CHANNEL,
    author_of,
    channel_of,
    ops,
    world_of,
)
from worldline.protocols.world import (
    Authority,
    Dampening,
    Edge,
    EdgeSeed,
    EntitySeed,
    Environment,
    Grant,
    Rule,
    Subscription,
    TrustGrant,
    TrustRules,
    WorldDecl,
    WorldInfo,
)
from worldline.sdk.export import ExportRecord

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Outgoing

EXAMPLES = int(os.environ.get("WORLDLINE_REPLAY_EXAMPLES", "30"))
WORLD = "prop"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 1, tzinfo=UTC)  # the runtime clock: only dead letters see it

# ada is an admin, spock and zora hold grants, mallory holds nothing and has no entity.
AGENTS = ("ada", "spock", "zora", "mallory")
REFS = (
    "agent:ada",
    "agent:spock",
    "agent:zora",
    "project:p1",
    "project:p2",  # not seeded: created by an upsert, or unknown
    "company:c1",
    "lead:l1",  # undeclared entity type
)
FIELDS = ("phase", "status", "notes", "owner", "count")
VALUES = st.one_of(
    st.sampled_from(["pilot", "sla", "live", "", "spock"]),
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.lists(st.sampled_from(["a", "b"]), max_size=2),
)
EDGE_IDS = ("rel-1", "rel-2", "e1", "e2")
BELIEF_EDGE_IDS = ("be1", "be2")
BELIEFS = ("b1", "b2", "b3")
SOURCES = ("s1", "s2", "agent:spock")


def declaration() -> WorldDecl:
    """A small crew: three agents, a project with a replan rule, a subscription."""
    return WorldDecl(
        world=WorldInfo(id=WORLD, kind="property test"),
        environment=Environment(entity_types=["project", "company"]),
        authority=Authority(
            admins=["ada"],
            grants=[
                Grant(agents=["spock"], fields=["project.*", "edge.collaborates_on"]),
                Grant(agents=["zora"], fields=["company.notes", "project.status"]),
            ],
        ),
        entities=[
            EntitySeed(id="agent:ada", fields={"role": "orchestrator"}),
            EntitySeed(id="agent:spock", fields={"role": "researcher"}),
            EntitySeed(id="agent:zora", fields={"role": "writer"}),
            EntitySeed(id="project:p1", fields={"phase": "pilot", "count": 0}),
            EntitySeed(id="company:c1", fields={"notes": ""}),
        ],
        edges=[
            EdgeSeed(
                id="rel-1",
                type="collaborates_on",
                source="agent:spock",
                target="project:p1",
            ),
            EdgeSeed(
                id="rel-2",
                type="collaborates_on",
                source="agent:zora",
                target="project:p1",
            ),
        ],
        subscriptions=[Subscription(agent="ada", on=["project.*", "company.notes"])],
        rules=[
            Rule(
                id="replan",
                on="project.phase",
                notify="collaborates_on",
                work_kind="replan_request",
                goal="Re-plan {entity}: {field} is now {value}",
                priority=2,
                due_in_hours=4,
            ),
            Rule(id="status-echo", on="work.status", notify="collaborates_on"),
        ],
        dampening=Dampening(depth=2, dedupe_window=600.0, max_fanout=8),
        # Voices and trust authority in the random logs too: s1 is ada's and
        # spock's to report, s2 zora's (anyone else's is their own voice); spock
        # may set trust on s1 and s2, ada (the admin) on anything; zora may close
        # any belief, the others their own (and any named agent resolve a gap).
        sources={"s1": ["ada", "spock"], "s2": ["zora"]},
        trust=TrustRules(
            grants=[TrustGrant(agents=["spock"], names=["s?"])], close=["zora"]
        ),
    )


# --- strategies -----------------------------------------------------------------------

Drawn = tuple[str, dict[str, Any]]  # (op kind, fields other than op_id, author, at)


@st.composite
def _op(draw: st.DrawFn) -> Drawn:
    kind = draw(
        st.sampled_from(
            [
                "set_field",
                "set_field",
                "upsert",
                "add_edge",
                "remove_edge",
                "put_work",
                "add_belief",
                "add_belief",
                "add_evidence",
                "add_evidence",
                "close_belief",
                "set_trust",
                "assess",
                "declare",
                "link_beliefs",
                "link_beliefs",
                "edge_evidence",
            ]
        )
    )
    ref = st.sampled_from(REFS)
    version = st.one_of(st.none(), st.integers(0, 30))
    belief = st.sampled_from(BELIEFS)
    fields: dict[str, Any]
    match kind:
        case "set_field":
            fields = {
                "entity": draw(ref),
                "field": draw(st.sampled_from(FIELDS)),
                "value": draw(VALUES),
                "expect_version": draw(version),
            }
        case "upsert":
            fields = {
                "entity": draw(ref),
                "fields": draw(
                    st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=3)
                ),
            }
        case "add_edge":
            fields = {
                "edge": Edge(
                    id=draw(st.sampled_from(EDGE_IDS)),
                    type=draw(st.sampled_from(["collaborates_on", "follows"])),
                    source=draw(ref),
                    target=draw(ref),
                )
            }
        case "remove_edge":
            fields = {"edge_id": draw(st.sampled_from(EDGE_IDS))}
        case "put_work":
            fields = {
                "work_id": draw(st.sampled_from(["w1", "w2"])),
                "work_kind": "research_request",
                "assigned_to": draw(st.sampled_from(AGENTS)),
                "goal": draw(st.sampled_from(["map objections", "draft"])),
                "priority": draw(st.integers(0, 9)),
                "status": draw(st.sampled_from(["open", "in_progress", "done"])),
                "requested_by": draw(st.sampled_from(AGENTS)),
                "expect_version": draw(version),
                "due_at": draw(st.none() | st.just(T0 + timedelta(days=2))),
            }
        case "add_belief":
            fields = {
                "belief_id": draw(belief),
                "text": draw(st.sampled_from(["Pilots convert", "SLA is not signed"])),
                "type": draw(st.sampled_from(["claim", "risk", "goal", "gap"])),
                "confidence": draw(st.none() | st.floats(0.0, 1.0)),
                # Sometimes a rival answer: one question, so evidence for one weighs
                # on the others (and an assessment learns from them).
                "slot": draw(st.none() | st.just("who signs the SLA")),
            }
        case "add_evidence":
            fields = {
                "evidence": {
                    "id": draw(st.sampled_from(["ev1", "ev2", "ev3", "ev4"])),
                    "belief_id": draw(belief),
                    "direction": draw(st.sampled_from(["supports", "refutes"])),
                    "kind": draw(st.sampled_from(["measurement", "citation"])),
                    "source": draw(st.sampled_from(SOURCES)),
                    "observed_at": T0 + timedelta(hours=draw(st.integers(-48, 48))),
                }
            }
        case "close_belief":
            fields = {
                "belief_id": draw(belief),
                "how": draw(st.sampled_from(["retracted", "resolved"])),
                "reason": "moved on",
            }
        case "set_trust":
            fields = {
                "source": draw(st.sampled_from(SOURCES)),
                "trust": draw(st.sampled_from([0.0, 0.5, 2.0])),
                "lock": draw(st.booleans()),
            }
        case "assess":
            fields = {}
        case "link_beliefs":
            # New edges, and re-statements of them by anyone: only an edge's first
            # linker, ada (the admin) and zora ([trust] close) may change one; b9
            # is never added (fusion records the link, the materializer refuses it).
            fields = {
                "edge": BeliefEdge(
                    id=draw(st.sampled_from(BELIEF_EDGE_IDS)),
                    type=draw(st.sampled_from(["depends_on", "contradicts"])),
                    source=draw(st.sampled_from([*BELIEFS, "b9"])),
                    target=draw(st.sampled_from(BELIEFS)),
                    confidence=draw(st.sampled_from([0.1, 0.6, 0.95])),
                    removed=draw(st.sampled_from([False, False, True])),
                )
            }
        case "edge_evidence":
            edge_id = draw(st.sampled_from(BELIEF_EDGE_IDS))
            fields = {
                "edge_id": edge_id,
                "evidence": {
                    "id": draw(st.sampled_from(["eev1", "eev2", "eev3"])),
                    "belief_id": edge_id,
                    "direction": draw(st.sampled_from(["supports", "refutes"])),
                    "kind": "measurement",
                    "source": draw(st.sampled_from(SOURCES)),
                    "observed_at": T0 + timedelta(hours=draw(st.integers(-48, 48))),
                },
            }
        case _:  # a re-declaration: only admins may
            fields = {}
    return kind, fields


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[ExportRecord], list[int]]:
    """A log (the declaration, then random ops) and the sizes of the live batches."""
    drawn = draw(st.lists(_op(), min_size=8, max_size=60))
    records = [_record(1, "ada", "ada", T0, "declare", {})]
    if draw(st.booleans()):
        # Often the beliefs exist from the start, by different authors, so links
        # between them land and later links re-state (or fail to) another's edge.
        for author, belief_id in zip(AGENTS, BELIEFS, strict=False):
            fields = {"belief_id": belief_id, "text": f"claim {belief_id}"}
            records.append(
                _record(len(records) + 1, author, author, T0, "add_belief", fields)
            )
    for i, (kind, fields) in enumerate(drawn, start=len(records) + 1):
        author = draw(st.sampled_from(AGENTS))
        # Mostly agents publish as themselves; sometimes an op names someone else.
        sender = draw(st.sampled_from([author, author, author, *AGENTS]))
        at = T0 + timedelta(minutes=draw(st.integers(0, 24 * 60)))
        records.append(_record(i, author, sender, at, kind, fields))
    cuts = draw(st.sets(st.integers(1, max(1, len(records) - 1))))
    bounds = [0, *sorted(c for c in cuts if c < len(records)), len(records)]
    return records, [b - a for a, b in itertools.pairwise(bounds)]


def _record(
    seq: int, author: str, sender: str, at: datetime, kind: str, fields: dict[str, Any]
) -> ExportRecord:
    base: dict[str, Any] = {"op_id": f"op-{seq}", "author": author, "at": at}
    op: OpsInbox
    match kind:
        case "set_field":
            op = SetField(**base, **fields)
        case "upsert":
            op = UpsertEntity(**base, **fields)
        case "add_edge":
            op = AddEdge(**base, **fields)
        case "remove_edge":
            op = RemoveEdge(**base, **fields)
        case "put_work":
            op = PutWork(**base, **fields)
        case "add_belief":
            op = AddBelief(**base, **fields)
        case "add_evidence":
            # Evidence names its reporter: the op's author.
            evidence = Evidence(**fields["evidence"], author=author)
            op = AddEvidence(**base, evidence=evidence)
        case "close_belief":
            op = CloseBelief(**base, **fields)
        case "set_trust":
            op = SetTrust(**base, **fields)
        case "assess":
            op = AssessSources(**base)
        case "link_beliefs":
            op = LinkBeliefs(**base, **fields)
        case "edge_evidence":
            evidence = Evidence(**fields["evidence"], author=author)
            op = AddEdgeEvidence(**base, edge_id=fields["edge_id"], evidence=evidence)
        case _:
            op = DeclareWorld(**base, declaration=declaration())
    # Constraints are checked on decode: every op in the log is a valid message.
    op = msgspec.msgpack.decode(encode(op), type=OpsInbox)
    return ExportRecord(seq=seq, subject=ops(WORLD, sender), op=op)


# --- the three ways to build the state ------------------------------------------------


def _live_batched(records: list[ExportRecord], sizes: list[int], data: Path) -> str:
    """Fusion and materializer stores applying the log in batches of ``sizes``, the
    posteriors of each fusion batch routed to the materializer's posterior input."""
    fusion_input = build("fusion").inputs[0]
    ops_input, posterior_input = build("materializer").inputs
    fusion = Store(data / "fusion", actor="fusion")
    materializer = Store(data / "materializer", actor="materializer")
    derived_seq = 0
    crashes: list[str] = []
    try:
        start = 0
        for size in sizes:
            batch = [
                Delivery(r.seq, r.subject, encode(r.op))
                for r in records[start : start + size]
            ]
            start += size
            fused = fusion.apply_batch(fusion_input, batch, NOW)
            applied = materializer.apply_batch(ops_input, batch, NOW)
            posteriors = []
            for item in fused.outbox:
                if channel_of(item.subject) == DERIVED_CHANNEL:
                    derived_seq += 1
                    posteriors.append(Delivery(derived_seq, item.subject, item.payload))
            outboxes = [fused.outbox, applied.outbox]
            if posteriors:
                outboxes.append(
                    materializer.apply_batch(posterior_input, posteriors, NOW).outbox
                )
            for outbox in outboxes:
                for item in outbox:
                    if channel_of(item.subject) != "dlq":
                        continue
                    letter = msgspec.msgpack.decode(item.payload, type=DeadLetter)
                    if letter.reason.startswith("internal error"):
                        crashes.append(letter.reason)
            fusion.clear_outbox([i.key for i in fused.outbox])
            materializer.clear_outbox(
                [i.key for outbox in outboxes[1:] for i in outbox]
            )
        assert start == len(records)
        assert crashes == [], crashes  # a core raised: dead-lettered, but a bug
        with materializer.reader() as reader:
            return state_hash(reader, world=WORLD)
    finally:
        fusion.close()
        materializer.close()


def _one_at_a_time(records: list[ExportRecord], tally: Counter[str]) -> str:
    """In-memory states fed one op at a time, each op's posteriors right after it."""
    fusion_input = build("fusion").inputs[0]
    ops_input, posterior_input = build("materializer").inputs
    fusion, materializer = MemoryState(), MemoryState()

    def feed(
        state: MemoryState, inp: Any, seq: int, subject: str, payload: bytes
    ) -> list[Outgoing]:
        ctx = Context(
            world=world_of(subject),
            author=author_of(subject),
            subject=subject,
            seq=seq,
            now=NOW,
        )
        try:
            return state.feed(inp, payload, ctx)
        except InvalidInput:
            tally["dead-lettered"] += 1
            return []  # dead-lettered: no state change

    derived_seq = 0
    for r in records:
        payload = encode(r.op)
        out = feed(fusion, fusion_input, r.seq, r.subject, payload)
        feed(materializer, ops_input, r.seq, r.subject, payload)
        for item in out:
            if channel_of(item.subject) == DERIVED_CHANNEL:
                derived_seq += 1
                message = encode(item.message)
                feed(materializer, posterior_input, derived_seq, item.subject, message)
    tally["ops"] += len(records)
    tally["posteriors"] += derived_seq
    tally["rejected"] += sum(
        1 for _ in materializer.scan(f"conflict/{WORLD}/".encode())
    )
    tally["entities"] += sum(1 for _ in materializer.scan(f"entity/{WORLD}/".encode()))
    tally["edges"] += sum(1 for _ in materializer.scan(f"edge/{WORLD}/".encode()))
    tally["beliefs"] += sum(1 for _ in materializer.scan(f"belief/{WORLD}/".encode()))
    tally["belief edges"] += sum(
        1 for _ in materializer.scan(f"bedge/{WORLD}/".encode())
    )
    tally["unauthorized"] += sum(
        1
        for _, raw in materializer.scan(f"conflict/{WORLD}/".encode())
        if b"unauthorized" in raw
    )
    return state_hash(materializer, world=WORLD)


def _describe(records: list[ExportRecord], sizes: list[int]) -> str:
    lines = [f"batch sizes: {sizes}"]
    lines += [f"{r.seq:3d} {r.subject}: {r.op!r}" for r in records]
    return "\n".join(lines)


def test_live_batches_of_any_size_equal_a_replay_from_scratch() -> None:
    tally: Counter[str] = Counter()

    @settings(
        database=None,
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(scenarios())
    def check(scenario: tuple[list[ExportRecord], list[int]]) -> None:
        records, sizes = scenario
        with tempfile.TemporaryDirectory(prefix="wl-replay-prop-") as tmp:
            live = _live_batched(records, sizes, Path(tmp) / "live")
            replayed = replay(records, Path(tmp) / "replayed", WORLD)
        memory = _one_at_a_time(records, tally)
        if not live == replayed.hash == memory:
            print(
                f"\nlive   {live}\nreplay {replayed.hash}\nmemory {memory}\n"
                + _describe(records, sizes)
            )
        assert replayed.ops == len(records)
        assert replayed.last_seq == len(records)
        assert live == replayed.hash
        assert memory == replayed.hash
        tally["sequences"] += 1
        tally["batches"] += len(sizes)

    check()
    print(
        f"\nreplay property: {tally['sequences']} sequences, {tally['ops']} ops in "
        f"{tally['batches']} live batches ({tally['rejected']} rejected by the "
        f"materializer, {tally['dead-lettered']} dead-lettered, "
        f"{tally['unauthorized']} of them unauthorized, {tally['posteriors']} "
        f"posteriors); final states held {tally['entities']} entities, "
        f"{tally['edges']} edges, {tally['beliefs']} beliefs, {tally['belief edges']} "
        "belief edges; live batched "
        "== replay == one at a time, byte for byte"
    )


# Links are checked against the beliefs the log created (``known/`` keys), so the
# outcome cannot depend on how the materializer's two inputs interleave.
def test_linking_fresh_beliefs_does_not_depend_on_the_batching() -> None:
    def claim(seq: int, belief_id: str) -> ExportRecord:
        fields = {"belief_id": belief_id, "text": f"claim {belief_id}"}
        return _record(seq, "ada", "ada", T0, "add_belief", fields)

    edge = BeliefEdge(id="be1", type="supports", source="b1", target="b2")
    link = LinkBeliefs(op_id="op-4", author="ada", at=T0, edge=edge)
    records = [
        _record(1, "ada", "ada", T0, "declare", {}),
        claim(2, "b1"),
        claim(3, "b2"),
        ExportRecord(seq=4, subject=ops(WORLD, "ada"), op=link),
    ]
    with tempfile.TemporaryDirectory(prefix="wl-replay-link-") as tmp:
        singles = _live_batched(records, [1, 1, 1, 1], Path(tmp) / "singles")
        replayed = replay(records, Path(tmp) / "replayed", WORLD)
    assert singles == replayed.hash

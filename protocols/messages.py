"""The wire contract: every message worldline actors exchange, as frozen msgspec
Structs.

Each message carries an explicit, versioned tag in its ``kind`` field (never the class
name, which changes on rename). Each inbox has one tagged union and one reused decoder.
Schema evolution follows msgspec's rules: new fields get defaults, types never change,
and unknown fields are ignored (never ``forbid_unknown_fields``), so an old actor can
read a newer peer's messages.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal, get_args

import msgspec

from protocols.beliefs import (
    BeliefEdge,
    Contradiction,
    Direction,
    Evidence,
    EvidenceKind,
    TraceStep,
)
from protocols.simulator import Limits
from protocols.world import Edge, Entity, EntityRef, FieldName, Value, WorldDecl
from protocols.worldview import Leaf, Worldview

__all__ = [
    "BELIEF_TYPES",
    "EXTRACTOR_INBOX",
    "FUSION_INBOX",
    "INBOX",
    "LEASE_VALUE",
    "MATERIALIZER_INBOX",
    "MATERIALIZER_REPLY",
    "MATERIALIZER_RPC",
    "OPS_INBOX",
    "PRESENCE_VALUE",
    "PROJECTOR_INBOX",
    "PROJECTOR_REPLY",
    "PROJECTOR_RPC",
    "SIMULATOR_INBOX",
    "SIMULATOR_REPLY",
    "SIMULATOR_RPC",
    "AckInbox",
    "AddBelief",
    "AddEdge",
    "AddEvidence",
    "AgentView",
    "BatchItems",
    "Before",
    "Belief",
    "BeliefChanged",
    "BeliefEdgeChanged",
    "BeliefListReply",
    "BeliefOp",
    "BeliefReply",
    "BeliefType",
    "CloseBelief",
    "Confidence",
    "CrewOp",
    "DeadLetter",
    "DeclareWorld",
    "Direction",
    "EdgeChanged",
    "EntityChanged",
    "EvidenceKind",
    "ExtractorInbox",
    "FusionInbox",
    "GetBelief",
    "GetView",
    "InboxChanged",
    "InboxMessage",
    "Lease",
    "LinkBeliefs",
    "ListBeliefs",
    "MaterializerInbox",
    "MaterializerReply",
    "MaterializerRpc",
    "Message",
    "Notification",
    "Observe",
    "OpApplied",
    "OpStatus",
    "OpStatusReply",
    "OpVerdict",
    "OpsInbox",
    "PosteriorUpdate",
    "Presence",
    "ProjectorInbox",
    "ProjectorReply",
    "ProjectorRpc",
    "PutWork",
    "ReadWorld",
    "Rejection",
    "RemoveEdge",
    "RpcError",
    "SetField",
    "SetTrust",
    "SimEnd",
    "SimEnded",
    "SimError",
    "SimStart",
    "SimStarted",
    "SimStatus",
    "SimStatusReply",
    "SimStep",
    "SimStepReply",
    "SimulatorInbox",
    "SimulatorReply",
    "SimulatorRpc",
    "StateHash",
    "StateHashReply",
    "Statement",
    "TraceBelief",
    "TraceReply",
    "Transition",
    "UpsertEntity",
    "ViewReply",
    "WorkAssigned",
    "WorldDeclared",
    "WorldReply",
    "WorldviewReply",
    "belief_version",
    "decode_batch",
    "encode",
    "encode_batch",
]

Confidence = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
"""A probability: where the balance of evidence sits, 0 to 1."""

Ident = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^\S+\Z")]
"""An opaque id: 1-128 characters, no whitespace."""

Token = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}\Z")]
Cursor = Annotated[str, msgspec.Meta(max_length=1024)]  # a page's opaque position
"""A name usable as one subject token (world, agent, actor)."""

BeliefText = Annotated[str, msgspec.Meta(min_length=1, max_length=64 * 1024)]
ArtifactText = Annotated[str, msgspec.Meta(max_length=1024 * 1024)]

BeliefType = Literal["claim", "assumption", "risk", "evidence", "gap", "goal"]
BELIEF_TYPES: Final[tuple[str, ...]] = get_args(BeliefType)


class Message(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="kind"
):
    """Base of every wire message: frozen, keyword-only, tagged by ``kind``."""


class Belief(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One belief as the world holds it: what, how sure, on how much evidence."""

    id: Ident
    text: BeliefText
    type: BeliefType
    confidence: Confidence | None = None  # None for goals and gaps: no probability
    # How much evidence stands behind it: kind-weighted, decayed, trusted (one fresh
    # measurement counts 4.0, see docs/belief-math.md).
    evidence_weight: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0
    uncertainty: Annotated[float, msgspec.Meta(ge=0.0)] | None = None  # posterior sd
    label: str = ""
    flags: tuple[str, ...] = ()  # derived: stale, stable, contradicted, uncertain
    author: Token
    created_at: datetime
    updated_at: datetime
    version: int = 0  # OPS sequence of the op behind the last change
    origin: str = ""  # id of the op that created the belief (provenance)
    prior: Confidence | None = None  # the stated confidence, if any (a weak prior)
    fragility: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0  # leave-one-source-out
    evidence_count: int = 0
    status: Literal["active", "retracted", "resolved"] = "active"
    closed_reason: str = ""
    valid_from: datetime | None = None  # when it started to hold (its creation)
    valid_until: datetime | None = None  # when it stopped (retracted, superseded)
    effective_confidence: Confidence | None = None  # after depends_on (at read time)


# --- observations: OBS stream -> extractor ------------------------------------------


class Observe(Message, tag="obs.artifact.v1", kw_only=True, frozen=True):
    """An artifact (text) handed to the extractor to turn into beliefs."""

    obs_id: Ident  # idempotency id, also the Nats-Msg-Id
    author: Token
    at: datetime
    source: str = ""  # where the artifact came from (file name, URL, tool)
    text: ArtifactText
    role: Literal["artifact", "output", "tool"] = "artifact"  # what produced it
    media_type: Literal["text", "markdown", "json"] = "text"


ExtractorInbox = Observe


# --- ops: OPS stream (the record) -> fusion ------------------------------------------


class AddBelief(Message, tag="op.add_belief.v1", kw_only=True, frozen=True):
    """Seed a belief; a given confidence is a weak prior that evidence moves."""

    op_id: Ident  # idempotency id, also the Nats-Msg-Id
    author: Token
    at: datetime
    belief_id: Ident
    text: BeliefText
    type: BeliefType = "claim"
    confidence: Confidence | None = None  # None: no stated prior (0.5 for claims)
    source: str = ""  # for extracted beliefs: the observation they came from


class AddEvidence(Message, tag="op.add_evidence.v1", kw_only=True, frozen=True):
    """Attach one piece of evidence to an existing belief."""

    op_id: Ident
    author: Token
    at: datetime
    evidence: Evidence


class Statement(Message, tag="op.statement.v1", kw_only=True, frozen=True):
    """What the extractor read in an artifact: evidence for the belief with this id,
    creating the belief first if the world does not hold it yet (so a restatement
    becomes evidence, never a duplicate)."""

    op_id: Ident
    author: Token
    at: datetime
    belief_id: Ident
    text: BeliefText
    type: BeliefType = "claim"
    negated: bool = False  # the text itself is negated ("X is not Y")
    evidence: Evidence  # its direction is relative to the text's positive form


class SetTrust(Message, tag="op.set_trust.v1", kw_only=True, frozen=True):
    """Scale one source's (or ``agent:<name>``'s) contribution; ``lock`` stops anyone
    but its author from changing it again."""

    op_id: Ident
    author: Token
    at: datetime
    source: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    trust: Annotated[float, msgspec.Meta(ge=0.0, le=10.0)]
    lock: bool = False


class LinkBeliefs(Message, tag="op.link_beliefs.v1", kw_only=True, frozen=True):
    """Add, re-weigh or (``edge.removed``) remove a typed edge between two beliefs."""

    op_id: Ident
    author: Token
    at: datetime
    edge: BeliefEdge


class CloseBelief(Message, tag="op.close_belief.v1", kw_only=True, frozen=True):
    """Retract a belief, or resolve a gap: tombstoned, still readable and traceable."""

    op_id: Ident
    author: Token
    at: datetime
    belief_id: Ident
    how: Literal["retracted", "resolved"]
    reason: Annotated[str, msgspec.Meta(max_length=4096)] = ""


class DeclareWorld(Message, tag="op.declare_world.v1", kw_only=True, frozen=True):
    """Declare (or, by an admin, re-declare) the world from its TOML declaration."""

    op_id: Ident
    author: Token
    at: datetime
    declaration: WorldDecl


class UpsertEntity(Message, tag="op.upsert_entity.v1", kw_only=True, frozen=True):
    """Create an entity, or set several of its fields; each field needs authority."""

    op_id: Ident
    author: Token
    at: datetime
    entity: EntityRef
    fields: dict[FieldName, Value] = msgspec.field(default_factory=dict)


class SetField(Message, tag="op.set_field.v1", kw_only=True, frozen=True):
    """Write one field; with ``expect_version`` it applies only over that version."""

    op_id: Ident
    author: Token
    at: datetime
    entity: EntityRef
    field: FieldName
    value: Value
    expect_version: int | None = None  # 0: the field must not exist yet


class AddEdge(Message, tag="op.add_edge.v1", kw_only=True, frozen=True):
    """Add (or retype) a typed edge between two existing entities."""

    op_id: Ident
    author: Token
    at: datetime
    edge: Edge


class RemoveEdge(Message, tag="op.remove_edge.v1", kw_only=True, frozen=True):
    """Remove an edge by id."""

    op_id: Ident
    author: Token
    at: datetime
    edge_id: Token


class PutWork(Message, tag="op.put_work.v1", kw_only=True, frozen=True):
    """Create or update a work request (a typed demand, never a boolean flag)."""

    op_id: Ident
    author: Token
    at: datetime
    work_id: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,128}\Z")]
    work_kind: FieldName  # e.g. research_request (``kind`` is the message tag)
    assigned_to: Token
    goal: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
    priority: Annotated[int, msgspec.Meta(ge=0, le=9)] = 3
    due_at: datetime | None = None
    status: Literal["open", "in_progress", "done", "cancelled"] = "open"
    requested_by: Token
    expect_version: int | None = None


class AckInbox(Message, tag="op.ack_inbox.v1", kw_only=True, frozen=True):
    """The author has handled these inbox messages (its own inbox only)."""

    op_id: Ident
    author: Token
    at: datetime
    message_ids: list[Ident]


CrewOp = (
    DeclareWorld | UpsertEntity | SetField | AddEdge | RemoveEdge | PutWork | AckInbox
)
BeliefOp = AddBelief | AddEvidence | Statement | SetTrust | LinkBeliefs | CloseBelief
OpsInbox = BeliefOp | CrewOp
FusionInbox = OpsInbox


# --- derived records: DERIVED stream -> materializer, simulator -----------------------


class PosteriorUpdate(Message, tag="derived.posterior.v1", kw_only=True, frozen=True):
    """Fusion's posterior for one belief, derived from the op log (reproducible)."""

    belief: Belief
    cause: Ident  # the op id that produced this posterior
    cause_seq: int = 0  # its OPS stream sequence: the belief's version, replay-stable
    evidence: list[Evidence] = msgspec.field(default_factory=list)  # all, by id
    trust: dict[str, float] = msgspec.field(default_factory=dict)  # sources != 1


VerdictCode = Annotated[str, msgspec.Meta(pattern=r"^[a-z_]{1,32}\Z")]
"""Why fusion refused an op: ``unknown_belief``, ``closed``, ``conflict``,
``invalid``, ``locked``, ``full`` (a plain string, so new codes stay readable)."""


class OpVerdict(Message, tag="derived.verdict.v1", kw_only=True, frozen=True):
    """Fusion's answer to a belief op that produced no posterior: refused (a client
    mistake, answered to its author through ``op_status``, not dead-lettered) or
    unchanged (a repeat: already applied); also every trust setting's outcome."""

    op_id: Ident  # the op this answers
    seq: int  # the op's OPS stream sequence (op_status is asked by it)
    outcome: Literal["applied", "rejected", "unchanged"]
    code: VerdictCode | None = None  # for rejected: why, as a stable code
    reason: str = ""  # for rejected: what was wrong and what to do instead
    belief_id: str = ""  # the belief the op named, when it named one


MaterializerInbox = PosteriorUpdate | OpVerdict


class Transition(Message, tag="derived.transition.v1", kw_only=True, frozen=True):
    """A real action -> observation pair taken from a trace (never a prediction)."""

    id: Ident  # content-derived: the same pair always has the same id
    lineage: Ident  # the trace or conversation it came from
    task: str = ""  # what the conversation was for (its first user message)
    context: str = ""  # the conversation before the action, as text
    action: str  # the assistant message or tool call
    observation: str  # the next user message or the tool's result
    # How action and observation were paired: by tool-call id, by tool name and
    # order (no ids in the source: weaker), or as consecutive turns.
    pairing: Literal["id", "name-order", "turn"] = "turn"
    source: str = ""  # file and position in it, e.g. "run.traj#7"
    final: bool = False  # the observation is the last thing its trace recorded


SimulatorInbox = Transition


# --- change feed: STATE stream -> projector replicas ----------------------------------


class BeliefChanged(Message, tag="state.belief.v1", kw_only=True, frozen=True):
    """The materializer applied a change to a belief."""

    belief: Belief
    evidence: list[Evidence] = msgspec.field(default_factory=list)
    trust: dict[str, float] = msgspec.field(default_factory=dict)


class BeliefEdgeChanged(Message, tag="state.belief_edge.v1", kw_only=True, frozen=True):
    """A belief edge was added, re-weighed or removed."""

    edge: BeliefEdge


class EntityChanged(Message, tag="state.entity.v1", kw_only=True, frozen=True):
    """The materializer applied a change to an entity (fields carry versions)."""

    entity: Entity


class EdgeChanged(Message, tag="state.edge.v1", kw_only=True, frozen=True):
    """An edge was added, retyped or removed."""

    edge: Edge
    removed: bool = False


class WorldDeclared(Message, tag="state.declared.v1", kw_only=True, frozen=True):
    """The world's declaration changed."""

    declaration: WorldDecl
    version: int


class OpApplied(Message, tag="state.op_applied.v1", kw_only=True, frozen=True):
    """Every change of the op at OPS sequence ``seq`` precedes this on the feed: a
    replica that has seen it holds the whole op (read fences wait for it)."""

    seq: int


class InboxChanged(Message, tag="state.inbox.v1", kw_only=True, frozen=True):
    """An agent's inbox summary: how many messages wait, and the newest few."""

    agent: Token
    pending: int
    recent: list[str] = msgspec.field(default_factory=list)  # one line each
    seq: int = 0  # OPS sequence of the op that changed it


ProjectorInbox = (
    BeliefChanged
    | BeliefEdgeChanged
    | OpApplied
    | EntityChanged
    | EdgeChanged
    | WorldDeclared
    | InboxChanged
)


# --- per-agent inboxes: INBOX stream -> each agent's durable ------------------------

RejectCode = Literal["unauthorized", "version_conflict", "invalid", "unknown_entity"]


class Rejection(Message, tag="inbox.rejection.v1", kw_only=True, frozen=True):
    """Your op was not applied, and why. It is also kept in the conflict log."""

    id: Ident
    op_id: Ident
    code: RejectCode
    reason: str
    current_version: int | None = None  # for version_conflict
    current_value: Value = None  # for version_conflict
    at: datetime


class Notification(Message, tag="inbox.notification.v1", kw_only=True, frozen=True):
    """Something you follow changed (a rule or a subscription selected you)."""

    id: Ident
    entity: EntityRef
    field: FieldName
    value: Value
    version: int
    rule: str  # the rule or subscription that selected you
    cause: Ident  # the op that made the change
    depth: int = 0
    at: datetime


class WorkAssigned(Message, tag="inbox.work_assigned.v1", kw_only=True, frozen=True):
    """A work request was assigned to you: what, why, by when, asked by whom."""

    id: Ident
    work: EntityRef
    work_kind: str
    goal: str
    priority: int = 3
    due_at: datetime | None = None
    requested_by: str
    rule: str = ""  # the rule that created it, if any
    cause: Ident
    at: datetime


InboxMessage = Rejection | Notification | WorkAssigned


# --- request/reply ------------------------------------------------------------------


class GetBelief(Message, tag="rpc.get.v1", kw_only=True, frozen=True):
    """Ask for one belief by id, read at clock ``at`` (decay is evaluated there)."""

    belief_id: Ident
    at: datetime | None = None  # None: as of its last change


class ListBeliefs(Message, tag="rpc.list.v1", kw_only=True, frozen=True):
    """Ask for the active set, oldest first."""

    type: BeliefType | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000
    label: str | None = None
    flag: Literal["stale", "stable", "contradicted", "uncertain"] | None = None
    status: Literal["active", "retracted", "resolved", "any"] = "active"
    at: datetime | None = None
    # Opaque: the previous page's ``next_cursor`` ("" for the first page)
    cursor: Cursor = ""


class BeliefReply(Message, tag="rpc.belief.v1", kw_only=True, frozen=True):
    """One belief, or None when the world holds no belief with that id."""

    belief: Belief | None = None


class BeliefListReply(Message, tag="rpc.beliefs.v1", kw_only=True, frozen=True):
    """A page of beliefs, and how many match the request before the limit."""

    beliefs: tuple[Belief, ...] = ()
    total: int = 0
    # Where the next page starts ("": this is the last). A page holds at most
    # ``limit`` beliefs and about 512 KiB, whichever comes first.
    next_cursor: str = ""


class SimStatus(Message, tag="rpc.sim_status.v1", kw_only=True, frozen=True):
    """Ask the simulator what it holds."""


class SimStart(Message, tag="rpc.sim_start.v1", kw_only=True, frozen=True):
    """Open a world-model session for a task (lineages to keep out of retrieval)."""

    task: str
    context: str = ""
    exclude_lineages: list[str] = msgspec.field(default_factory=list)


class SimStarted(Message, tag="rpc.sim_started.v1", kw_only=True, frozen=True):
    """An opened session: its opaque id, its limits, and the index it reads."""

    session_id: str
    limits: Limits
    index: str  # the index manifest's id


class SimStep(Message, tag="rpc.sim_step.v1", kw_only=True, frozen=True):
    """One candidate action: an OpenAI-shaped assistant message."""

    session_id: str
    message: dict[str, Any]


class SimStepReply(Message, tag="rpc.sim_step_reply.v1", kw_only=True, frozen=True):
    """The predicted user (or environment) message, and whether the episode ended."""

    message: dict[str, str]  # {"role": "user", "content": ...}
    terminal: bool = False
    grounding: list[str] = msgspec.field(default_factory=list)  # transition ids


class SimEnd(Message, tag="rpc.sim_end.v1", kw_only=True, frozen=True):
    """Close a session and drop its transcript."""

    session_id: str


class SimEnded(Message, tag="rpc.sim_ended.v1", kw_only=True, frozen=True):
    """The session is gone."""

    session_id: str


class SimError(Message, tag="rpc.sim_error.v1", kw_only=True, frozen=True):
    """A refused start or step, by stable name (a limit, a rejected message...)."""

    name: str
    message: str


class SimStatusReply(Message, tag="rpc.sim_status_reply.v1", kw_only=True, frozen=True):
    """How many real transitions the simulator holds for the world."""

    transitions: int = 0


class ReadWorld(Message, tag="rpc.read_world.v1", kw_only=True, frozen=True):
    """Ask for the world's declaration, entities and edges."""

    entity_type: str | None = None  # only entities of this type
    at: datetime | None = None  # the clock beliefs are read at
    # False: the crew part only (declaration, entities, edges), without the beliefs,
    # contradictions and moves, which grow with the world
    beliefs: bool = True
    # Opaque: the previous page's ``next_cursor`` ("" for the first page)
    cursor: Cursor = ""
    # beliefs and belief edges a page holds at most (None: as many as fit ~512 KiB)
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] | None = None


class WorldReply(Message, tag="rpc.world.v1", kw_only=True, frozen=True):
    """The materialized crew world as a projector replica holds it."""

    declaration: WorldDecl | None = None
    entities: list[Entity] = msgspec.field(default_factory=list)
    edges: list[Edge] = msgspec.field(default_factory=list)
    version: int = 0  # the replica holds every change up to this OPS sequence
    beliefs: list[Belief] = msgspec.field(default_factory=list)  # active claims etc.
    belief_edges: list[BeliefEdge] = msgspec.field(default_factory=list)
    gaps: list[Belief] = msgspec.field(default_factory=list)  # open gaps
    goals: list[Belief] = msgspec.field(default_factory=list)
    contradictions: list[Contradiction] = msgspec.field(default_factory=list)
    moves: list[Leaf] = msgspec.field(default_factory=list)  # ranked next moves
    # Where the next page starts ("": this is the last). The first page holds the
    # crew part and the moves; each page a part of the beliefs (in id order), then
    # of the belief edges (in id order), with the contradictions they carry.
    next_cursor: str = ""


class TraceBelief(Message, tag="rpc.trace.v1", kw_only=True, frozen=True):
    """Ask for a belief's provenance chain."""

    belief_id: Ident


class TraceReply(Message, tag="rpc.trace_reply.v1", kw_only=True, frozen=True):
    """The belief, every evidence step (source, observation, time, confidence before
    and after), and the edges that touch it."""

    belief: Belief | None = None
    steps: list[TraceStep] = msgspec.field(default_factory=list)
    edges: list[BeliefEdge] = msgspec.field(default_factory=list)


class Before(Message, tag="rpc.before.v1", kw_only=True, frozen=True):
    """Ask for the worldview before a move, evaluated at the caller's clock."""

    agent: Token
    query: Annotated[str, msgspec.Meta(max_length=4096)]
    at: datetime  # the clock: passed in, never sampled by the projector


class WorldviewReply(Message, tag="rpc.worldview.v1", kw_only=True, frozen=True):
    """The worldview (see protocols.worldview)."""

    view: Worldview


class GetView(Message, tag="rpc.get_view.v1", kw_only=True, frozen=True):
    """Ask for one agent's startup view."""

    agent: Token


class AgentView(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What one agent needs on startup: itself, what it is linked to, its work, its
    inbox, and what it may write. Small on purpose (a few KB)."""

    world: str
    agent: str
    me: Entity | None = None
    related: list[Entity] = msgspec.field(default_factory=list)
    edges: list[Edge] = msgspec.field(default_factory=list)
    work: list[Entity] = msgspec.field(default_factory=list)  # open, assigned to me
    inbox_pending: int = 0
    inbox_recent: list[str] = msgspec.field(default_factory=list)
    may_write: list[str] = msgspec.field(default_factory=list)  # field patterns
    goals: list[str] = msgspec.field(default_factory=list)
    constraints: list[str] = msgspec.field(default_factory=list)
    principals: list[Entity] = msgspec.field(default_factory=list)  # user entities
    worldview: Worldview | None = None  # standing: its goals and work as the query


class ViewReply(Message, tag="rpc.view.v1", kw_only=True, frozen=True):
    """An agent's startup view, or None when the world is not declared."""

    view: AgentView | None = None
    version: int = 0  # the replica holds every change up to this OPS sequence


class StateHash(Message, tag="rpc.state_hash.v1", kw_only=True, frozen=True):
    """Ask the materializer for the hash of a world's canonical state."""


class StateHashReply(Message, tag="rpc.state_hash_reply.v1", kw_only=True, frozen=True):
    """The hash of the world's materialized state, and the last OPS sequence applied."""

    hash: str
    applied: int = 0


class OpStatus(Message, tag="rpc.op_status.v1", kw_only=True, frozen=True):
    """Ask the materializer what became of the op at this OPS sequence."""

    seq: int


class OpStatusReply(Message, tag="rpc.op_status_reply.v1", kw_only=True, frozen=True):
    """Pending (not reached yet), applied, or rejected (with the rejection)."""

    state: Literal["pending", "applied", "rejected"]
    rejection: Rejection | None = None
    fence: int = 0  # last OPS sequence that changed the world: read replicas at it
    version: int = 0  # for an applied write: the version its fields now have
    verdict: OpVerdict | None = None  # fusion's answer, for a belief op it refused,
    # found unchanged, or (a trust setting) applied; None: none (yet)


class Presence(Message, tag="presence.v1", kw_only=True, frozen=True):
    """Ephemeral session state (KV bucket with TTL): never in the log or the hash."""

    agent: Token
    status: Annotated[str, msgspec.Meta(max_length=256)] = ""
    task: Annotated[str, msgspec.Meta(max_length=1024)] = ""
    at: datetime


class Lease(Message, tag="lease.v1", kw_only=True, frozen=True):
    """Who may write for one materializer partition (KV bucket ``wl-leases``).

    The holder renews it every second; a standby that sees it unchanged for the
    lease time takes it over with a compare-and-set, starting a new ``term``.
    ``published`` is, per input stream, the last sequence whose outputs the holder
    has published: standbys follow the log up to it, so they stay hot without
    publishing anything themselves.
    """

    holder: Token
    term: Annotated[int, msgspec.Meta(ge=1)]
    published: dict[str, Annotated[int, msgspec.Meta(ge=0)]] = {}


class RpcError(Message, tag="rpc.error.v1", kw_only=True, frozen=True):
    """A request the server could not answer, with the reason."""

    code: Literal["invalid", "internal"]
    message: str
    # Seconds after which the same request may succeed (a replica catching up after
    # a restart); 0: retrying will not help.
    retry_after: Annotated[float, msgspec.Meta(ge=0)] = 0.0


ProjectorRpc = GetBelief | ListBeliefs | ReadWorld | GetView | TraceBelief | Before
ProjectorReply = (
    BeliefReply
    | BeliefListReply
    | WorldReply
    | ViewReply
    | TraceReply
    | WorldviewReply
    | RpcError
)
MaterializerRpc = StateHash | OpStatus
MaterializerReply = StateHashReply | OpStatusReply | RpcError
SimulatorRpc = SimStatus | SimStart | SimStep | SimEnd
SimulatorReply = (
    SimStatusReply | SimStarted | SimStepReply | SimEnded | SimError | RpcError
)


# --- dead letters: DLQ stream -> operators --------------------------------------------


class DeadLetter(Message, tag="dlq.dead_letter.v1", kw_only=True, frozen=True):
    """Input an actor could not accept, kept with the reason (never dropped)."""

    actor: str
    subject: str
    stream_seq: int
    reason: str
    payload: bytes  # the input, cut when too big to travel (see payload_bytes)
    at: datetime
    payload_bytes: int = 0  # set when the payload was cut: the input's full size
    payload_sha256: str = ""  # and its digest (the input stays in its stream)


# One reused decoder per inbox (msgspec: decoders are cheap to reuse, costly to build).
EXTRACTOR_INBOX: Final = msgspec.msgpack.Decoder(ExtractorInbox)
FUSION_INBOX: Final = msgspec.msgpack.Decoder(FusionInbox)
OPS_INBOX: Final = FUSION_INBOX  # fusion and the materializer both read the OPS record
INBOX: Final = msgspec.msgpack.Decoder(InboxMessage)
PRESENCE_VALUE: Final = msgspec.msgpack.Decoder(Presence)
LEASE_VALUE: Final = msgspec.msgpack.Decoder(Lease)
MATERIALIZER_RPC: Final = msgspec.msgpack.Decoder(MaterializerRpc)
MATERIALIZER_REPLY: Final = msgspec.msgpack.Decoder(MaterializerReply)
MATERIALIZER_INBOX: Final = msgspec.msgpack.Decoder(MaterializerInbox)
SIMULATOR_INBOX: Final = msgspec.msgpack.Decoder(SimulatorInbox)
PROJECTOR_INBOX: Final = msgspec.msgpack.Decoder(ProjectorInbox)
PROJECTOR_RPC: Final = msgspec.msgpack.Decoder(ProjectorRpc)
PROJECTOR_REPLY: Final = msgspec.msgpack.Decoder(ProjectorReply)
SIMULATOR_RPC: Final = msgspec.msgpack.Decoder(SimulatorRpc)
SIMULATOR_REPLY: Final = msgspec.msgpack.Decoder(SimulatorReply)

_ENCODER: Final = msgspec.msgpack.Encoder()


def encode(message: msgspec.Struct) -> bytes:
    """Encode any wire struct as msgpack."""
    return _ENCODER.encode(message)


class _VersionOnly(msgspec.Struct):
    version: int = 0


class _BeliefOnly(msgspec.Struct):
    belief: _VersionOnly


_BELIEF_VERSION: Final = msgspec.msgpack.Decoder(_BeliefOnly)


def belief_version(raw: bytes) -> int:
    """The belief's version in an encoded ``BeliefChanged`` (or anything else holding
    a ``belief``), decoding nothing else of it."""
    return _BELIEF_VERSION.decode(raw).belief.version


BatchItems = list[tuple[str, bytes]]
"""A batch's payload: (subject, encoded message) per item, in publish order."""

_BATCH: Final = msgspec.msgpack.Decoder(BatchItems)


def encode_batch(items: BatchItems) -> bytes:
    """Encode many actor outputs as one stream message's payload."""
    return _ENCODER.encode(items)


def decode_batch(data: bytes) -> BatchItems:
    """The items of a batch; raises ``msgspec.DecodeError`` or ``ValidationError``."""
    return _BATCH.decode(data)

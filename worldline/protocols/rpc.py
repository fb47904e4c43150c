"""Request/reply: the requests on ``wl.<world>.rpc.<verb>`` and their answers, for the
projector, the materializer and the simulator (and the startup view a projector
keeps). Unions and decoders: :mod:`worldline.protocols.messages`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal

import msgspec

from worldline.protocols.base import Belief, BeliefType, Cursor, Ident, Message, Token
from worldline.protocols.beliefs import BeliefEdge, Contradiction, TraceStep
from worldline.protocols.derived import OpVerdict
from worldline.protocols.inbox import Rejection
from worldline.protocols.simulator import Limits
from worldline.protocols.world import Edge, Entity, WorldDecl
from worldline.protocols.worldview import Leaf, Worldview

__all__ = [
    "AgentView",
    "Before",
    "BeliefListReply",
    "BeliefReply",
    "ForecastOutcome",
    "GetBelief",
    "GetView",
    "ListBeliefs",
    "OpStatus",
    "OpStatusReply",
    "ReadWorld",
    "RpcError",
    "SearchBeliefs",
    "SearchHit",
    "SearchReply",
    "SimEnd",
    "SimEnded",
    "SimError",
    "SimForecast",
    "SimForecastReply",
    "SimStart",
    "SimStarted",
    "SimStatus",
    "SimStatusReply",
    "SimStep",
    "SimStepReply",
    "SourceStanding",
    "Sources",
    "SourcesReply",
    "StateHash",
    "StateHashReply",
    "TraceBelief",
    "TraceReply",
    "ViewReply",
    "WorldReply",
    "WorldviewReply",
]


class GetBelief(Message, tag="rpc.get.v1", kw_only=True, frozen=True):
    """Ask for one belief by id, read at clock ``at`` (decay is evaluated there)."""

    belief_id: Ident
    # None: at the world's one read clock, its newest belief change
    # (docs/belief-math.md, "Two time axes")
    at: datetime | None = None
    # Recorded time: only what the world had been told by then (None: everything)
    as_of: datetime | None = None


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
    as_of: datetime | None = None  # recorded time, as ``GetBelief.as_of``


class SearchBeliefs(Message, tag="rpc.search.v1", kw_only=True, frozen=True):
    """Ask for the active beliefs that best answer ``query``, best first, ranked as
    a worldview ranks them (see docs/worldview.md) but with no priors from an agent
    and no bound but ``limit``."""

    query: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
    limit: Annotated[int, msgspec.Meta(ge=1, le=200)] = 10
    type: BeliefType | None = None
    at: datetime | None = None  # None: the world's one read clock, as ``get``
    # Opaque: the previous page's ``next_cursor`` ("" for the first page)
    cursor: Cursor = ""
    as_of: datetime | None = None  # recorded time, as ``GetBelief.as_of``


class SearchHit(msgspec.Struct, frozen=True, kw_only=True):
    """One belief found, why it ranks where it does, and where it comes from."""

    belief: Belief
    score: float  # the fused score the hits are ordered by (ties by belief id)
    # Each channel's own score for this belief (0 when the channel did not find
    # it): ``lexical`` (BM25), ``semantic`` (cosine with the query; only with a
    # semantic embedder), ``prior`` (influence in the belief graph).
    channels: dict[str, float]
    # The evidence behind it: ``<evidence id> <source>`` per piece, oldest first.
    trace: tuple[str, ...] = ()


class SearchReply(Message, tag="rpc.search_hits.v1", kw_only=True, frozen=True):
    """A page of search hits; ``next_cursor`` is "" on the last page."""

    hits: tuple[SearchHit, ...] = ()
    embedder: str = ""  # the embedding space the semantic channel used
    next_cursor: str = ""


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
    """Open a world-model session for a task (lineages to keep out of retrieval).
    ``agent`` names the client: each may hold only so many open sessions."""

    task: str
    context: str = ""
    exclude_lineages: list[str] = msgspec.field(default_factory=list)
    agent: str = ""  # the client's agent name ("": anonymous, one shared quota)


class SimStarted(Message, tag="rpc.sim_started.v1", kw_only=True, frozen=True):
    """An opened session: its opaque id, its limits, and the index it reads."""

    session_id: str
    limits: Limits
    index: str  # the index manifest's id
    per_client: int = 0  # open sessions one client may hold (0: not reported)


class SimStep(Message, tag="rpc.sim_step.v1", kw_only=True, frozen=True):
    """One candidate action: an OpenAI-shaped assistant message, text or
    ``tool_calls`` (``[{"id", "type": "function", "function": {"name",
    "arguments"}}]``). ``best_guess``: below the similarity floor, answer with the
    nearest anyway, flagged ``grounded=False`` (default: refuse as
    ``no_grounding``)."""

    session_id: str
    message: dict[str, Any]
    best_guess: bool = False


class SimStepReply(Message, tag="rpc.sim_step_reply.v1", kw_only=True, frozen=True):
    """What follows the step, and whether the episode ended.

    ``messages`` is everything that follows, in order: one ``{"role": "user",
    "content"}`` after a text message, or one ``{"role": "tool", "tool_call_id",
    "content"}`` per call after tool calls. ``message`` is the first of them (what
    clients before tool calls read)."""

    message: dict[str, str]  # the first of ``messages``
    terminal: bool = False
    grounding: list[str] = msgspec.field(default_factory=list)  # transition ids
    messages: list[dict[str, str]] = msgspec.field(default_factory=list)
    grounded: bool = True  # False: a best guess, nothing recorded close enough
    similarity: float | None = None  # the nearest neighbour's score (the lowest)
    note: str = ""  # why it is not grounded ("no grounding: ...")
    # support[i]: how many times the traces recorded grounding[i]
    support: list[int] = msgspec.field(default_factory=list)


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
    similarity: float | None = None  # no_grounding: the nearest neighbour's score


class SimForecast(Message, tag="rpc.sim_forecast.v1", kw_only=True, frozen=True):
    """Ask what really followed actions like ``move``: a call written
    ``name(arguments)`` is a tool call (answered from tool results), anything else
    a message (answered from user or environment replies). ``context`` is the
    conversation before the move (its recent window is scored with it)."""

    move: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
    context: Annotated[str, msgspec.Meta(max_length=262_144)] = ""
    k: Annotated[int, msgspec.Meta(ge=1, le=10)] = 5  # neighbours retrieved
    exclude_lineages: list[str] = msgspec.field(default_factory=list)


class ForecastOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """One distinct real observation that followed actions like the move."""

    observation: str  # as recorded, whitespace normalised
    support: int  # how many times the retrieved neighbours giving it were recorded
    lineages: tuple[str, ...] = ()  # theirs, sorted, distinct
    transitions: tuple[str, ...] = ()  # their ids, best first
    similarity: float = 0.0  # the best neighbour's retrieval score


TRACK_MIN_TRIED: Final = 5  # grounded forecasts of a kind before its record counts
TRACK_MIN_HIT_RATE: Final = 0.3  # share of them that must have hit


class ForecastTrack(msgspec.Struct, frozen=True, kw_only=True):
    """The simulator's track record for one kind of move (``key``: ``tool:<name>``
    or ``message``), measured on its own index when it was built: forecasts
    ``asked``, ``grounded`` (not abstained) and ``hits`` (the real outcome among
    the forecast's). docs/simulator.md, "Track record"."""

    key: str
    asked: int = 0
    grounded: int = 0
    hits: int = 0

    def supported(self) -> bool:
        """Whether the record supports showing this kind's forecasts: at least
        :data:`TRACK_MIN_TRIED` grounded forecasts, at least
        :data:`TRACK_MIN_HIT_RATE` of them hits."""
        if self.grounded < TRACK_MIN_TRIED:
            return False
        return self.hits / self.grounded >= TRACK_MIN_HIT_RATE


class SimForecastReply(
    Message, tag="rpc.sim_forecast_reply.v1", kw_only=True, frozen=True
):
    """A forecast grounded in real transitions, or none: ``grounded`` is False and
    ``outcomes`` empty when no neighbour scores above ``floor`` (``note`` says
    "no grounding: ..." and why). Outcomes are ordered by support, then by their
    best similarity."""

    move: str
    grounded: bool
    outcomes: tuple[ForecastOutcome, ...] = ()
    index: str = ""  # the index manifest's id
    note: str = ""
    move_kind: Literal["tool", "message"] = "message"  # what the move was read as
    floor: float = 0.0  # a neighbour counts only above this retrieval score
    # The simulator's record for moves of this kind (None: no record kept).
    track: ForecastTrack | None = None


class SimStatusReply(Message, tag="rpc.sim_status_reply.v1", kw_only=True, frozen=True):
    """How many real transitions the simulator holds for the world."""

    transitions: int = 0
    # The simulator's track record by kind of move (empty: no index or no record).
    track: tuple[ForecastTrack, ...] = ()


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
    as_of: datetime | None = None  # recorded time, as ``GetBelief.as_of``


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
    as_of: datetime | None = None  # recorded time, as ``GetBelief.as_of``


class TraceReply(Message, tag="rpc.trace_reply.v1", kw_only=True, frozen=True):
    """The belief, every evidence step (source, observation, time, confidence before
    and after), and the edges that touch it."""

    belief: Belief | None = None
    steps: list[TraceStep] = msgspec.field(default_factory=list)
    edges: list[BeliefEdge] = msgspec.field(default_factory=list)
    # What each source's evidence is multiplied by (declared trust x learned
    # reliability; only those != 1), and the slot's other answers, whose support
    # weighs against this one (the steps read the belief's own evidence only).
    weights: dict[str, float] = msgspec.field(default_factory=dict)
    rivals: list[str] = msgspec.field(default_factory=list)


class Before(Message, tag="rpc.before.v1", kw_only=True, frozen=True):
    """Ask for the worldview before a move, evaluated at the caller's clock."""

    agent: Token
    query: Annotated[str, msgspec.Meta(max_length=4096)]
    at: datetime  # the clock: passed in, never sampled by the projector
    # Recorded time: each belief shown as the world had been told by then (None: all)
    as_of: datetime | None = None


class WorldviewReply(Message, tag="rpc.worldview.v1", kw_only=True, frozen=True):
    """The worldview (see worldline.protocols.worldview)."""

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


class RpcError(Message, tag="rpc.error.v1", kw_only=True, frozen=True):
    """A request the server could not answer, with the reason."""

    code: Literal["invalid", "internal"]
    message: str
    # Seconds after which the same request may succeed (a replica catching up after
    # a restart); 0: retrying will not help.
    retry_after: Annotated[float, msgspec.Meta(ge=0)] = 0.0


class Sources(Message, tag="rpc.sources.v1", kw_only=True, frozen=True):
    """Ask fusion how it weighs each source: declared trust, learned reliability."""

    source: str = ""  # only this source ("" : every source, least weighed first)
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100


class SourceStanding(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One source as fusion weighs it."""

    source: str
    trust: float | None = None  # declared (SetTrust); None: never set
    locked: bool = False  # declared and locked: the learned factor does not apply
    accuracy: float | None = None  # learned (AssessSources); None: not assessed
    independence: float = 1.0  # share of its vote left after copy detection
    claims: int = 0  # rival-answer questions it answered at the last assessment
    learned: float = 1.0  # the learned multiplier (1.0: none)
    weight: float = 1.0  # what its evidence is multiplied by: trust x learned


class SourcesReply(Message, tag="rpc.sources_reply.v1", kw_only=True, frozen=True):
    sources: list[SourceStanding] = msgspec.field(default_factory=list)
    total: int = 0  # sources that matched, before the limit
    # The last assessment's fixed point (0: none yet): rounds run, and the largest
    # move of an accuracy or copy discount in its last round.
    rounds: int = 0
    change: float = 0.0

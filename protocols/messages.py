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
from typing import Annotated, Final, Literal, get_args

import msgspec

__all__ = [
    "BELIEF_TYPES",
    "EXTRACTOR_INBOX",
    "FUSION_INBOX",
    "MATERIALIZER_INBOX",
    "PROJECTOR_INBOX",
    "PROJECTOR_REPLY",
    "PROJECTOR_RPC",
    "SIMULATOR_INBOX",
    "SIMULATOR_REPLY",
    "SIMULATOR_RPC",
    "AddBelief",
    "Belief",
    "BeliefChanged",
    "BeliefListReply",
    "BeliefReply",
    "BeliefType",
    "Confidence",
    "DeadLetter",
    "ExtractorInbox",
    "FusionInbox",
    "GetBelief",
    "ListBeliefs",
    "MaterializerInbox",
    "Message",
    "Observe",
    "PosteriorUpdate",
    "ProjectorInbox",
    "ProjectorReply",
    "ProjectorRpc",
    "RpcError",
    "SimStatus",
    "SimStatusReply",
    "SimulatorInbox",
    "Transition",
    "encode",
]

Confidence = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
"""A probability: where the balance of evidence sits, 0 to 1."""

Ident = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^\S+\Z")]
"""An opaque id: 1-128 characters, no whitespace."""

Token = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}\Z")]
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
    evidence_weight: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0  # effective sources
    uncertainty: Annotated[float, msgspec.Meta(ge=0.0)] | None = None  # posterior sd
    label: str = ""
    flags: tuple[str, ...] = ()  # derived: stale, stable, contradicted, uncertain
    author: Token
    created_at: datetime
    updated_at: datetime
    version: int = 0  # materializer's world sequence of the last change
    origin: str = ""  # id of the op that created the belief (provenance)


# --- observations: OBS stream -> extractor ------------------------------------------


class Observe(Message, tag="obs.artifact.v1", kw_only=True, frozen=True):
    """An artifact (text) handed to the extractor to turn into beliefs."""

    obs_id: Ident  # idempotency id, also the Nats-Msg-Id
    author: Token
    at: datetime
    source: str = ""  # where the artifact came from (file name, URL, tool)
    text: ArtifactText


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


FusionInbox = AddBelief


# --- derived records: DERIVED stream -> materializer, simulator -----------------------


class PosteriorUpdate(Message, tag="derived.posterior.v1", kw_only=True, frozen=True):
    """Fusion's posterior for one belief, derived from the op log (reproducible)."""

    belief: Belief
    cause: Ident  # the op id that produced this posterior


MaterializerInbox = PosteriorUpdate


class Transition(Message, tag="derived.transition.v1", kw_only=True, frozen=True):
    """A real action -> observation pair taken from a trace."""

    id: Ident
    lineage: Ident
    task: str = ""
    context: str = ""
    action: str
    observation: str
    pairing: Literal["id", "name-order", "turn"] = "turn"


SimulatorInbox = Transition


# --- change feed: STATE stream -> projector replicas ----------------------------------


class BeliefChanged(Message, tag="state.belief.v1", kw_only=True, frozen=True):
    """The materializer applied a change to a belief."""

    belief: Belief


ProjectorInbox = BeliefChanged


# --- request/reply ------------------------------------------------------------------


class GetBelief(Message, tag="rpc.get.v1", kw_only=True, frozen=True):
    """Ask for one belief by id."""

    belief_id: Ident


class ListBeliefs(Message, tag="rpc.list.v1", kw_only=True, frozen=True):
    """Ask for the active set, oldest first."""

    type: BeliefType | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000


class BeliefReply(Message, tag="rpc.belief.v1", kw_only=True, frozen=True):
    """One belief, or None when the world holds no belief with that id."""

    belief: Belief | None = None


class BeliefListReply(Message, tag="rpc.beliefs.v1", kw_only=True, frozen=True):
    """A page of beliefs, and how many match the request before the limit."""

    beliefs: tuple[Belief, ...] = ()
    total: int = 0


class SimStatus(Message, tag="rpc.sim_status.v1", kw_only=True, frozen=True):
    """Ask the simulator what it holds."""


class SimStatusReply(Message, tag="rpc.sim_status_reply.v1", kw_only=True, frozen=True):
    """How many real transitions the simulator holds for the world."""

    transitions: int = 0


class RpcError(Message, tag="rpc.error.v1", kw_only=True, frozen=True):
    """A request the server could not answer, with the reason."""

    code: Literal["invalid", "internal"]
    message: str


ProjectorRpc = GetBelief | ListBeliefs
ProjectorReply = BeliefReply | BeliefListReply | RpcError
SimulatorRpc = SimStatus
SimulatorReply = SimStatusReply | RpcError


# --- dead letters: DLQ stream -> operators --------------------------------------------


class DeadLetter(Message, tag="dlq.dead_letter.v1", kw_only=True, frozen=True):
    """Input an actor could not accept, kept with the reason (never dropped)."""

    actor: str
    subject: str
    stream_seq: int
    reason: str
    payload: bytes
    at: datetime


# One reused decoder per inbox (msgspec: decoders are cheap to reuse, costly to build).
EXTRACTOR_INBOX: Final = msgspec.msgpack.Decoder(ExtractorInbox)
FUSION_INBOX: Final = msgspec.msgpack.Decoder(FusionInbox)
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

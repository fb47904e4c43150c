"""The wire contract: every message worldline actors exchange, as frozen msgspec
Structs.

Each message carries an explicit, versioned tag in its ``kind`` field (never the class
name, which changes on rename). Each inbox has one tagged union and one reused decoder.
Schema evolution follows msgspec's rules: new fields get defaults, types never change,
and unknown fields are ignored (never ``forbid_unknown_fields``), so an old actor can
read a newer peer's messages.

The types live by channel: :mod:`worldline.protocols.base` (``Message``, ``Belief``, the
field types), :mod:`worldline.protocols.ops` (observations and ops),
:mod:`worldline.protocols.derived`, :mod:`worldline.protocols.state` (the change feed),
:mod:`worldline.protocols.inbox`, :mod:`worldline.protocols.rpc`,
:mod:`worldline.protocols.kv` (presence, lease) and :mod:`worldline.protocols.dlq`. This
module is the contract as a whole: it re-exports every type, and holds the unions, the
reused decoders and the encoders, so ``from worldline.protocols.messages import X`` is
the import to use.
"""

from __future__ import annotations

from typing import Final

import msgspec

from worldline.protocols.base import (
    BELIEF_TYPES,
    Belief,
    BeliefType,
    Confidence,
    Message,
)
from worldline.protocols.beliefs import Direction, EvidenceKind
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
from worldline.protocols.derived import OpVerdict, PosteriorUpdate, Transition
from worldline.protocols.dlq import DeadLetter
from worldline.protocols.edges import AddEdgeEvidence, EdgePosterior
from worldline.protocols.inbox import Notification, RejectCode, Rejection, WorkAssigned
from worldline.protocols.kv import Lease, Presence
from worldline.protocols.ops import (
    AckInbox,
    AddBelief,
    AddEdge,
    AddEvidence,
    AssessSources,
    CloseBelief,
    DeclareWorld,
    LinkBeliefs,
    Observe,
    PutWork,
    RemoveEdge,
    SetField,
    SetTrust,
    Statement,
    UpsertEntity,
)
from worldline.protocols.rpc import (
    AgentView,
    Before,
    BeliefListReply,
    BeliefReply,
    ForecastOutcome,
    ForecastTrack,
    GetBelief,
    GetView,
    ListBeliefs,
    OpStatus,
    OpStatusReply,
    ReadWorld,
    RpcError,
    SearchBeliefs,
    SearchHit,
    SearchReply,
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
    TraceBelief,
    TraceReply,
    ViewReply,
    WorldReply,
    WorldviewReply,
)
from worldline.protocols.state import (
    BeliefChanged,
    BeliefEdgeChanged,
    EdgeChanged,
    EntityChanged,
    InboxChanged,
    OpApplied,
    WorldDeclared,
)

__all__ = [
    "BELIEF_TYPES",
    "EXTRACTOR_INBOX",
    "FUSION_INBOX",
    "FUSION_REPLY",
    "FUSION_RPC",
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
    "AddEdgeEvidence",
    "AddEvidence",
    "AgentView",
    "AssessSources",
    "BatchItems",
    "Before",
    "Belief",
    "BeliefChanged",
    "BeliefEdgeChanged",
    "BeliefListReply",
    "BeliefOp",
    "BeliefReply",
    "BeliefType",
    "CalibrationBin",
    "CalibrationGroup",
    "CalibrationReply",
    "CloseBelief",
    "Confidence",
    "ContradictionResolved",
    "ContradictionsReply",
    "CrewOp",
    "DeadLetter",
    "DeclareWorld",
    "Direction",
    "EdgeChanged",
    "EdgePosterior",
    "EntityChanged",
    "EvidenceKind",
    "ExtractorInbox",
    "ForecastOutcome",
    "ForecastTrack",
    "FusionInbox",
    "GetBelief",
    "GetCalibration",
    "GetView",
    "InboxChanged",
    "InboxMessage",
    "Lease",
    "LinkBeliefs",
    "ListBeliefs",
    "ListContradictions",
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
    "RejectCode",
    "Rejection",
    "RemoveEdge",
    "ResolveContradiction",
    "RpcError",
    "SearchBeliefs",
    "SearchHit",
    "SearchReply",
    "SetField",
    "SetTrust",
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
    "SimulatorInbox",
    "SimulatorReply",
    "SimulatorRpc",
    "SourceStanding",
    "Sources",
    "SourcesReply",
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

# --- one tagged union per inbox -------------------------------------------------------

ExtractorInbox = Observe

CrewOp = (
    DeclareWorld
    | UpsertEntity
    | SetField
    | AddEdge
    | RemoveEdge
    | PutWork
    | AckInbox
    | ResolveContradiction
)
BeliefOp = (
    AddBelief
    | AddEvidence
    | Statement
    | SetTrust
    | LinkBeliefs
    | CloseBelief
    | AssessSources
    | AddEdgeEvidence
)
OpsInbox = BeliefOp | CrewOp
FusionInbox = OpsInbox

MaterializerInbox = PosteriorUpdate | OpVerdict | EdgePosterior

SimulatorInbox = Transition

ProjectorInbox = (
    BeliefChanged
    | ContradictionResolved
    | BeliefEdgeChanged
    | OpApplied
    | EntityChanged
    | EdgeChanged
    | WorldDeclared
    | InboxChanged
)

InboxMessage = Rejection | Notification | WorkAssigned

ProjectorRpc = (
    GetBelief
    | ListBeliefs
    | ReadWorld
    | GetView
    | TraceBelief
    | Before
    | SearchBeliefs
    | ListContradictions
    | GetCalibration
)
ProjectorReply = (
    BeliefReply
    | CalibrationReply
    | ContradictionsReply
    | BeliefListReply
    | WorldReply
    | ViewReply
    | TraceReply
    | WorldviewReply
    | SearchReply
    | RpcError
)
MaterializerRpc = StateHash | OpStatus
MaterializerReply = StateHashReply | OpStatusReply | RpcError
SimulatorRpc = SimStatus | SimStart | SimStep | SimEnd | SimForecast
SimulatorReply = (
    SimStatusReply
    | SimStarted
    | SimStepReply
    | SimEnded
    | SimForecastReply
    | SimError
    | RpcError
)


# One reused decoder per inbox (msgspec: decoders are cheap to reuse, costly to build).
EXTRACTOR_INBOX: Final = msgspec.msgpack.Decoder(ExtractorInbox)
FUSION_INBOX: Final = msgspec.msgpack.Decoder(FusionInbox)
FusionRpc = Sources
FusionReply = SourcesReply | RpcError
FUSION_RPC: Final = msgspec.msgpack.Decoder(FusionRpc)
FUSION_REPLY: Final = msgspec.msgpack.Decoder(FusionReply)
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

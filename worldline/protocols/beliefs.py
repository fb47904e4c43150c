"""Records of the belief state that ride inside messages: evidence, belief edges,
contradictions and trace steps. Plain frozen Structs (the messages carry the tags)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, Literal, get_args

import msgspec

__all__ = [
    "DIRECTIONS",
    "EDGE_TYPES",
    "EVIDENCE_KINDS",
    "BeliefEdge",
    "Contradiction",
    "ContradictionStatus",
    "Direction",
    "EdgeType",
    "Evidence",
    "EvidenceKind",
    "TraceStep",
]

Ident = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^\S+\Z")]
Token = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}\Z")]
SourceName = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]

Direction = Literal["supports", "refutes", "neutral"]
EvidenceKind = Literal[
    "measurement",
    "citation",
    "user-assertion",
    "expert-judgment",
    "inference",
    "assumption",
]
EdgeType = Literal[
    "supports", "contradicts", "supersedes", "derived_from", "depends_on"
]
DIRECTIONS: Final[tuple[str, ...]] = get_args(Direction)
EVIDENCE_KINDS: Final[tuple[str, ...]] = get_args(EvidenceKind)
EDGE_TYPES: Final[tuple[str, ...]] = get_args(EdgeType)


class Evidence(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One piece of evidence about one belief. Immutable once recorded."""

    id: Ident  # idempotency: the same id twice is recorded once
    belief_id: Ident
    direction: Direction
    kind: EvidenceKind
    source: SourceName  # who or what it came from: corroboration groups by this
    observed_at: datetime  # decay runs from here
    text: Annotated[str, msgspec.Meta(max_length=4096)] = ""
    artifact: Annotated[str, msgspec.Meta(max_length=1024)] = ""  # observation ref
    author: Token  # the agent that reported it
    recorded_seq: int = 0  # OPS sequence of the op that recorded it
    # When the world was told: the ``at`` of the op that recorded it (fusion sets
    # it; None on evidence recorded before the field existed). ``as_of`` reads
    # count only evidence recorded by then (docs/belief-math.md, "Two time axes").
    recorded_at: datetime | None = None
    # What read it out of an artifact: the extractor's "deterministic" reading, or
    # the id of the model that proposed it (LLM extraction); empty for evidence
    # written by hand.
    extracted_by: Annotated[str, msgspec.Meta(max_length=256)] = ""
    # Whose independent voice it counts as (set by fusion when it records the item,
    # whatever a client sent): ``source`` when the world's declaration allows
    # ``author`` to report that source, else ``agent:<author>``. Corroboration groups
    # and learned reliability go by it; "" (evidence recorded before the field
    # existed) counts as ``source`` (docs/belief-math.md, "Source identity").
    voice: Annotated[str, msgspec.Meta(max_length=256)] = ""
    # For extracted evidence: what came just before the statement (the artifact's
    # speaker, the sentence or turn before it), which retrieval reads beside the
    # belief's text; never evidence itself. Empty for evidence written by hand.
    context: Annotated[str, msgspec.Meta(max_length=1024)] = ""


class BeliefEdge(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A typed relation between two beliefs with its own confidence (a claim about the
    graph's structure: a depends_on link can be strong or tentative). The confidence
    is stated by whoever writes the edge (the last write wins) until the edge has
    evidence of its own (``AddEdgeEvidence``): then ``confidence`` is the edge's
    posterior, fused by the belief math with the stated strength as its prior, and
    the stated strength moves to ``stated`` (docs/belief-math.md, "Edges")."""

    id: Ident  # unless named: its content, text.edge_id(world, type, source, target)
    type: EdgeType
    source: Ident  # belief id
    target: Ident  # belief id
    confidence: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.8
    author: str = ""
    version: int = 0
    removed: bool = False
    at: datetime | None = None  # when it was (last) written
    # Set once the edge has evidence (None: ``confidence`` is the stated strength).
    stated: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    evidence_count: int = 0
    evidence_weight: float = 0.0
    uncertainty: float | None = None
    flags: tuple[str, ...] = ()
    posterior_seq: int = 0  # OPS sequence of the op behind the posterior shown


ContradictionStatus = Literal["open", "resolved", "dissolved"]


class Contradiction(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A first-class disagreement: never averaged away. It has an id and a
    lifecycle recorded from the log (docs/belief-math.md, "Contradictions"): open
    from when it first appears, until ``resolved`` by a ``ResolveContradiction``
    op or ``dissolved`` (an end closed, the edge removed)."""

    kind: Literal["edge", "split"]  # an explicit contradicts edge, or split evidence
    beliefs: tuple[str, ...]  # the endpoints (one belief for a split)
    strength: float  # edge posterior, or the minority side's share of the evidence
    trace: tuple[str, ...]  # belief (and edge) ids that put it here
    # "c-" + 16 hex of sha256(world, kind, sorted belief ids): the same on replay
    id: str = ""
    status: ContradictionStatus = "open"
    opened_at: datetime | None = None  # the `at` of the op that opened it
    opened_seq: int = 0  # ... and its OPS sequence
    resolved_at: datetime | None = None  # resolved or dissolved: the op's `at`
    resolved_seq: int = 0  # ... and its OPS sequence
    winner: str = ""  # the end a resolution named as right ("" for none)
    reason: str = ""  # the resolution's reason, or why it dissolved
    resolved_by: str = ""  # the agent that resolved it


class TraceStep(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One step of a belief's provenance: the evidence and how confidence moved."""

    evidence: Evidence
    before: float | None
    after: float | None

"""Evidence about belief edges: the op that attaches evidence to an edge (OPS ->
fusion, materializer) and fusion's posterior for the edge (DERIVED -> materializer).
Kept apart from the per-channel modules because both halves belong to one feature
(docs/belief-math.md, "Edges"). Unions and decoders:
:mod:`worldline.protocols.messages`.

"A depends on B" is itself a claim that can be cited, measured and refuted: an
``AddEdgeEvidence`` names the edge, and its :class:`Evidence` names the same edge id in
``belief_id`` (one evidence type for beliefs and edges, so the belief math reads both
alike). Fusion's shard that owns the edge id fuses the evidence with the strength the
last ``LinkBeliefs`` stated as the prior, and publishes an :class:`EdgePosterior`.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from worldline.protocols.base import Ident, Message, Token
from worldline.protocols.beliefs import BeliefEdge, Evidence

__all__ = ["AddEdgeEvidence", "EdgePosterior"]


class AddEdgeEvidence(
    Message, tag="op.add_edge_evidence.v1", kw_only=True, frozen=True
):
    """Attach one piece of evidence to an existing belief edge; ``evidence.belief_id``
    names the same edge as ``edge_id`` (``supports``: the relation holds,
    ``refutes``: it does not)."""

    op_id: Ident
    author: Token
    at: datetime
    edge_id: Ident
    evidence: Evidence


class EdgePosterior(
    Message, tag="derived.edge_posterior.v1", kw_only=True, frozen=True
):
    """Fusion's posterior for one belief edge, derived from the op log (reproducible):
    ``edge.confidence`` is the posterior, ``edge.stated`` the prior it started from
    (the strength the last ``LinkBeliefs`` stated)."""

    edge: BeliefEdge
    cause: Ident  # the op id that produced this posterior
    cause_seq: int = 0  # its OPS stream sequence (``edge.posterior_seq``)
    evidence: list[Evidence] = msgspec.field(default_factory=list)  # all, by id
    trust: dict[str, float] = msgspec.field(default_factory=dict)  # sources != 1

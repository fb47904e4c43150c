"""Derived records: DERIVED stream -> materializer, simulator. Fusion's posteriors and
verdicts, and real transitions. Unions and decoders:
:mod:`worldline.protocols.messages`.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from worldline.protocols.base import Belief, Ident, Message
from worldline.protocols.beliefs import Evidence

__all__ = ["OpVerdict", "PosteriorUpdate", "Transition", "VerdictCode"]


class PosteriorUpdate(Message, tag="derived.posterior.v1", kw_only=True, frozen=True):
    """Fusion's posterior for one belief, derived from the op log (reproducible).

    It carries what changed (``delta``): the evidence its op ``added`` (none for a
    trust change or a close); the consumer merges them by id into the evidence it
    holds, which must then count ``belief.evidence_count`` items. A message without
    ``delta`` (every one published before, still in ``WL_DERIVED``) carries the
    belief's whole ``evidence`` list instead. A trust change re-sends each belief its
    source bears on: whole lists made 24 MiB of ops about 770 MiB of posteriors
    (issue 18).
    """

    belief: Belief
    cause: Ident  # the op id that produced this posterior
    cause_seq: int = 0  # its OPS stream sequence: the belief's version, replay-stable
    # Without ``delta``: the belief's whole evidence list, by id.
    evidence: list[Evidence] = msgspec.field(default_factory=list)
    trust: dict[str, float] = msgspec.field(default_factory=dict)  # sources != 1
    delta: bool = False  # True: ``added`` holds only the new items; merge them
    added: list[Evidence] = msgspec.field(default_factory=list)  # with ``delta``

    def __post_init__(self) -> None:
        if self.delta and self.evidence:
            raise ValueError(
                "a delta posterior carries its new evidence in `added`, not a whole "
                "`evidence` list; send one or the other"
            )
        if self.added and not self.delta:
            raise ValueError(
                "`added` evidence needs `delta: true` (a posterior without it "
                "carries the whole `evidence` list)"
            )


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
    # How many times the traces recorded this very pair in its lineage (an index
    # stores identical transitions once, with their count; 1 from an adapter).
    support: int = 1

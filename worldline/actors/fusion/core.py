"""Fusion core: evidence -> posterior. Pure, synchronous, order-independent.

Handles the belief ops of the OPS record: ``AddBelief`` (a weak prior), ``AddEvidence``,
``Statement`` (the extractor's create-or-corroborate), ``SetTrust`` and ``CloseBelief``
(by its author, the operator, the admins or an agent the declaration lets close it:
:mod:`.closing`).
The math is :mod:`worldline.actors.belief_model.posterior`; this module keeps the
evidence and emits a :class:`PosteriorUpdate` per change, evaluated at the op's own time
(so replays agree).

Sharding: an instance owns the beliefs whose id hashes to its shard (``--shard I/N``)
and ignores the rest; trust settings apply in every shard. Any split of the work gives
the same posteriors as one instance.

State keys: ``belief/<world>/<id>`` -> :class:`FusedBelief`;
``trust/<world>/<source>`` -> :class:`TrustSetting`; ``bysrc/<world>/<source>/<id>``
-> the belief id, for every source and ``agent:<author>`` of its evidence (the index
by source, :mod:`worldline.actors.fusion.sources`): a trust change re-reads only the
beliefs its source bears on.
Output: :class:`PosteriorUpdate` on ``wl.<world>.derived.posterior.<shard>``, and on
the same subject an :class:`OpVerdict` for an op that changed no belief: refused (a
client mistake: an unknown or closed belief, a taken id, a locked trust setting, a
close or a trust setting its author has no authority for...),
or unchanged (a repeat, such as an evidence id already recorded). The materializer
keeps verdicts beside its own op outcomes, so the author reads them through
``op_status``. Only what is really broken raises :class:`InvalidInput` (and is
dead-lettered): an op naming another author, a statement whose evidence names
another belief. Every trust setting gets a verdict (shard 0 gives it).
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from worldline.actors.belief_model import posterior
from worldline.actors.belief_model.charter import Refused as _Refused
from worldline.actors.belief_model.posterior import NO_PROBABILITY
from worldline.actors.belief_model.text import negated as is_negated
from worldline.actors.belief_model.text import normalize
from worldline.actors.fusion import (
    answers,
    closing,
    declared,
    edges,
    learning,
    posteriors,
    records,
    slots,
    trusting,
)
from worldline.actors.fusion.records import (
    FusedBelief,
    TrustSetting,
    belief_key,
    decode_fused,
    decode_trust,
    trust_key,
    trust_prefix,
)
from worldline.actors.runtime.errors import InvalidInput
from worldline.actors.runtime.memory import Overlay
from worldline.actors.runtime.spec import Context, Outgoing, Reader, Step
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import (
    AddBelief,
    AddEdgeEvidence,
    AddEvidence,
    AssessSources,
    Belief,
    CloseBelief,
    DeclareWorld,
    LinkBeliefs,
    OpsInbox,
    OpVerdict,
    SetTrust,
    Statement,
)
from worldline.protocols.subjects import derived, slot_of

if TYPE_CHECKING:
    from datetime import datetime

__all__ = [
    "NO_PROBABILITY",
    "PRIOR_STRENGTH",
    "FusedBelief",
    "TrustSetting",
    "belief_key",
    "decode_fused",
    "decode_trust",
    "handle",
    "shard_of",
    "trust_key",
    "trust_prefix",
]

PRIOR_STRENGTH: Final = posterior.PRIOR_STRENGTH
"""Belief types firewalled from the posterior math: intent, not claims about truth."""

EXTRACTOR: Final = closing.EXTRACTOR  # its statements name the observing agent
MAX_EVIDENCE: Final = 10_000  # per belief; more is refused, never silently cut


_BY_ID: Final = operator.attrgetter("id")


def shard_of(belief_id: str, shards: int) -> int:
    """Stable shard of a belief id (crc32, identical on every machine and run)."""
    return slot_of(belief_id, shards)


def handle(
    reader: Reader,
    op: OpsInbox,
    ctx: Context,
    *,
    shard: tuple[int, int] = (0, 1),
    secured: bool = False,
) -> Step:
    """Apply one belief op owned by this shard; other ops are not fusion's, but a
    world's declaration is kept when the world accepts it (:mod:`.declared`;
    ``secured``: the bus authenticates authors, as for the materializer).

    A client mistake (a ``_Refused``: see
    :class:`worldline.actors.belief_model.charter.Refused`) is answered, not raised.

    A client mistake (an id taken by another op, a goal or gap with a confidence,
    evidence for an unknown or closed belief, a locked trust setting...) is answered
    with a ``rejected`` :class:`OpVerdict`, a repeat with an ``unchanged`` one.

    Raises:
        InvalidInput: a forged author, or a statement whose evidence names another
            belief: input no honest client sends (dead-lettered for the operator).
    """
    match op:
        case (
            AddBelief()
            | AddEvidence()
            | Statement()
            | CloseBelief()
            | SetTrust()
            | AssessSources()
        ):
            pass
        case LinkBeliefs() | AddEdgeEvidence():  # edges: worldline.actors.fusion.edges
            return edges.handle(reader, op, ctx, shard=shard, trust_of=records.trust_of)
        case DeclareWorld():  # whose voice evidence is, who may set trust
            return declared.declare(reader, op, ctx, secured=secured)
        case _:
            return Step()
    if op.author != ctx.author:
        raise InvalidInput(
            f"op {op.op_id} names author {op.author!r} but was published on "
            f"{ctx.subject!r}; agents publish only their own ops"
        )
    if isinstance(op, AssessSources):
        step = learning.assess(reader, op, ctx, shard)
        if shard[0] == 0:  # one shard answers
            outcome: Literal["applied", "unchanged"] = (
                "applied" if step.writes else "unchanged"
            )
            step.out.append(_verdict(ctx, op, shard, outcome).out[0])
        return step
    if isinstance(op, SetTrust):
        try:
            step = trusting.set_trust(reader, op, ctx, shard)
            step = edges.retrust(reader, op, ctx, shard, step, records.trust_of)
        except _Refused as refused:
            return _verdict(ctx, op, shard, "rejected", refused=refused)
        if shard[0] != 0:
            return step  # one shard answers
        step.out.append(_verdict(ctx, op, shard, "applied").out[0])
        return step
    target = op.evidence.belief_id if isinstance(op, AddEvidence) else op.belief_id
    route = answers.route(reader, ctx.world, op, target)
    if shard_of(route, shard[1]) != shard[0]:
        return answers.membership(reader, ctx.world, op)  # another shard's belief
    try:
        step = _belief_op(reader, op, ctx, shard)
    except _Refused as refused:
        return _verdict(ctx, op, shard, "rejected", target, refused)
    if not step.out:
        return _verdict(ctx, op, shard, "unchanged", target)
    if route != target:  # a rival answer changed: the next assessment has work
        step.writes.update(slots.changed(ctx.world, ctx.seq))
    return step


def _belief_op(
    reader: Reader,
    op: AddBelief | AddEvidence | Statement | CloseBelief,
    ctx: Context,
    shard: tuple[int, int],
) -> Step:
    match op:
        case AddBelief():
            return _add(reader, op, ctx, shard)
        case AddEvidence():
            return _evidence(reader, op, ctx, shard)
        case Statement():
            return _statement(reader, op, ctx, shard)
        case CloseBelief():
            return _close(reader, op, ctx, shard)
    raise AssertionError(op)  # pragma: no cover - the match above is exhaustive


def _verdict(
    ctx: Context,
    op: AddBelief | AddEvidence | Statement | CloseBelief | SetTrust | AssessSources,
    shard: tuple[int, int],
    outcome: Literal["applied", "rejected", "unchanged"],
    belief_id: str = "",
    refused: _Refused | None = None,
) -> Step:
    """Fusion's answer to ``op`` when it made no posterior (or set a trust), on the
    posterior subject so it reaches the materializer in log order with them."""
    verdict = OpVerdict(
        op_id=op.op_id,
        seq=ctx.seq,
        outcome=outcome,
        code=None if refused is None else refused.code,
        reason="" if refused is None else refused.reason,
        belief_id=belief_id,
    )
    return Step(
        out=[
            Outgoing(
                subject=derived(ctx.world, "posterior", str(shard[0])),
                message=verdict,
                msg_id=f"verdict:{ctx.world}:{ctx.seq}:{op.op_id}",
            )
        ]
    )


def _new_belief(
    op: AddBelief | Statement, seq: int, confidence: float | None, label: str = ""
) -> FusedBelief:
    belief = Belief(
        id=op.belief_id,
        text=op.text,
        type=op.type,
        label=label,
        author=op.author,
        created_at=op.at,
        updated_at=op.at,
        valid_from=op.at,
        origin=op.op_id,
        prior=confidence,
        created_seq=seq,
    )
    return FusedBelief(belief=belief, op_id=op.op_id)


def _add(reader: Reader, op: AddBelief, ctx: Context, shard: tuple[int, int]) -> Step:
    existing = records.load(reader, ctx.world, op.belief_id)
    if existing is not None:
        if existing.op_id == op.op_id:
            return Step()  # the same op again: already applied
        return _readd(reader, op, ctx, shard, existing)
    if op.type in NO_PROBABILITY and op.confidence is not None:
        raise _Refused(
            "invalid",
            f"a {op.type} carries no probability; add it without a confidence",
        )
    # A hand-entered negation ("Export does not check auth") keeps its polarity, so
    # the extractor's restatements of it support it rather than refute it.
    fused = msgspec.structs.replace(
        _new_belief(op, ctx.seq, op.confidence, op.label or ""),
        negated=is_negated(op.text),
    )
    if op.slot is None:
        return posteriors.emit(reader, ctx, fused, op.op_id, op.at, shard)
    if op.type in NO_PROBABILITY:
        raise _Refused(
            "invalid",
            f"a {op.type} is not an answer to a question; add it without a slot",
        )
    answers.check_room(reader, ctx.world, op.slot, op.author)  # raises `full`
    fused = msgspec.structs.replace(
        fused, belief=msgspec.structs.replace(fused.belief, slot=op.slot)
    )
    step = Step(
        writes={
            slots.member_key(ctx.world, op.belief_id): op.slot.encode(),
            slots.slot_key(ctx.world, op.slot, op.belief_id): op.belief_id.encode(),
        }
    )
    more = posteriors.emit(
        Overlay(reader, step.writes), ctx, fused, op.op_id, op.at, shard
    )
    step.writes.update(more.writes)
    step.out.extend(more.out)
    return step


def _readd(
    reader: Reader,
    op: AddBelief,
    ctx: Context,
    shard: tuple[int, int],
    existing: FusedBelief,
) -> Step:
    """The same statement added again (by another op) is reconciled as evidence, as
    an extracted restatement is: the author's assertion, a ``user-assertion`` from
    their source, supporting it (refuting it when the stated confidence is under
    0.5; neutral at 0.5)."""
    if normalize(op.text)[0] != normalize(existing.belief.text)[0]:
        raise _Refused(
            "conflict",
            f"belief {op.belief_id} already exists in world {ctx.world} with other "
            "text; add it under a new id, or attach evidence to the existing one",
        )
    if (op.slot or "") != existing.belief.slot:
        raise _Refused(
            "conflict",
            f"belief {op.belief_id} already exists in world {ctx.world} "
            + (
                f"as an answer to {existing.belief.slot!r}"
                if existing.belief.slot
                else "without a slot"
            )
            + "; a belief's slot is set when it is first added",
        )
    if op.label and op.label != (existing.belief.label or op.label):
        raise _Refused(
            "conflict",
            f"belief {op.belief_id} already exists in world {ctx.world} with label "
            f"{existing.belief.label!r}; a belief's label is set once: add it "
            "again without a label, or with the same one",
        )
    if op.label and not existing.belief.label:  # the first label given sets it
        existing = msgspec.structs.replace(
            existing, belief=msgspec.structs.replace(existing.belief, label=op.label)
        )
    c = op.confidence
    direction: Literal["supports", "refutes", "neutral"] = (
        "supports" if c is None or c > 0.5 else "refutes" if c < 0.5 else "neutral"
    )
    item = Evidence(
        id=op.op_id,
        belief_id=op.belief_id,
        direction=direction,
        kind="user-assertion",
        source=op.source or f"agent:{op.author}",
        observed_at=op.at,
        text=op.text,
        author=op.author,
    )
    return _record(reader, ctx, shard, op.op_id, op.at, existing, item)


def _record(
    reader: Reader,
    ctx: Context,
    shard: tuple[int, int],
    cause: str,
    at: datetime,
    fused: FusedBelief,
    item: Evidence,
) -> Step:
    """Record ``item`` for ``fused``; publish its posterior and, when it answers a
    slot, its rivals' that moved. No change when the evidence id is known."""
    # When the world was told, and whose voice it is (the declaration's, not the
    # client's word: a source its reporter may not report is the reporter's own).
    item = declared.voiced(
        reader, ctx.world, item, recorded_at=at, recorded_seq=ctx.seq
    )
    updated = _with_evidence(fused, item)
    if updated is None:
        return Step()
    step = posteriors.indexed(
        posteriors.emit(reader, ctx, updated, cause, at, shard, added=item), ctx, item
    )
    rivals_ = answers.rivals_of(reader, ctx.world, updated)
    return posteriors.reemit(
        reader,
        ctx,
        step,
        rivals_,
        cause,
        at,
        shard,
        always=bool(rivals_) and answers.brings_trust(reader, ctx.world, updated, item),
    )


def _with_evidence(fused: FusedBelief, item: Evidence) -> FusedBelief | None:
    """``fused`` with ``item`` (as recorded) added, or None when that evidence id
    is known."""
    if any(e.id == item.id for e in fused.evidence):
        return None
    if fused.belief.status != "active":
        raise _Refused(
            "closed",
            f"belief {fused.belief.id} is {fused.belief.status}; evidence is refused",
        )
    if len(fused.evidence) >= MAX_EVIDENCE:
        raise _Refused(
            "full",
            f"belief {fused.belief.id} already holds {MAX_EVIDENCE} evidence items",
        )
    evidence = sorted([*fused.evidence, item], key=_BY_ID)
    return msgspec.structs.replace(fused, evidence=evidence)


def _evidence(
    reader: Reader, op: AddEvidence, ctx: Context, shard: tuple[int, int]
) -> Step:
    item = op.evidence
    if item.author != op.author:
        raise _Refused(
            "invalid",
            f"evidence {item.id} names author {item.author!r}; report it as yourself",
        )
    fused = records.load(reader, ctx.world, item.belief_id)
    if fused is None:
        raise _Refused(
            "unknown_belief",
            f"no belief {item.belief_id} in world {ctx.world}; add it first "
            "(`worldline add`), then attach evidence to its id",
        )
    return _record(reader, ctx, shard, op.op_id, op.at, fused, item)


def _statement(
    reader: Reader, op: Statement, ctx: Context, shard: tuple[int, int]
) -> Step:
    if op.evidence.belief_id != op.belief_id:
        raise InvalidInput(f"statement {op.op_id}: evidence names another belief")
    if op.evidence.author != op.author and ctx.author != EXTRACTOR:
        # Only the extractor (whose subject nobody else may publish on) reports
        # evidence as the agent that observed it; anyone else reports as itself.
        raise _Refused(
            "invalid",
            f"statement evidence names author {op.evidence.author!r}; report it as "
            "yourself",
        )
    fused = records.load(reader, ctx.world, op.belief_id)
    if fused is None:
        fused = msgspec.structs.replace(
            _new_belief(op, ctx.seq, None), negated=op.negated
        )
    item = op.evidence
    if fused.negated and item.direction != "neutral":
        # The direction is stated against the positive form; this belief's text
        # is the negation, so support for one is refutation of the other.
        flipped = "supports" if item.direction == "refutes" else "refutes"
        item = msgspec.structs.replace(item, direction=flipped)
    return _record(reader, ctx, shard, op.op_id, op.at, fused, item)


def _close(
    reader: Reader, op: CloseBelief, ctx: Context, shard: tuple[int, int]
) -> Step:
    fused = records.load(reader, ctx.world, op.belief_id)
    if fused is None:
        raise _Refused(
            "unknown_belief",
            f"no belief {op.belief_id} in world {ctx.world}; check the id "
            "(`worldline list`)",
        )
    refused = closing.refusal(reader, op, ctx, fused)
    if refused is not None:
        raise refused  # before anything is written: nothing is half-applied
    belief = fused.belief
    if belief.status != "active":
        return Step()  # already closed: closing again changes nothing
    wrong = closing.mismatch(op, belief.type)
    if wrong:
        raise _Refused("invalid", f"belief {belief.id}: {wrong}")
    step = posteriors.emit(
        reader,
        ctx,
        fused,
        op.op_id,
        op.at,
        shard,
        status=op.how,
        closed_reason=op.reason,
        valid_until=op.at,
        outcome=op.outcome,
    )
    # A withdrawn answer no longer weighs against its rivals, nor takes a place.
    rivals_ = answers.rivals_of(reader, ctx.world, fused)
    if belief.slot:
        step.writes[slots.slot_key(ctx.world, belief.slot, belief.id)] = None
    return posteriors.reemit(reader, ctx, step, rivals_, op.op_id, op.at, shard)

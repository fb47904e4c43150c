"""Fusion's side of rival answers: which shard an op on a slot's answer belongs to,
and a belief read with its rivals weighed in (the math:
:mod:`worldline.actors.belief_model.rivals`; the keys: :mod:`.slots`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldline.actors.belief_model import charter, posterior, rivals
from worldline.actors.belief_model.charter import Refused
from worldline.actors.belief_model.posterior import NO_PROBABILITY
from worldline.actors.fusion import declared, records, slots
from worldline.actors.runtime.spec import Step
from worldline.protocols.messages import AddBelief

if TYPE_CHECKING:
    from datetime import datetime

    from worldline.actors.fusion.records import FusedBelief
    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.beliefs import Evidence
    from worldline.protocols.messages import AddEvidence, Belief, CloseBelief, Statement

__all__ = [
    "brings_trust",
    "check_room",
    "members",
    "membership",
    "read",
    "readings_differ",
    "rivals_of",
    "route",
    "with_rivals",
]


def route(
    reader: Reader,
    world: str,
    op: AddBelief | AddEvidence | Statement | CloseBelief,
    target: str,
) -> str:
    """What the op is sharded by: the slot of a rival answer (so a slot's answers
    live in one shard), else the belief id."""
    held = slots.slot_of(reader, world, target)
    if held is not None:
        return held
    if isinstance(op, AddBelief) and op.slot is not None:
        return op.slot
    return target


def membership(
    reader: Reader, world: str, op: AddBelief | AddEvidence | Statement | CloseBelief
) -> Step:
    """In a shard that does not own the belief: remember a new rival answer's slot,
    so later ops naming only the belief reach the slot's shard."""
    if (
        isinstance(op, AddBelief)
        and op.slot is not None
        and op.type not in NO_PROBABILITY
        and slots.slot_of(reader, world, op.belief_id) is None
    ):
        return Step(writes={slots.member_key(world, op.belief_id): op.slot.encode()})
    return Step()


def check_room(reader: Reader, world: str, slot: str, author: str) -> None:
    """Whether ``slot`` has a place for one more answer from ``author``: it holds at
    most ``MAX_RIVALS`` active answers, at most ``MAX_AUTHOR_ANSWERS`` of them added
    by one author (so one agent cannot fill a question; the operator and the
    world's admins, who rule it, may load a whole question); a retracted answer
    holds no place.

    Raises:
        Refused: ``full``, saying which limit.
    """
    held = [
        fused
        for answer in slots.answers(reader, world, slot)
        if (fused := records.load(reader, world, answer)) is not None
        and fused.belief.status == "active"
    ]
    if len(held) >= rivals.MAX_RIVALS:
        raise Refused(
            "full",
            f"slot {slot!r} already holds {rivals.MAX_RIVALS} answers; attach "
            "evidence to one of them (`worldline list`) or split the question",
        )
    own = sum(fused.belief.author == author for fused in held)
    if own >= rivals.MAX_AUTHOR_ANSWERS and not charter.is_admin(
        declared.charter_of(reader, world).decl, author
    ):
        raise Refused(
            "full",
            f"{author} already added {own} of the answers slot {slot!r} holds, the "
            f"most one agent may ({rivals.MAX_AUTHOR_ANSWERS} of "
            f"{rivals.MAX_RIVALS}); attach evidence to one of them, or retract one "
            "of yours (`worldline retract`) to free its place",
        )


def members(reader: Reader, world: str, fused: FusedBelief) -> list[FusedBelief]:
    """``fused`` and the active rival answers of its slot."""
    found = [fused]
    for answer in slots.answers(reader, world, fused.belief.slot):
        if answer == fused.belief.id:
            continue
        rival = records.load(reader, world, answer)
        if rival is not None and rival.belief.status == "active":
            found.append(rival)
    return found


def read(
    reader: Reader,
    world: str,
    fused: FusedBelief,
    now: datetime,
    table: records.Weights | None = None,
) -> tuple[posterior.Reading, dict[str, float]]:
    """The belief's reading at ``now`` (with its rivals weighed in when it answers a
    slot) and the trust multipliers it used (``table``: see
    :func:`records.trust_of`)."""
    belief = fused.belief
    if not belief.slot:
        trust = records.trust_of(reader, world, fused.evidence, table)
        probabilistic = belief.type not in NO_PROBABILITY
        reading = posterior.read(
            belief.prior, fused.evidence, trust, now, probabilistic=probabilistic
        )
        return reading, trust
    slot = members(reader, world, fused)
    evidence = [e for m in slot for e in m.evidence]
    trust = records.trust_of(reader, world, evidence, table)
    answers = [rivals.Member(m.belief.id, m.belief.text, m.evidence) for m in slot]
    reading = rivals.read(belief.id, belief.prior, answers, trust, now, belief.slot)
    return reading, trust


def brings_trust(
    reader: Reader, world: str, fused: FusedBelief, item: Evidence
) -> bool:
    """Whether ``item``, just recorded for ``fused``, adds a trust multiplier to its
    slot's readings: a name of it (source or author) with a multiplier that no other
    evidence of the slot carries. Each rival's posterior carries the slot's trust,
    so then they are all sent again, whether or not their reading moved (else what
    a rival last carried would depend on the order the slot's evidence arrived)."""
    mine = records.trust_of(reader, world, [item])
    if not mine:
        return False  # the usual case: no trust set or learned for its names
    names: set[str] = set()
    for member in members(reader, world, fused):
        for e in member.evidence:
            if e is not item:
                names.update((e.source, f"agent:{e.author}"))
    return not names.issuperset(mine)


def readings_differ(old: Belief, new: Belief) -> bool:
    return (
        old.confidence,
        old.evidence_weight,
        old.uncertainty,
        old.fragility,
        old.flags,
    ) != (
        new.confidence,
        new.evidence_weight,
        new.uncertainty,
        new.fragility,
        new.flags,
    )


def rivals_of(reader: Reader, world: str, fused: FusedBelief) -> list[str]:
    """The other answers of ``fused``'s slot, sorted (none without a slot)."""
    if not fused.belief.slot:
        return []
    return [
        a
        for a in slots.answers(reader, world, fused.belief.slot)
        if a != fused.belief.id
    ]


def with_rivals(reader: Reader, world: str, belief_ids: list[str]) -> list[str]:
    """``belief_ids`` and every rival answer of theirs, sorted."""
    found = set(belief_ids)
    seen_slots: set[str] = set()
    for belief_id in belief_ids:
        slot = slots.slot_of(reader, world, belief_id)
        if slot is not None and slot not in seen_slots:
            seen_slots.add(slot)
            found.update(slots.answers(reader, world, slot))
    return sorted(found)

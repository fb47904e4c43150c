"""``AssessSources`` applied: learn every source's reliability from this shard's
rival-answer slots (the estimate and its table: :mod:`.assess`), replace the learned
table, and re-read the beliefs whose sources' weight moved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from worldline.actors.belief_model import rivals
from worldline.actors.fusion import answers, posteriors, records, slots, sources
from worldline.actors.fusion import assess as learned
from worldline.actors.runtime.spec import Step

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Context, Reader
    from worldline.protocols.messages import AssessSources

__all__ = ["ASSESS_TAG", "assess", "heavy"]

ASSESS_TAG: Final = b"op.assess_sources.v1"  # AssessSources' tag, as encoded


def heavy(payload: bytes) -> bool:
    """Whether an op may take long to apply: an ``AssessSources`` is a pass over the
    whole world (the runtime then applies it in a worker thread). A false alarm (the
    tag quoted in some text) only costs a thread hop."""
    return ASSESS_TAG in payload


def assess(
    reader: Reader, op: AssessSources, ctx: Context, shard: tuple[int, int]
) -> Step:
    """Learn every source's reliability from this shard's rival-answer slots
    (:mod:`worldline.actors.fusion.assess`), replace the learned table, and re-read
    each belief a source whose weight changed bears on (with its rivals)."""
    clock = reader.get(slots.clock_key(ctx.world)) or b"0"
    if reader.get(slots.assessed_key(ctx.world)) == clock:
        return Step()  # no answer changed since the last assessment: nothing to learn
    claims: list[learned.Claim] = []
    for belief_id in slots.every_answer(reader, ctx.world):
        fused = records.load(reader, ctx.world, belief_id)
        if fused is not None and fused.belief.status == "active":
            # Answers written differently but saying the same (one key) are one
            # answer to learn from: stores that format a name differently agree.
            slot = fused.belief.slot
            key = rivals.answer_key(fused.belief.text, slot)
            claims += learned.claims_of(slot, key, fused.evidence)
    rows = learned.table(claims)
    before = {
        row.source: row.factor
        for _, raw in reader.scan(learned.learned_prefix(ctx.world))
        for row in (learned.decode(raw),)
    }
    step = Step(writes=learned.writes(reader, ctx.world, rows))
    step.writes[slots.assessed_key(ctx.world)] = clock
    moved = sorted(
        source
        for source in set(before) | set(rows)
        if before.get(source, 1.0) != (rows[source].factor if source in rows else 1.0)
    )
    touched = sorted(
        {b for source in moved for b in sources.bearing(reader, ctx.world, source)}
    )
    touched = answers.with_rivals(reader, ctx.world, touched)
    return posteriors.reemit(reader, ctx, step, touched, op.op_id, op.at, shard)

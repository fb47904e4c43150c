"""Publishing fusion's posteriors: a belief re-read at the op's time and sent with what
changed (the evidence its op added, not the whole list), and a batch of beliefs
re-read together (a slot's rivals, the beliefs a trust change or an assessment moved).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from worldline.actors.fusion import answers, records, sources
from worldline.actors.fusion.records import belief_key
from worldline.actors.runtime.memory import Overlay
from worldline.actors.runtime.spec import Outgoing, Step
from worldline.protocols.messages import PosteriorUpdate, encode
from worldline.protocols.subjects import derived

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime

    from worldline.actors.fusion.records import FusedBelief
    from worldline.actors.runtime.spec import Context, Reader
    from worldline.protocols.beliefs import Evidence

__all__ = ["BatchReader", "emit", "indexed", "reemit"]


def reemit(
    reader: Reader,
    ctx: Context,
    step: Step,
    belief_ids: list[str],
    cause: str,
    now: datetime,
    shard: tuple[int, int],
    *,
    always: bool = False,
) -> Step:
    """``step`` plus a posterior for each active belief of ``belief_ids`` (in order)
    whose reading at ``now`` changed (``always``: each one), seeing the writes
    ``step`` holds so far.

    The batch may be the whole world (an assessment): the world's trust and learned
    weights are read once, and slot answers from ``reader`` (a batch writes belief
    records only), so no read scans the growing pending writes."""
    if not belief_ids:
        return step  # the usual case: a belief that answers no slot
    overlay = Overlay(reader, step.writes)
    table = records.weights(overlay, ctx.world)
    view = BatchReader(overlay, reader)
    for belief_id in belief_ids:
        fused = records.load(overlay, ctx.world, belief_id)
        if fused is None or fused.belief.status != "active":
            continue
        more = emit(view, ctx, fused, cause, now, shard, table=table)
        emitted = fused.belief
        for out in more.out:
            if isinstance(out.message, PosteriorUpdate):
                emitted = out.message.belief
        # A moved clock is a change too: a rival is read at the latest ``at`` of
        # its slot's ops, whichever of them moved its reading (order-free).
        if (
            not always
            and emitted.updated_at == fused.belief.updated_at
            and not answers.readings_differ(fused.belief, emitted)
        ):
            continue
        step.writes.update(more.writes)
        step.out.extend(more.out)
    return step


class BatchReader:
    """Reads for a batch of re-reads: records from the pending writes, scans (the
    slot index) from the committed state, which the batch does not change."""

    def __init__(self, overlay: Overlay, committed: Reader) -> None:
        self.overlay = overlay
        self.committed = committed

    def get(self, key: bytes) -> bytes | None:
        return self.overlay.get(key)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.committed.scan(prefix)


def emit(
    reader: Reader,
    ctx: Context,
    fused: FusedBelief,
    cause: str,
    now: datetime,
    shard: tuple[int, int],
    *,
    added: Evidence | None = None,
    table: records.Weights | None = None,
    **changes: object,
) -> Step:
    """Re-read the belief at ``now`` and publish its posterior, with the evidence
    ``added`` by this op (as recorded), not the whole list: a trust change re-sends
    every belief its source bears on (issue 18).

    The belief's clock never runs back: it is read at the later of ``now`` and its
    last reading, so the ops that changed it, in whatever order they arrived, leave
    it read at the latest ``at`` among them (docs/belief-math.md, P8)."""
    old = fused.belief
    now = max(now, old.updated_at)
    reading, trust = answers.read(reader, ctx.world, fused, now, table)
    if changes.get("outcome") is not None:
        # Resolved true or false: keep the confidence it had just before, the
        # calibration record (docs/belief-math.md, "Calibration").
        changes["closed_confidence"] = reading.confidence
    belief = msgspec.structs.replace(
        old,
        confidence=reading.confidence,
        evidence_weight=reading.evidence_weight,
        uncertainty=reading.uncertainty,
        fragility=reading.fragility,
        flags=reading.flags,
        evidence_count=len(fused.evidence),
        updated_at=now,
        **changes,
    )
    fused = msgspec.structs.replace(fused, belief=belief)
    return Step(
        writes={belief_key(ctx.world, belief.id): encode(fused)},
        out=[
            Outgoing(
                subject=derived(ctx.world, "posterior", str(shard[0])),
                message=PosteriorUpdate(
                    belief=belief,
                    cause=cause,
                    cause_seq=ctx.seq,
                    trust=trust,
                    delta=True,
                    added=[]
                    if added is None
                    else [e for e in fused.evidence if e.id == added.id],
                ),
                msg_id=f"posterior:{ctx.world}:{belief.id}:{cause}",
            )
        ],
    )


def indexed(step: Step, ctx: Context, item: Evidence) -> Step:
    """``step`` with ``item`` recorded in the index by source."""
    step.writes.update(sources.index_writes(ctx.world, item.belief_id, [item]))
    return step

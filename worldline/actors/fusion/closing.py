"""Who may close a belief (``CloseBelief``): the shard that owns the belief decides,
by :func:`worldline.actors.belief_model.charter.close_refusal` and the declaration in
force (:mod:`.declared`), before it writes anything.

A refusal is a ``rejected`` verdict, code ``unauthorized``, which the materializer
keeps for ``op_status`` (the SDK raises ``Rejected``, the CLI exits 3); the belief,
its slot and its rivals stay as they were. The materializer never decides a close
itself: it applies the posterior fusion publishes for an accepted one, so live
stores, a replay and any split into shards agree on every close.

The belief's author is who added it: the author of its ``AddBelief``, or, for a
belief an extracted ``Statement`` created (whose op is the extractor's), the agent
that observed it, which is the author of the evidence item that statement recorded
(the item with the lowest ``recorded_seq``: the creating op is the belief's first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from worldline.actors.belief_model import charter
from worldline.actors.fusion import declared

if TYPE_CHECKING:
    from worldline.actors.fusion.records import FusedBelief
    from worldline.actors.runtime.spec import Context, Reader
    from worldline.protocols.messages import CloseBelief

__all__ = ["owner", "refusal"]

EXTRACTOR: Final = "extractor"  # the actor whose statements name the observing agent


def owner(fused: FusedBelief) -> str:
    """Who added ``fused``: its author, or for an extracted belief the agent that
    observed the statement that created it."""
    author = fused.belief.author
    if author != EXTRACTOR:
        return author
    reported = [e for e in fused.evidence if e.author]
    if not reported:
        return author  # pragma: no cover - a statement always records its item
    first = min(reported, key=lambda e: (e.recorded_seq, e.id))
    return first.author


def refusal(
    reader: Reader, op: CloseBelief, ctx: Context, fused: FusedBelief
) -> charter.Refused | None:
    """Why ``op`` may not close ``fused`` (code ``unauthorized``), or None."""
    reason = charter.close_refusal(
        declared.charter_of(reader, ctx.world).decl,
        op.author,
        owner(fused),
        how=op.how,
        belief_type=fused.belief.type,
    )
    if reason is None:
        return None
    return charter.Refused("unauthorized", f"belief {fused.belief.id}: {reason}")

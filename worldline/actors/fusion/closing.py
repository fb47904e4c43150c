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
from worldline.actors.belief_model.posterior import NO_PROBABILITY
from worldline.actors.fusion import declared

if TYPE_CHECKING:
    from worldline.actors.fusion.records import FusedBelief
    from worldline.actors.runtime.spec import Context, Reader
    from worldline.protocols.messages import CloseBelief

__all__ = ["mismatch", "owner", "refusal"]

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


def mismatch(op: CloseBelief, belief_type: str) -> str:
    """Why ``op`` cannot close a belief of ``belief_type`` ("" when it can): a gap is
    resolved (answered, with no outcome); a goal is retracted; a claim (assumption,
    risk, evidence) is retracted, or resolved with an outcome, true or false, which
    the calibration record keeps (docs/belief-math.md, "Calibration")."""
    if op.how == "retracted":
        if belief_type == "gap":
            return "a gap is resolved, not retracted (`worldline resolve ID`)"
        if op.outcome is not None:
            return "a retraction has no outcome; resolve it true or false instead"
        return ""
    if belief_type == "gap":
        if op.outcome is not None:
            return "a gap is answered, not true or false: resolve it with no outcome"
        return ""
    if belief_type in NO_PROBABILITY:
        return f"a {belief_type} carries no probability; retract it instead"
    if op.outcome is None:
        return (
            f"a {belief_type} is resolved true or false (`worldline resolve ID --true` "
            "or `--false`), or retracted"
        )
    return ""

"""``SetTrust`` applied: who may set it, and the beliefs it re-reads.

Authority (:func:`worldline.actors.belief_model.charter.trust_refusal`, by the
declaration in force, :mod:`.declared`): the operator and the world's admins may set
any trust, a ``[[trust.grants]]`` entry the names it lists, and every agent may lower
its own ``agent:<self>`` (never raise it, never lock it). A locked setting is changed
only by its author. A refusal is a ``rejected`` verdict (code ``unauthorized`` or
``locked``) from shard 0, which the writer reads through ``op_status``; the other
shards stay silent, and nothing is written anywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldline.actors.belief_model import charter
from worldline.actors.fusion import answers, declared, posteriors, records, sources
from worldline.actors.fusion.records import TrustSetting, trust_key
from worldline.actors.runtime.memory import Overlay
from worldline.actors.runtime.spec import Step
from worldline.protocols.messages import encode

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Context, Reader
    from worldline.protocols.messages import SetTrust

__all__ = ["set_trust"]


def _refusal(reader: Reader, op: SetTrust, ctx: Context) -> charter.Refused | None:
    key = trust_key(ctx.world, op.source)
    raw = reader.get(key)
    current = None if raw is None else records.decode_setting(raw)
    if current is not None and current.locked and current.author != op.author:
        return charter.Refused(
            "locked",
            f"trust for {op.source!r} is locked by {current.author}; only they "
            "may change it",
        )
    reason = charter.trust_refusal(
        declared.charter_of(reader, ctx.world).decl,
        op.author,
        op.source,
        op.trust,
        lock=op.lock,
        current=1.0 if current is None else current.trust,
    )
    return None if reason is None else charter.Refused("unauthorized", reason)


def set_trust(
    reader: Reader, op: SetTrust, ctx: Context, shard: tuple[int, int]
) -> Step:
    """Store the setting and re-read what it moves.

    Raises:
        charter.Refused: ``locked`` or ``unauthorized`` (in shard 0; the others
            return an empty step).
    """
    refused = _refusal(reader, op, ctx)
    if refused is not None:
        if shard[0] != 0:
            return Step()  # one shard reports the refusal
        raise refused
    key = trust_key(ctx.world, op.source)
    setting = TrustSetting(trust=op.trust, locked=op.lock, author=op.author)
    step = Step(writes={key: encode(setting)})
    # Re-read every belief of this shard that the source (or agent) contributed to:
    # the index by source names them, so the cost is theirs, not the world's.
    overlay = Overlay(reader, step.writes)
    table = records.weights(overlay, ctx.world)  # read once for the whole burst
    view = posteriors.BatchReader(overlay, reader)
    bearing = sources.bearing(reader, ctx.world, op.source)
    for belief_id in bearing:
        fused = records.load(reader, ctx.world, belief_id)
        if fused is None:
            continue  # pragma: no cover - the index is written with the belief
        if any(op.source in sources.names(e) for e in fused.evidence):
            more = posteriors.emit(
                view, ctx, fused, op.op_id, op.at, shard, table=table
            )
            step.writes.update(more.writes)
            step.out.extend(more.out)
    # The source's answers also weigh against their rivals, which it never cited.
    others = sorted(set(answers.with_rivals(reader, ctx.world, bearing)) - set(bearing))
    return posteriors.reemit(reader, ctx, step, others, op.op_id, op.at, shard)

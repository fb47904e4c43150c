"""Materializer core: the single writer of a world's state. Pure and synchronous.

Applies derived posteriors to the canonical belief state, numbering every change with
the world's sequence (the belief's ``version``), and announces each change on the STATE
feed.

State keys: ``belief/<world>/<id>`` -> ``Belief``; ``seq/<world>`` -> last change
number. Output: ``BeliefChanged`` on ``wl.<world>.state.belief``.
"""

from __future__ import annotations

import msgspec

from actors.runtime.spec import Context, Outgoing, Reader, Step
from protocols.messages import Belief, BeliefChanged, PosteriorUpdate, encode
from protocols.subjects import state

__all__ = ["belief_key", "handle", "seq_key"]

_BELIEF = msgspec.msgpack.Decoder(Belief)


def belief_key(world: str, belief_id: str) -> bytes:
    return f"belief/{world}/{belief_id}".encode()


def seq_key(world: str) -> bytes:
    return f"seq/{world}".encode()


def handle(reader: Reader, update: PosteriorUpdate, ctx: Context) -> Step:
    """Apply one posterior; an update that changes nothing is suppressed."""
    key = belief_key(ctx.world, update.belief.id)
    stored = reader.get(key)
    if stored is not None:
        current = _BELIEF.decode(stored)
        if msgspec.structs.replace(current, version=0) == update.belief:
            return Step()  # a re-delivered posterior: nothing changed
    raw_seq = reader.get(seq_key(ctx.world))
    seq = (0 if raw_seq is None else int(raw_seq)) + 1
    belief = msgspec.structs.replace(update.belief, version=seq)
    return Step(
        writes={key: encode(belief), seq_key(ctx.world): str(seq).encode()},
        out=[
            Outgoing(
                subject=state(ctx.world, "belief"),
                message=BeliefChanged(belief=belief),
                msg_id=f"state:{ctx.world}:{seq}",
            )
        ],
    )

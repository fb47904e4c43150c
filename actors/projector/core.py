"""Projector core: a read replica of the world, and the answers served from it.

Keeps the newest version of every belief from the STATE change feed and answers ``get``
and ``list``. It selects and orders; it computes no new math.

State keys: ``belief/<world>/<id>`` -> ``Belief`` (newest ``version`` wins).
"""

from __future__ import annotations

import msgspec

from actors.projector import views
from actors.runtime.spec import Context, Reader, Step
from protocols.messages import (
    Belief,
    BeliefChanged,
    BeliefListReply,
    BeliefReply,
    GetBelief,
    GetView,
    ListBeliefs,
    Message,
    ProjectorInbox,
    ProjectorRpc,
    ReadWorld,
    ViewReply,
    encode,
)

__all__ = ["belief_key", "handle", "prefix", "serve"]

_BELIEF = msgspec.msgpack.Decoder(Belief)


def belief_key(world: str, belief_id: str) -> bytes:
    return f"belief/{world}/{belief_id}".encode()


def prefix(world: str) -> bytes:
    return f"belief/{world}/".encode()


def handle(reader: Reader, change: ProjectorInbox, ctx: Context) -> Step:
    """Keep the change in the replica (beliefs here; the crew world in ``views``)."""
    if not isinstance(change, BeliefChanged):
        return views.apply_change(reader, change, ctx)
    key = belief_key(ctx.world, change.belief.id)
    stored = reader.get(key)
    if stored is not None and _BELIEF.decode(stored).version >= change.belief.version:
        return Step()
    return Step(writes={key: encode(change.belief)})


def serve(reader: Reader, request: ProjectorRpc, world: str) -> Message:
    """Answer a request from the replica."""
    match request:
        case ReadWorld(entity_type=entity_type):
            return views.read_world(reader, world, entity_type)
        case GetView(agent=agent):
            return ViewReply(
                view=views.build_view(reader, world, agent),
                version=views.replica_version(reader, world),
            )
        case GetBelief(belief_id=belief_id):
            raw = reader.get(belief_key(world, belief_id))
            return BeliefReply(belief=None if raw is None else _BELIEF.decode(raw))
        case ListBeliefs(type=wanted, limit=limit):
            beliefs = [_BELIEF.decode(raw) for _, raw in reader.scan(prefix(world))]
            if wanted is not None:
                beliefs = [b for b in beliefs if b.type == wanted]
            beliefs.sort(key=lambda b: (b.created_at, b.id))
            return BeliefListReply(beliefs=tuple(beliefs[:limit]), total=len(beliefs))

"""Simulator core: holds real transitions for a world and reports what it holds.

This is the skeleton the grounded simulator grows on: it accepts only real
action -> observation transitions (never predictions) and counts them per world.

State keys: ``transition/<world>/<id>`` -> ``Transition``; ``count/<world>`` -> int.
"""

from __future__ import annotations

from worldline.actors.runtime.spec import Context, Reader, Step
from worldline.protocols.messages import (
    Message,
    SimStatus,
    SimStatusReply,
    Transition,
    encode,
)

__all__ = ["count_key", "handle", "serve", "transition_key"]


def transition_key(world: str, transition_id: str) -> bytes:
    return f"transition/{world}/{transition_id}".encode()


def count_key(world: str) -> bytes:
    return f"count/{world}".encode()


def _count(reader: Reader, world: str) -> int:
    raw = reader.get(count_key(world))
    return 0 if raw is None else int(raw)


def handle(reader: Reader, transition: Transition, ctx: Context) -> Step:
    """Keep a transition once (its id is content-derived, so a repeat is a no-op)."""
    key = transition_key(ctx.world, transition.id)
    if reader.get(key) is not None:
        return Step()
    count = _count(reader, ctx.world) + 1
    return Step(
        writes={key: encode(transition), count_key(ctx.world): str(count).encode()}
    )


def serve(reader: Reader, request: SimStatus, world: str) -> Message:
    """Report how many transitions the simulator holds for ``world``."""
    return SimStatusReply(transitions=_count(reader, world))

"""Fusion's rival-answer slots: which beliefs answer the same question.

Keys (every variable part bounded by :func:`worldline.actors.runtime.keys.key_part`,
``/`` escaped as in :mod:`worldline.actors.fusion.sources`):

- ``slot/<world>/<slot>/<belief id>`` -> the belief id: the slot's answers, in the
  store of the shard that owns the slot (``shard_of(slot)``), written when the belief
  is added;
- ``slotclock/<world>`` -> the OPS sequence of the last change to a slot answer this
  shard owns, and ``assessed/<world>`` -> that sequence as the last assessment found it
  (an assessment with nothing new to learn from changes nothing);
- ``member/<world>/<belief id>`` -> the slot, in EVERY shard: fusion's shards each read
  every op, so each can route a later op on that belief (evidence, a close) to the
  shard holding its rivals, although the op names only the belief.

A belief with a slot is owned by the slot's shard, not its own id's, so a slot's answers
are always read together. The math is :mod:`worldline.actors.belief_model.rivals`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final

from worldline.actors.runtime.keys import key_part

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Reader

__all__ = [
    "answers",
    "assessed_key",
    "changed",
    "clock_key",
    "every_answer",
    "member_key",
    "route",
    "slot_key",
    "slot_of",
    "slot_prefix",
]

WORLD_BYTES: Final = 64
SLOT_BYTES: Final = 200
ID_BYTES: Final = 128


def _escaped(text: str) -> str:
    return text.replace("%", "%25").replace("/", "%2F")


@functools.lru_cache(maxsize=256)
def _w(world: str) -> str:
    return key_part(_escaped(world), WORLD_BYTES)


def slot_prefix(world: str, slot: str) -> bytes:
    return f"slot/{_w(world)}/{key_part(_escaped(slot), SLOT_BYTES)}/".encode()


def slot_key(world: str, slot: str, belief_id: str) -> bytes:
    return slot_prefix(world, slot) + key_part(belief_id, ID_BYTES).encode()


def member_key(world: str, belief_id: str) -> bytes:
    return f"member/{_w(world)}/{key_part(belief_id, ID_BYTES)}".encode()


def clock_key(world: str) -> bytes:
    """Where the OPS sequence of the last change to any slot answer is kept."""
    return f"slotclock/{_w(world)}".encode()


def assessed_key(world: str) -> bytes:
    """Where that sequence is kept as the last assessment found it."""
    return f"assessed/{_w(world)}".encode()


def changed(world: str, seq: int) -> dict[bytes, bytes | None]:
    """The write that records a change to a slot answer at OPS sequence ``seq``."""
    return {clock_key(world): str(seq).encode()}


def slot_of(reader: Reader, world: str, belief_id: str) -> str | None:
    """The slot ``belief_id`` answers, if it was added with one."""
    raw = reader.get(member_key(world, belief_id))
    return None if raw is None else raw.decode()


def route(reader: Reader, world: str, belief_id: str) -> str:
    """What an op on ``belief_id`` is sharded by: its slot if any, else its id."""
    return slot_of(reader, world, belief_id) or belief_id


def every_answer(reader: Reader, world: str) -> list[str]:
    """The ids of every slot answer of ``world`` held in this store, sorted."""
    return sorted(
        {raw.decode() for _, raw in reader.scan(f"slot/{_w(world)}/".encode())}
    )


def answers(reader: Reader, world: str, slot: str) -> list[str]:
    """The ids of the slot's answers held in this store, sorted."""
    return sorted(raw.decode() for _, raw in reader.scan(slot_prefix(world, slot)))

"""One op's working set, :class:`Tx`: reads see the op's own earlier writes; it
gathers the op's writes, its inbox posts and the entities it touched, and
:meth:`Tx.step` turns them into the runtime's ``Step`` with the change feed (entities,
inbox counts, then ``OpApplied``, which closes the op). Also :func:`require` (an
entity the op needs must exist) and :func:`digest` (deterministic ids for the
messages an op causes).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import msgspec

from worldline.actors.materializer.core import last_change_key
from worldline.actors.materializer.inboxes import RECENT, InboxRecord, InboxSummary
from worldline.actors.materializer.keys import entity_key, inbox_key, summary_key
from worldline.actors.materializer.reject import Reject
from worldline.actors.runtime.memory import Overlay
from worldline.actors.runtime.spec import Context, Outgoing, Reader, Step
from worldline.protocols.messages import (
    EntityChanged,
    InboxChanged,
    OpApplied,
    encode,
)
from worldline.protocols.subjects import inbox, state
from worldline.protocols.world import Edge, Entity

if TYPE_CHECKING:
    from worldline.protocols.messages import InboxMessage

__all__ = ["Tx", "digest", "require"]

_ENTITY = msgspec.msgpack.Decoder(Entity)
_EDGE = msgspec.msgpack.Decoder(Edge)
_SUMMARY = msgspec.msgpack.Decoder(InboxSummary)


def digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


class Tx(Overlay):
    """The op's working set: reads see the op's own earlier writes."""

    def __init__(self, reader: Reader, ctx: Context) -> None:
        super().__init__(reader, {})
        self.ctx = ctx
        self.world = ctx.world
        self.out: list[Outgoing] = []
        self.touched: dict[str, Entity] = {}
        self.inboxes: set[str] = set()
        # Each summary this op wrote, decoded: (its bytes, it). An op that fans out
        # to hundreds of agents reads each one back in step(); decoding what it has
        # just encoded again was a fifth of the fan-out's cost.
        self._summaries: dict[str, tuple[bytes, InboxSummary]] = {}

    def put(self, key: bytes, value: bytes | None) -> None:
        self.writes[key] = value

    def entity(self, ref: str) -> Entity | None:
        raw = self.get(entity_key(self.world, ref))
        return None if raw is None else _ENTITY.decode(raw)

    def save(self, entity: Entity) -> None:
        self.put(entity_key(self.world, entity.id), encode(entity))
        self.touched[entity.id] = entity

    def edges(self) -> list[Edge]:
        return [_EDGE.decode(v) for _, v in self.scan(f"edge/{self.world}/".encode())]

    def post(
        self, agent: str, message: InboxMessage, line: str, key: bytes | None = None
    ) -> None:
        """Deliver to ``agent``'s durable inbox and record it as pending (``key``:
        the message's :func:`inbox_key`, when the caller has it)."""
        world = self.world
        writes = self.writes
        if key is None:
            key = inbox_key(world, agent, message.id)
        writes[key] = encode(InboxRecord(id=message.id, line=line))
        key = summary_key(world, agent)
        summary = self.summary(agent, key)
        summary = InboxSummary(
            pending=summary.pending + 1, recent=[*summary.recent, line][-RECENT:]
        )
        raw = writes[key] = encode(summary)
        self._summaries[agent] = (raw, summary)
        self.inboxes.add(agent)
        self.out.append(Outgoing(inbox(world, agent), message, message.id))

    def summary(self, agent: str, key: bytes | None = None) -> InboxSummary:
        """``agent``'s inbox summary as this op leaves it so far."""
        raw = self.get(summary_key(self.world, agent) if key is None else key)
        held = self._summaries.get(agent)
        if held is not None and held[0] is raw:  # the bytes post() wrote last
            return held[1]
        return InboxSummary() if raw is None else _SUMMARY.decode(raw)

    def step(self) -> Step:
        """The op's writes plus the change feed for everything it touched."""
        seq = self.ctx.seq
        for ref, entity in sorted(self.touched.items()):
            self.out.append(
                Outgoing(
                    state(self.world, "entity"),
                    EntityChanged(entity=entity),
                    f"state:{self.world}:entity:{ref}:{seq}",
                )
            )
        for agent in sorted(self.inboxes):
            summary = self.summary(agent)
            self.out.append(
                Outgoing(
                    state(self.world, "inbox"),
                    InboxChanged(
                        agent=agent,
                        pending=summary.pending,
                        recent=summary.recent,
                        seq=seq,
                    ),
                    f"state:{self.world}:inbox:{agent}:{seq}",
                )
            )
        if self.out:
            self.put(last_change_key(self.world), str(seq).encode())
            # Last on the feed for this op: a replica that saw it holds all of it.
            self.out.append(
                Outgoing(
                    state(self.world, "op"),
                    OpApplied(seq=seq),
                    f"state:{self.world}:op:{seq}",
                )
            )
        return Step(writes=self.writes, out=self.out)


def require(tx: Tx, ref: str) -> Entity:
    entity = tx.entity(ref)
    if entity is None:
        raise Reject("unknown_entity", f"no entity {ref} in world {tx.world!r}")
    return entity

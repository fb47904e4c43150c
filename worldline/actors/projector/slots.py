"""The projector's view of rival-answer slots: which beliefs answer one question, so a
read at another clock weighs each answer against its rivals exactly as fusion does
(:mod:`worldline.actors.belief_model.rivals`; docs/belief-math.md, "Rival answers").

Key ``pslot/<world>/<slot>/<belief id>`` -> the belief id, written when a belief with a
slot is applied (every part bounded by :func:`worldline.actors.runtime.keys.key_part`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.belief_model import posterior, rivals
from worldline.actors.runtime.keys import key_part
from worldline.protocols.messages import BeliefChanged

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from datetime import datetime

    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.beliefs import Evidence
    from worldline.protocols.messages import Belief

__all__ = ["index_writes", "read", "rival_records"]

WORLD_BYTES: Final = 64
SLOT_BYTES: Final = 200
ID_BYTES: Final = 128
_RECORD = msgspec.msgpack.Decoder(BeliefChanged)


def _escaped(text: str) -> str:
    return text.replace("%", "%25").replace("/", "%2F")


def _prefix(world: str, slot: str) -> bytes:
    w = key_part(_escaped(world), WORLD_BYTES)
    return f"pslot/{w}/{key_part(_escaped(slot), SLOT_BYTES)}/".encode()


def index_writes(world: str, belief: Belief) -> dict[bytes, bytes | None]:
    """The slot index entry of ``belief`` (none without a slot)."""
    if not belief.slot:
        return {}
    key = _prefix(world, belief.slot) + key_part(belief.id, ID_BYTES).encode()
    return {key: belief.id.encode()}


def rival_records(
    reader: Reader, world: str, belief: Belief, record_key: Callable[[str], bytes]
) -> list[BeliefChanged]:
    """The stored records of ``belief``'s rival answers, by id."""
    if not belief.slot:
        return []
    found = []
    for _, raw in reader.scan(_prefix(world, belief.slot)):
        rival_id = raw.decode()
        if rival_id == belief.id:
            continue
        held = reader.get(record_key(rival_id))
        if held is not None:
            found.append(_RECORD.decode(held))
    return sorted(found, key=lambda r: r.belief.id)


def read(
    record: BeliefChanged,
    evidence: Sequence[Evidence],
    others: Sequence[BeliefChanged],
    counts: Callable[[Evidence], bool],
    at: datetime,
    *,
    dated: bool,
) -> posterior.Reading:
    """``record``'s reading at ``at`` on ``evidence`` (what counts of its own), its
    rivals weighed in: those that held at ``at`` (``dated``) or are active now,
    each on its evidence that ``counts``."""
    belief = record.belief
    members = [rivals.Member(belief.id, belief.text, evidence)]
    trust = dict(record.trust)
    for other in others:
        held = (
            other.belief.valid_until is None or other.belief.valid_until > at
            if dated
            else other.belief.status == "active"
        )
        if not held or (dated and other.belief.created_at > at):
            continue
        members.append(
            rivals.Member(
                other.belief.id,
                other.belief.text,
                [e for e in other.evidence if counts(e)],
            )
        )
        for name, value in other.trust.items():
            trust.setdefault(name, value)
    return rivals.read(belief.id, belief.prior, members, trust, at, belief.slot)

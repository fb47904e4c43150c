"""Fusion's records: how a belief and a trust setting are kept, keyed and read back,
and the trust multipliers that apply to a belief's evidence (declared trust times
learned reliability).

Keys: ``belief/<world>/<id>`` -> :class:`FusedBelief`; ``trust/<world>/<source>`` ->
:class:`TrustSetting`; ``learned/<world>/<source>`` (:mod:`.assess`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.fusion import assess
from worldline.actors.runtime.keys import key_part
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import Belief

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Reader

__all__ = [
    "FusedBelief",
    "TrustSetting",
    "Weights",
    "belief_key",
    "decode_fused",
    "decode_trust",
    "load",
    "trust_key",
    "trust_of",
    "trust_prefix",
    "weights",
]

# 6 + 64 (a world is a token) + 1 + 400 = 471 bytes a trust key at most; any source
# that fits (every one written before keys were bounded, but the longest) is kept whole.
TRUST_SOURCE_BYTES: Final = 400


class FusedBelief(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="fusion.belief.v2"
):
    """Fusion's record of a belief: the stated prior and every piece of evidence."""

    belief: Belief
    op_id: str  # the op that created it (a replay of that op is a no-op)
    evidence: list[Evidence] = msgspec.field(default_factory=list)  # sorted by id
    negated: bool = False  # its text is a negation: statements flip against it


class TrustSetting(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="fusion.trust.v1"
):
    """A trust multiplier for one source (or ``agent:<name>``)."""

    trust: float
    locked: bool = False
    author: str = ""


_FUSED = msgspec.msgpack.Decoder(FusedBelief)
_TRUST = msgspec.msgpack.Decoder(TrustSetting)


def decode_fused(raw: bytes) -> FusedBelief:
    """A stored :class:`FusedBelief`."""
    return _FUSED.decode(raw)


def belief_key(world: str, belief_id: str) -> bytes:
    return f"belief/{world}/{belief_id}".encode()


def trust_key(world: str, source: str) -> bytes:
    """Where ``source``'s trust setting is kept: bounded whatever the source (a
    source name of 256 characters may take 1,024 bytes; LMDB refuses keys over 511)."""
    return f"trust/{world}/{key_part(source, TRUST_SOURCE_BYTES)}".encode()


@functools.lru_cache(maxsize=256)
def trust_prefix(world: str) -> bytes:
    """The prefix of every trust setting of ``world``."""
    return trust_key(world, "")


def decode_setting(raw: bytes) -> TrustSetting:
    return _TRUST.decode(raw)


def decode_trust(world: str, key: bytes, raw: bytes) -> tuple[str, TrustSetting]:
    """(source, setting) of a stored trust setting (a source over
    ``TRUST_SOURCE_BYTES`` reads back as its bounded key part)."""
    return key[len(trust_prefix(world)) :].decode(), _TRUST.decode(raw)


def load(reader: Reader, world: str, belief_id: str) -> FusedBelief | None:
    raw = reader.get(belief_key(world, belief_id))
    return None if raw is None else _FUSED.decode(raw)


class Weights(msgspec.Struct, frozen=True):
    """A world's declared trust settings and learned factors, read once for a batch
    of re-reads (by store key: :func:`trust_key`, :func:`.assess.learned_key`)."""

    declared: dict[bytes, TrustSetting]
    learned: dict[bytes, float]


def weights(reader: Reader, world: str) -> Weights:
    """Every trust setting and learned factor of ``world``."""
    return Weights(
        declared={k: _TRUST.decode(v) for k, v in reader.scan(trust_prefix(world))},
        learned={
            k: assess.decode(v).factor
            for k, v in reader.scan(assess.learned_prefix(world))
        },
    )


def trust_of(
    reader: Reader,
    world: str,
    evidence: list[Evidence],
    table: Weights | None = None,
) -> dict[str, float]:
    """The trust multipliers that apply to ``evidence`` (only those != 1): each
    name's declared trust times its learned reliability (:mod:`.assess`), unless
    the declared setting is locked, which pins it. ``table``: the world's
    :func:`weights`, read once by a caller re-reading many beliefs."""
    if table is None:
        declared = next(reader.scan(trust_prefix(world)), None) is not None
        learned = next(reader.scan(assess.learned_prefix(world)), None) is not None
    else:
        declared, learned = bool(table.declared), bool(table.learned)
    if not (declared or learned):
        return {}  # the usual case: nothing set or learned in this world
    names = {e.source for e in evidence} | {f"agent:{e.author}" for e in evidence}
    found = {}
    for name in sorted(names):
        setting = _setting(reader, world, name, table) if declared else None
        factor = None
        if learned and not (setting is not None and setting.locked):
            factor = _learned(reader, world, name, table)
        if setting is None and factor is None:
            continue
        value = (1.0 if setting is None else setting.trust) * (
            1.0 if factor is None else factor
        )
        if setting is not None or value != 1.0:
            found[name] = value
    return found


def _setting(
    reader: Reader, world: str, name: str, table: Weights | None
) -> TrustSetting | None:
    key = trust_key(world, name)
    if table is not None:
        return table.declared.get(key)
    raw = reader.get(key)
    return None if raw is None else _TRUST.decode(raw)


def _learned(
    reader: Reader, world: str, name: str, table: Weights | None
) -> float | None:
    if table is not None:
        return table.learned.get(assess.learned_key(world, name))
    row = assess.learned(reader, world, name)
    return None if row is None else row.factor

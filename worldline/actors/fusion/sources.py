"""Fusion's index by source: which beliefs each source (and each ``agent:<author>``)
bears on, so a trust change re-reads those beliefs only, not the whole world.

Key ``bysrc/<world>/<source>/<belief id>`` -> the belief id (read back whole), one per
evidence item's ``source`` and one per its ``agent:<author>``, written as the evidence
is fused (:func:`index_writes`) and, for a store written before the index, by
:mod:`worldline.actors.fusion.upgrade`. Each variable part is bounded
(:func:`worldline.actors.runtime.keys.key_part`), and a ``/`` or ``%`` in a world or
source is escaped first, so one source's prefix never covers another source's keys
(``agent:a`` and ``agent:a/b`` stay apart). A shard's store indexes the beliefs that
shard owns, so a trust change in a shard reads only its own.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final

from worldline.actors.runtime.keys import key_part

if TYPE_CHECKING:
    from collections.abc import Iterable

    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.beliefs import Evidence

__all__ = [
    "PREFIX",
    "bearing",
    "index_key",
    "index_writes",
    "names",
    "source_prefix",
]

PREFIX: Final = b"bysrc/"
# Bytes a key part may take: 6 + 64 + 1 + 128 + 1 + 128 = 328 a key, under LMDB's 511.
WORLD_BYTES: Final = 64
SOURCE_BYTES: Final = 128
ID_BYTES: Final = 128


def _escaped(text: str) -> str:
    return text.replace("%", "%25").replace("/", "%2F")


def names(item: Evidence) -> tuple[str, str]:
    """The trust names ``item`` answers to: its source, and its author as an agent."""
    return item.source, f"agent:{item.author}"


@functools.lru_cache(maxsize=4096)
def source_prefix(world: str, source: str) -> bytes:
    """The prefix of every index key of ``source`` in ``world``."""
    w = key_part(_escaped(world), WORLD_BYTES)
    s = key_part(_escaped(source), SOURCE_BYTES)
    return f"bysrc/{w}/{s}/".encode()


def index_key(world: str, source: str, belief_id: str) -> bytes:
    return source_prefix(world, source) + key_part(belief_id, ID_BYTES).encode()


def index_writes(
    world: str, belief_id: str, evidence: Iterable[Evidence]
) -> dict[bytes, bytes | None]:
    """The index keys that record ``evidence`` of belief ``belief_id``."""
    value = belief_id.encode()
    return {
        index_key(world, name, belief_id): value
        for item in evidence
        for name in names(item)
    }


def bearing(reader: Reader, world: str, source: str) -> list[str]:
    """The ids of the beliefs ``source`` bears on in this store, sorted (the order
    the whole-world scan used, so outputs stay replay-identical)."""
    found = {raw.decode() for _, raw in reader.scan(source_prefix(world, source))}
    return sorted(found)

"""Brings a fusion store written before the index by source
(:mod:`worldline.actors.fusion.sources`) to the current format, at start-up, before
fusion consumes.

The first step also moves a trust setting whose key is longer than
:func:`worldline.actors.fusion.core.trust_key` now writes (a source over 400 bytes)
to its bounded key. Each step indexes the evidence of the next beliefs in key order
(at most :data:`CHUNK` index keys a transaction, whole beliefs) and records the last
belief key done under :data:`CURSOR_KEY`; the last step records :data:`FORMAT` and
drops the cursor. A crash in between resumes after the cursor (index writes repeat
harmlessly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from worldline.actors.fusion import core, sources

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Reader

__all__ = ["CHUNK", "CURSOR_KEY", "FORMAT", "FORMAT_KEY", "upgrade"]

FORMAT_KEY: Final = b"format/fusion-index"
FORMAT: Final = b"bysrc-v1"
CURSOR_KEY: Final = b"format/fusion-index-cursor"
CHUNK: Final = 20_000  # index keys written per transaction (whole beliefs)


def upgrade(reader: Reader) -> dict[bytes, bytes | None] | None:
    """The next chunk of the upgrade, or None when the store is current (see
    :data:`worldline.actors.runtime.spec.Upgrade`)."""
    if reader.get(FORMAT_KEY) == FORMAT:
        return None
    cursor = reader.get(CURSOR_KEY) or b""
    writes: dict[bytes, bytes | None] = {}
    if not cursor:  # the first step: trust keys too long for LMDB's bound
        for key, raw in reader.scan(b"trust/"):
            world, source = key.decode().split("/", 2)[1:]
            bounded = core.trust_key(world, source)
            if bounded != key:
                writes[key] = None
                writes[bounded] = raw
    for key, raw in reader.scan(b"belief/"):
        if key <= cursor:
            continue
        fused = core.decode_fused(raw)
        world = key.decode().split("/", 2)[1]
        writes.update(sources.index_writes(world, fused.belief.id, fused.evidence))
        if len(writes) >= CHUNK:
            writes[CURSOR_KEY] = key
            return writes
    writes[FORMAT_KEY] = FORMAT
    writes[CURSOR_KEY] = None
    return writes

"""Bounded parts of LMDB keys, for every actor that puts text in a key.

LMDB refuses a key over 511 bytes (``MDB_BAD_VALSIZE``), and one such key once made
the projector retry a batch forever. A variable part (a world, a stem, a belief id, a
source) longer than its budget is written as a readable prefix, a space and a digest
of the whole (:func:`key_part`); a space occurs in no world, stem or id, so a
shortened part never equals a written-out one.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["DIGEST_HEX", "key_part"]

DIGEST_HEX: Final = 16  # hex digits of sha256 kept in a shortened part


def key_part(text: str, budget: int) -> str:
    """``text`` as one part of an index key: itself when it fits ``budget`` bytes,
    else a readable prefix, a space and a digest of the whole (``budget`` bytes at
    most; same text, same part)."""
    if len(text) * 4 <= budget:  # fits whatever it holds (UTF-8: 4 bytes at most)
        return text
    raw = text.encode()
    if len(raw) <= budget:
        return text
    digest = hashlib.sha256(raw).hexdigest()[:DIGEST_HEX]
    room = max(budget - DIGEST_HEX - 1, 0)
    prefix = raw[:room].decode(errors="ignore").replace("/", "_")
    return f"{prefix} {digest}"

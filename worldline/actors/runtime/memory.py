"""An in-memory state for pure-core tests and offline replay: a dict behind
``Reader``."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from collections.abc import Iterator

    from worldline.actors.runtime.spec import Context, Input, Outgoing, Reader, Step

__all__ = ["MemoryState", "Overlay", "state_hash"]


class Overlay:
    """A :class:`Reader` over another reader plus pending writes (None deletes): how
    the state will read once the writes commit. Cores use it to see their own writes
    while they are still building a :class:`Step`."""

    def __init__(self, reader: Reader, writes: dict[bytes, bytes | None]) -> None:
        self.reader = reader
        self.writes = writes

    def get(self, key: bytes) -> bytes | None:
        if key in self.writes:
            return self.writes[key]
        return self.reader.get(key)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        # A merge as the caller reads on, not the whole prefix read up front: a
        # reader that stops after an index's first few keys must not pay for every
        # key under the prefix (the projector's views read top-N ranks).
        pending = sorted(
            ((k, v) for k, v in self.writes.items() if k.startswith(prefix)),
            key=lambda item: item[0],
        )
        i = 0
        for key, stored in self.reader.scan(prefix):
            value: bytes | None = stored
            while i < len(pending) and pending[i][0] <= key:
                held, new = pending[i]
                i += 1
                if held == key:
                    value = new
                elif new is not None:
                    yield held, new
            if value is not None:
                yield key, value
        for held, new in pending[i:]:
            if new is not None:
                yield held, new


class MemoryState:
    """A sorted key/value state that applies a handler's :class:`Step` like LMDB
    does."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key in sorted(self.data):
            if key.startswith(prefix):
                yield key, self.data[key]

    def apply(self, step: Step) -> list[Outgoing]:
        """Apply the step's writes and return its outgoing messages."""
        for key, value in step.writes.items():
            if value is None:
                self.data.pop(key, None)
            else:
                self.data[key] = value
        return step.out

    def feed(self, inp: Input[Any], payload: bytes, ctx: Context) -> list[Outgoing]:
        """Decode ``payload`` with the input's decoder, handle it, apply the result."""
        message = inp.decoder.decode(payload)
        return self.apply(inp.handle(self, message, ctx))


def state_hash(reader: Reader, *, world: str | None = None) -> str:
    """A hex digest over every key and value, in key order: equal states, equal hash.

    With ``world``, only that world's keys count: keys are laid out as
    ``<kind>/<world>`` or ``<kind>/<world>/<rest>`` by every core.
    """
    digest = hashlib.sha256()
    for key, value in reader.scan(b""):
        if world is not None and key.split(b"/")[1:2] != [world.encode()]:
            continue
        digest.update(msgspec.msgpack.encode((key, value)))
    return digest.hexdigest()

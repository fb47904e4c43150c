"""How much room an actor's LMDB store has, and what to do when it runs out.

Room: the map (address space reserved; the file grows as needed) starts at
``WORLDLINE_LMDB_MAP_SIZE`` (bytes, or with a K/M/G/T suffix; default 8 GiB) or the
``map_size`` keyword, and doubles on ``MDB_MAP_FULL`` up to ``max_map_size``; the
batch is then retried in the same call. A full disk, or a map at its ceiling, raises
:class:`StoreFull` (the runtime retries it until there is room), and an environment
LMDB marked unusable after a failed write is reopened, so none of it needs a restart.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

import lmdb

from worldline.actors.runtime.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "DEFAULT_MAP_SIZE",
    "MAP_SIZE_ENV",
    "MAX_MAP_SIZE",
    "Gate",
    "configured_map_size",
    "no_room",
    "parse_size",
]

MAP_SIZE_ENV: Final = "WORLDLINE_LMDB_MAP_SIZE"
# Address space reserved, not disk used: LMDB grows the file as it fills.
DEFAULT_MAP_SIZE: Final = 8 << 30
MAX_MAP_SIZE: Final = 1 << 40  # the default ceiling the map doubles up to
_UNITS: Final = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE: Final = re.compile(r"\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*", re.IGNORECASE)
# errno values that mean "no room": retried until there is, never dead-lettered.
_NO_ROOM: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.ENOMEM})


def parse_size(text: str) -> int:
    """Bytes from ``"1048576"``, ``"512M"``, ``"8G"``, ``"8GiB"`` (powers of 1024).

    Raises:
        ValueError: not a positive size.
    """
    match = _SIZE.fullmatch(text)
    if match is None or int(match[1]) <= 0:
        raise ValueError(
            f"{MAP_SIZE_ENV}={text!r} is not a size: write bytes, or a number with "
            "K, M, G or T (powers of 1024), e.g. 8G"
        )
    return int(match[1]) * _UNITS[match[2].upper()]


@functools.cache
def configured_map_size() -> int:
    """The map size stores open with: ``WORLDLINE_LMDB_MAP_SIZE`` (read once per
    process), else 8 GiB.

    Raises:
        StoreError: the variable is set but is not a size.
    """
    raw = os.environ.get(MAP_SIZE_ENV, "").strip()
    if not raw:
        return DEFAULT_MAP_SIZE
    try:
        return parse_size(raw)
    except ValueError as exc:
        raise StoreError(str(exc)) from None


class Gate:
    """Counts this process's open transactions on one environment, so the map can
    be grown (or the environment reopened) only while none is open: LMDB requires it,
    and py-lmdb invalidates any transaction open in another thread when it happens."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._open = 0
        self._closed = False  # the environment is being replaced

    @contextmanager
    def txn(self) -> Iterator[None]:
        with self._cond:
            while self._closed:
                self._cond.wait()
            self._open += 1
        try:
            yield
        finally:
            with self._cond:
                self._open -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._closed:
                self._cond.wait()
            self._closed = True
            while self._open:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._closed = False
                self._cond.notify_all()


def no_room(exc: BaseException) -> bool:
    """Whether ``exc`` means the disk (or memory) is full: worth waiting for."""
    if isinstance(exc, lmdb.DiskError | lmdb.MemoryError | lmdb.ReadersFullError):
        return True
    if isinstance(exc, OSError):
        return exc.errno in _NO_ROOM
    # py-lmdb raises a plain Error for errno values it does not map (EDQUOT): the
    # code is its last argument, or only in its text.
    code = exc.args[-1] if exc.args else None
    if isinstance(code, int) and code in _NO_ROOM:
        return True
    text = str(exc)
    return any(os.strerror(n) in text for n in _NO_ROOM)

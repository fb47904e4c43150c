"""One process per data folder, and per actor store: an advisory ``flock`` on a file.

``worldline up`` locks ``<data>/worldline.lock``; every actor, in ``up`` or alone
(``worldline actor NAME``), locks ``<data>/actors/<instance>.lock`` before it opens
its store. A second process asking for a held lock is refused at once with a
:class:`FolderLocked` that names the folder, the holder's pid and NATS URL, and the
fix. The kernel drops the lock when its holder exits, however it exits (``kill -9``
included), so a crashed process never blocks the next one; the file itself stays
(deleting it would let a third process lock a different file of the same name).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from worldline.actors.runtime.errors import ActorError

if TYPE_CHECKING:
    from pathlib import Path
    from types import TracebackType

__all__ = ["FolderLock", "FolderLocked"]


class FolderLocked(ActorError):
    """Raised when another live process holds the lock of a data folder or of an
    actor's store (two processes on one store would apply the same log twice, and a
    second ``up`` would start a second server on the first one's streams)."""


class FolderLock:
    """An exclusive, non-blocking ``flock`` on ``path``, holding a line of JSON that
    says who holds it (pid, command, NATS URL, since when).

    Args:
        path: the lock file (its folder is created).
        what: what it guards, for the refusal (``data folder /x``).
        fix: what to do instead, for the refusal.
    """

    def __init__(self, path: Path, *, what: str, fix: str) -> None:
        self.path = path
        self.what = what
        self.fix = fix
        self._fd: int | None = None
        self._info: dict[str, Any] = {}

    def acquire(self, **info: Any) -> FolderLock:
        """Take the lock and record ``info`` (with this pid and the time) in it.

        Raises:
            FolderLocked: another process holds it.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(_read(fd))
            os.close(fd)
            raise FolderLocked(
                f"{self.what} is in use by {holder}; {self.fix} "
                f"(lock file: {self.path})"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._info = {
            "pid": os.getpid(),
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
            **info,
        }
        self._write()
        return self

    def update(self, **info: Any) -> None:
        """Add ``info`` (say, the URL once the server listens) to what the lock says."""
        self._info.update(info)
        self._write()

    def release(self) -> None:
        """Drop the lock (the file stays; see the module doc)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _write(self) -> None:
        if self._fd is None:
            return
        data = (json.dumps(self._info) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _read(fd: int) -> dict[str, Any]:
    try:
        value = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _describe(info: dict[str, Any]) -> str:
    """``worldline up (pid 123, nats://127.0.0.1:4222, since ...)``, or less."""
    details = [f"pid {info['pid']}" if "pid" in info else "another process"]
    if info.get("url"):
        details.append(str(info["url"]))
    if info.get("since"):
        details.append(f"since {info['since']}")
    command = str(info.get("command") or "a worldline process")
    return f"{command} ({', '.join(details)})"

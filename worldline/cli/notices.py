"""What ``worldline up`` tells the operator on stderr besides its stdout lines: who
can reach the embedded server, and what clients in other shells need to find it (a
log record each when logs are JSON)."""

from __future__ import annotations

import contextlib
import logging
import shlex
import sys
from typing import TYPE_CHECKING

from worldline.cli.common import default_data

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["discovery_hint", "notice", "reach"]


def notice(line: str, fmt: str | None) -> None:
    """A notice for the operator on stderr: a log record when logs are JSON (so
    every stderr line parses), else the line as it is."""
    from worldline.actors.runtime.logs import log_format

    if log_format(fmt) == "json":
        logging.getLogger("worldline.up").warning("%s", line)
    else:
        print(line, file=sys.stderr, flush=True)


def reach(config: Path | None) -> str:
    """Who can reach the embedded server ``up`` started (it binds 127.0.0.1); the
    URL itself is stdout's ``nats:`` line, said once."""
    if config is not None:
        return f"access: loopback only; clients authenticate as {config} says"
    return (
        "access: loopback only: every local process can act as any agent; "
        "see deploy/credentials.md for a secured server"
    )


def discovery_hint(data: Path, url: str) -> str:
    """What clients in another shell need to find this server: nothing when ``data``
    is the folder they read ``nats.url`` from (``$WORLDLINE_DATA``, else the
    default), else the variable to export."""
    with contextlib.suppress(OSError):
        if data.resolve() == default_data().resolve():
            return ""
    return (
        f"clients: export WORLDLINE_DATA={shlex.quote(str(data.resolve()))} (or "
        f"WORLDLINE_NATS={url}) so that clients in other shells find this server; "
        "they look in the default data folder otherwise"
    )

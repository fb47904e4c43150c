"""The one logging setup of every worldline process: time, level and actor on each line,
as text or as one JSON object per line.

``worldline up`` and ``worldline actor`` call :func:`setup_logging` once (the
``--log-format`` option, else ``WORLDLINE_LOG_FORMAT``, else text). Each actor's task
binds its instance name (:func:`bind_actor`, called by the consume loop's start), so a
line logged anywhere inside that actor (its consume loop, services, heartbeat, lease)
names it without the call site passing it; a line from outside any actor has none.

Text: ``2026-03-01T12:00:00.123Z INFO fusion worldline.actor: fusion: consuming``.
JSON: ``{"time": "2026-03-01T12:00:00.123Z", "level": "INFO", "actor": "fusion",
"logger": "worldline.actor", "message": "fusion: consuming"}`` plus ``"exc"`` (the
formatted traceback) when the record carries one.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from typing import TextIO

__all__ = [
    "FORMATS",
    "FORMAT_ENV",
    "JsonFormatter",
    "TextFormatter",
    "bind_actor",
    "log_format",
    "setup_logging",
]

FORMAT_ENV: Final = "WORLDLINE_LOG_FORMAT"
FORMATS: Final = ("text", "json")

_ACTOR: ContextVar[str] = ContextVar("worldline_log_actor", default="")


def bind_actor(name: str) -> None:
    """Name ``name`` as the actor of every record logged from the current task and the
    tasks it starts (a context variable: each actor's task has its own)."""
    _ACTOR.set(name)


def log_format(choice: str | None = None) -> str:
    """The format asked for: ``choice`` (the command-line option), else the
    environment's ``WORLDLINE_LOG_FORMAT``, else ``text``.

    Raises:
        ValueError: the value is neither ``text`` nor ``json``, naming where it came
            from and what to use instead.
    """
    source = "--log-format"
    if choice is None:
        choice, source = os.environ.get(FORMAT_ENV, "").strip(), FORMAT_ENV
    value = (choice or "text").strip().lower()
    if value not in FORMATS:
        raise ValueError(
            f"{source}={choice!r} is not a log format; use one of {', '.join(FORMATS)}"
        )
    return value


def _utc(created: float) -> str:
    at = datetime.fromtimestamp(created, UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


class _ActorFilter(logging.Filter):
    """Sets ``record.actor`` from the task that logged it (keeps one set upstream)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "actor", ""):
            record.actor = _ACTOR.get()
        return True


class TextFormatter(logging.Formatter):
    """``<UTC time> <LEVEL> <actor or -> <logger>: <message>`` (and the traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        actor = getattr(record, "actor", "") or "-"
        line = (
            f"{_utc(record.created)} {record.levelname} {actor} {record.name}: "
            f"{record.getMessage()}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines inside values escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": _utc(record.created),
            "level": record.levelname,
            "actor": getattr(record, "actor", ""),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class _Terse(logging.Formatter):
    """What a client verb prints (a warning for a person at a terminal)."""

    def __init__(self) -> None:
        super().__init__("worldline %(name)s: %(message)s")


_HANDLER_NAME: Final = "worldline"


def setup_logging(
    *,
    verbose: bool = False,
    fmt: str | None = None,
    actors: bool = True,
    stream: TextIO | None = None,
) -> logging.Handler | None:
    """Configure the root logger once for this process and return its handler.

    Args:
        verbose: DEBUG instead of INFO.
        fmt: ``text`` or ``json`` (None: ``WORLDLINE_LOG_FORMAT``, else text).
        actors: a process that runs actors (``up``, ``actor``): text lines carry time,
            level and actor. A client verb's text stays the terse
            ``worldline <logger>: <message>``; JSON is the same for both.
        stream: where lines go (default stderr).

    Calling it again replaces the handler it installed (no line is written twice).
    As with :func:`logging.basicConfig`, a root logger that already has handlers of
    someone else's (a test runner's, an embedding program's) is left alone, unless
    ``stream`` is given; None is returned then.

    Raises:
        ValueError: an unknown format (see :func:`log_format`).
    """
    chosen = log_format(fmt)
    # nats-py logs every reconnect attempt as an error; the runtime reports them.
    logging.getLogger("nats").setLevel(logging.CRITICAL)
    root = logging.getLogger()
    if stream is None and any(h.get_name() != _HANDLER_NAME for h in root.handlers):
        return None
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.addFilter(_ActorFilter())
    formatter: logging.Formatter
    if chosen == "json":
        formatter = JsonFormatter()
    elif actors:
        formatter = TextFormatter()
    else:
        formatter = _Terse()
    handler.setFormatter(formatter)
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    return handler

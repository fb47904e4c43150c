"""Where the bus is: the one rule the SDK (:func:`worldline.connect`), the blocking SDK
and the CLI share.

An explicit URL wins; else ``$WORLDLINE_NATS``; else the URL a local ``worldline up``
wrote in its data folder (``$WORLDLINE_DATA``, default ``~/.local/share/worldline``,
file ``nats.url``, removed again when ``up`` stops); else ``nats://127.0.0.1:4222``.

Who is speaking, when no agent is given (:func:`default_agent`, the same for
:func:`worldline.connect` and ``worldline --agent``): ``$WORLDLINE_AGENT``, else the
login name (characters a subject token may not hold become ``-``), else ``cli``.
"""

from __future__ import annotations

import getpass
import os
import re
from pathlib import Path

__all__ = [
    "AGENT_ENV",
    "DEFAULT_URL",
    "NATS_ENV",
    "URL_FILE",
    "bus_url",
    "default_agent",
    "default_data",
]

DEFAULT_URL = "nats://127.0.0.1:4222"
NATS_ENV = "WORLDLINE_NATS"
DATA_ENV = "WORLDLINE_DATA"
AGENT_ENV = "WORLDLINE_AGENT"
URL_FILE = "nats.url"  # written by `worldline up` in its data folder


def default_data() -> Path:
    """``$WORLDLINE_DATA``, else ``~/.local/share/worldline``."""
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else Path.home() / ".local" / "share" / "worldline"


def bus_url(url: str | None = None) -> str:
    """``url`` if given, else ``$WORLDLINE_NATS``, else the URL a local ``worldline
    up`` recorded, else :data:`DEFAULT_URL`."""
    if url:
        return url
    env = os.environ.get(NATS_ENV)
    if env:
        return env
    try:
        return (default_data() / URL_FILE).read_text().strip() or DEFAULT_URL
    except OSError:
        return DEFAULT_URL


def default_agent() -> str:
    """``$WORLDLINE_AGENT``, else the login name as a subject token, else ``cli``."""
    env = os.environ.get(AGENT_ENV)
    if env:
        return env
    try:
        user = re.sub(r"[^A-Za-z0-9_-]", "-", getpass.getuser())[:64]
    except (KeyError, OSError):
        user = ""
    return user or "cli"

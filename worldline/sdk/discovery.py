"""Where the bus is: the one rule the SDK (:func:`worldline.connect`), the blocking SDK
and the CLI share.

An explicit URL wins; else ``$WORLDLINE_NATS``; else the URL a local ``worldline up``
wrote in its data folder (``$WORLDLINE_DATA``, default ``~/.local/share/worldline``,
file ``nats.url``, removed again when ``up`` stops); else ``nats://127.0.0.1:4222``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_URL", "NATS_ENV", "URL_FILE", "bus_url", "default_data"]

DEFAULT_URL = "nats://127.0.0.1:4222"
NATS_ENV = "WORLDLINE_NATS"
DATA_ENV = "WORLDLINE_DATA"
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

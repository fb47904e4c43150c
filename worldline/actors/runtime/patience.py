"""An actor's first connect: wait for the server, for a bounded time.

:func:`worldline.actors.runtime.bus.connect` makes one attempt, which is right for a
command or the SDK (say at once that the bus is not there). An actor may be started
before its server (a compose file, a pod whose NATS is still scheduling, a server
restarting): :func:`connect_patiently` tries again while no server answers, backing
off from :data:`CONNECT_RETRY_FIRST` to :data:`CONNECT_RETRY_MAX` seconds, each failed
attempt logged with the time left, until ``wait`` seconds have passed in all
(:func:`connect_wait`: ``$WORLDLINE_CONNECT_WAIT``, which ``worldline up|actor
--connect-wait`` sets; default :data:`CONNECT_WAIT`). A server that refuses the
credentials (:class:`~worldline.actors.runtime.errors.CredentialsRefused`) is not
asked again. Once connected, the client reconnects by itself forever (``bus.py``).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Final

import anyio

from worldline.actors.runtime.bus import connect
from worldline.actors.runtime.errors import BusUnavailable, CredentialsRefused

if TYPE_CHECKING:
    from nats.aio.client import Client as NATS

__all__ = [
    "CONNECT_RETRY_FIRST",
    "CONNECT_RETRY_MAX",
    "CONNECT_WAIT",
    "CONNECT_WAIT_ENV",
    "connect_patiently",
    "connect_wait",
]

log = logging.getLogger("worldline.bus")

CONNECT_WAIT_ENV: Final = "WORLDLINE_CONNECT_WAIT"
CONNECT_WAIT: Final = 60.0  # seconds an actor's first connect keeps trying, default
CONNECT_RETRY_FIRST: Final = 0.5  # seconds before the second attempt; then doubled
CONNECT_RETRY_MAX: Final = 5.0  # at most this long between attempts (a log line each)


def connect_wait() -> float:
    """Seconds an actor's first connect keeps trying, from ``$WORLDLINE_CONNECT_WAIT``
    (default :data:`CONNECT_WAIT`; 0: one attempt).

    Raises:
        ValueError: the setting is not a number of seconds, 0 or more.
    """
    text = os.environ.get(CONNECT_WAIT_ENV, "").strip()
    if not text:
        return CONNECT_WAIT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise ValueError(
            f"{CONNECT_WAIT_ENV}={text!r} is not a number of seconds: use 0 (one "
            f"attempt) or more (default {CONNECT_WAIT:g})"
        )
    return value


async def connect_patiently(
    url: str, *, name: str, wait: float, **options: Any
) -> NATS:
    """:func:`~worldline.actors.runtime.bus.connect` (``options`` are its own), tried
    again while no server answers, for up to ``wait`` seconds in all.

    Raises:
        BusUnavailable: no server answered within ``wait`` seconds (the message names
            the URL, the attempts and ``--connect-wait``).
        CredentialsRefused: the server refused the credentials, at the first answer.
        CredentialsError: the credentials file is missing or holds no user key.
    """
    deadline = anyio.current_time() + wait
    delay, attempt = CONNECT_RETRY_FIRST, 0
    while True:
        attempt += 1
        try:
            return await connect(url, name=name, **options)
        except CredentialsRefused:
            raise
        except BusUnavailable as exc:
            left = deadline - anyio.current_time()
            if left <= 0:
                if wait <= 0:
                    raise
                raise BusUnavailable(
                    f"{exc} ({attempt} attempts in {wait:g}s; wait longer with "
                    f"--connect-wait SECONDS, env {CONNECT_WAIT_ENV})"
                ) from exc.__cause__
            pause = min(delay, left)
            cause = exc.__cause__
            reason = (str(cause) or type(cause).__name__) if cause else str(exc)
            log.warning(
                "%s: cannot reach NATS at %s (%s); attempt %d, again in %.1fs "
                "(giving up in %.0fs)",
                name,
                url,
                reason,
                attempt,
                pause,
                left,
            )
            await anyio.sleep(pause)
            delay = min(delay * 2, CONNECT_RETRY_MAX)

"""Errors the SDK raises, each mapped to one CLI exit code, and the one place that
translates nats-py's errors into them (:func:`bus_errors`).

Every error the SDK raises on purpose is a :class:`WorldlineError`, so ``except
WorldlineError`` catches them all; :class:`BusUnavailable` is also the runtime's
``worldline.protocols.errors.BusUnavailable`` (code catching that one still catches it).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

import nats.errors
import nats.js.errors

from worldline.protocols.errors import BusUnavailable as _RuntimeBusUnavailable

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "BadRequest",
    "BusRefused",
    "BusUnavailable",
    "NoWorldline",
    "NotApplied",
    "PermissionDenied",
    "Rejected",
    "ServerError",
    "SimulationError",
    "WorldlineError",
    "bus_errors",
    "no_worldline",
]


class WorldlineError(Exception):
    """Root of the SDK's own errors."""


class BadRequest(WorldlineError, ValueError):
    """The request is malformed (bad id, confidence out of range...); CLI exit 2."""


class PermissionDenied(WorldlineError, PermissionError):
    """The server refused these credentials the subject a request needs (a
    permissions violation): they belong to another agent, or to no agent of this
    world. CLI exit 2: the caller fixes it (its own credentials), not the world."""


class Rejected(WorldlineError):
    """The world refused the request and said why; CLI exit 3.

    ``code`` is one of ``unauthorized``, ``version_conflict``, ``invalid``,
    ``unknown_entity``, ``too_much_work`` (crew ops, refused by the materializer:
    the last for work one agent may not put on another yet), or ``unknown_belief``,
    ``closed``, ``conflict``, ``invalid``, ``locked``, ``full`` (belief ops, refused
    by fusion); for a version conflict, ``current_version`` and ``current_value`` say
    what the field holds now.
    """

    def __init__(
        self,
        reason: str,
        *,
        code: str = "rejected",
        current_version: int | None = None,
        current_value: object = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
        self.current_version = current_version
        self.current_value = current_value


class SimulationError(WorldlineError):
    """The simulator refused a start or a step, by stable ``name`` (a session limit,
    a rejected message, an unknown session...); CLI exit 3. ``similarity``: for
    ``no_grounding``, the nearest real transition's score (None if none)."""

    def __init__(
        self, name: str, message: str, similarity: float | None = None
    ) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message
        self.similarity = similarity


class ServerError(WorldlineError):
    """An actor failed while answering (a bug or its store), and said so; CLI exit 1.
    Not the caller's mistake: the actor's log has the details."""


class NotApplied(WorldlineError, TimeoutError):
    """The op was recorded but no actor applied it in time (are actors running?);
    CLI exit 4."""


class BusUnavailable(WorldlineError, _RuntimeBusUnavailable):
    """NATS cannot be reached, refused the connection, or does not answer; CLI
    exit 4."""


class NoWorldline(BusUnavailable):
    """The server answers but holds no worldline streams (a bare nats-server, or
    one whose streams were deleted); CLI exit 4."""


class BusRefused(BusUnavailable):
    """JetStream refused a request with an API error (insufficient storage after a
    full disk, a stream that is gone...); the message names it and the fix. CLI
    exit 4."""


# JetStream's error codes (nats-server's server/errors.json) that mean "no worldline
# here" rather than "something went wrong".
_STREAM_NOT_FOUND = 10059
_JETSTREAM_DISABLED = 10076
_INSUFFICIENT_RESOURCES = 10023
_STORE_FAILED = 10077  # "message store failed": the disk filled up under a write


def no_worldline(url: str, what: str = "") -> NoWorldline:
    """The error for a server without worldline's streams (or the one ``what``
    names)."""
    detail = f" ({what})" if what else ""
    return NoWorldline(
        f"no worldline streams on {url}{detail}: start `worldline up`, or run the "
        "actors against it (`worldline up --nats URL`, `worldline actor NAME`), or "
        "point --nats at the right server"
    )


@contextmanager
def bus_errors(url: str, action: str) -> Iterator[None]:
    """Translate the JetStream errors of ``action`` (``"publishing to wl.w.ops.ada"``)
    into the SDK's, each naming the cause and the fix.

    Raises:
        NoWorldline: no stream or bucket of worldline's answers (or no JetStream).
        BusRefused: any other JetStream API error (storage full, ...).
    """
    try:
        yield
    except nats.js.errors.NoStreamResponseError as exc:
        raise no_worldline(url, f"no stream for {action}") from exc
    except nats.js.errors.BucketNotFoundError as exc:
        raise no_worldline(url, f"no bucket for {action}") from exc
    except nats.js.errors.APIError as exc:
        code = exc.err_code or 0
        if code in (_STREAM_NOT_FOUND, _JETSTREAM_DISABLED):
            raise no_worldline(url, f"{action}: {exc.description}") from exc
        what = f"{exc.description or type(exc).__name__} (code {exc.code}, err {code})"
        if code in (_INSUFFICIENT_RESOURCES, _STORE_FAILED):
            raise BusRefused(
                f"the server at {url} refused {action}: {what}: its JetStream storage "
                "is full. Free disk space in its store folder (-sd, or "
                "`<data>/nats/jetstream` under `worldline up`) or raise its "
                "max_file_store, then retry"
            ) from exc
        raise BusRefused(
            f"JetStream at {url} refused {action}: {what}; check the server's log "
            "and `worldline status`, then retry"
        ) from exc
    except nats.errors.ConnectionClosedError as exc:
        raise BusUnavailable(
            f"the connection to {url} closed during {action}; retry once the server "
            "is back"
        ) from exc

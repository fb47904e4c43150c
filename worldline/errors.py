"""Errors the SDK raises, each mapped to one CLI exit code."""

from __future__ import annotations

from actors.runtime.errors import BusUnavailable

__all__ = [
    "BadRequest",
    "BusUnavailable",
    "NotApplied",
    "Rejected",
    "SimulationError",
    "WorldlineError",
]


class WorldlineError(Exception):
    """Root of the SDK's own errors."""


class BadRequest(WorldlineError, ValueError):
    """The request is malformed (bad id, confidence out of range...); CLI exit 2."""


class Rejected(WorldlineError):
    """The world refused the request and said why; CLI exit 3.

    ``code`` is one of ``unauthorized``, ``version_conflict``, ``invalid``,
    ``unknown_entity`` (or ``rejected`` for a dead-lettered belief op); for a version
    conflict, ``current_version`` and ``current_value`` say what the field holds now.
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
    a rejected message, an unknown session...); CLI exit 3."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


class NotApplied(WorldlineError, TimeoutError):
    """The op was recorded but no actor applied it in time (are actors running?);
    CLI exit 4."""

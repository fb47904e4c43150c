"""Errors the SDK raises, each mapped to one CLI exit code."""

from __future__ import annotations

from actors.runtime.errors import BusUnavailable

__all__ = ["BadRequest", "BusUnavailable", "NotApplied", "Rejected", "WorldlineError"]


class WorldlineError(Exception):
    """Root of the SDK's own errors."""


class BadRequest(WorldlineError, ValueError):
    """The request is malformed (bad id, confidence out of range...); CLI exit 2."""


class Rejected(WorldlineError):
    """The world refused the request and said why; CLI exit 3."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NotApplied(WorldlineError, TimeoutError):
    """The op was recorded but no actor applied it in time (are actors running?);
    CLI exit 4."""

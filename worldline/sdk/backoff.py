"""Polling pauses for the SDK's waits on the world (fusion's verdict, an item read
back): short at first, so a quick answer is seen at once, then growing, so many calls
in flight together do not flood the materializer with status requests."""

from __future__ import annotations

from typing import Final

import anyio

__all__ = ["Backoff"]

FIRST: Final = 0.02  # seconds before the second look
GROWTH: Final = 1.5
LONGEST: Final = 0.25


class Backoff:
    """Pauses of 20 ms, each half again as long as the last, at most 250 ms."""

    def __init__(self) -> None:
        self.delay = FIRST

    async def pause(self) -> None:
        """Sleep the current pause, and lengthen the next."""
        await anyio.sleep(self.delay)
        self.delay = min(self.delay * GROWTH, LONGEST)

    def reset(self) -> None:
        """Start again from the shortest pause."""
        self.delay = FIRST

"""Progress on stderr, drawn only when stderr is a terminal: a pipe or a log gets no
carriage returns and no bars (stdout stays the answer either way)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]

WIDTH = 20  # characters of the bar
EVERY = 0.1  # seconds between redraws


class Progress:
    """``Progress("export", total=None)``: call :meth:`advance` as work is done and
    :meth:`close` at the end. ``total`` None draws a count without a bar. Silent
    unless ``stream`` (stderr) is a terminal."""

    def __init__(
        self, label: str, total: int | None = None, *, stream: TextIO | None = None
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.stream = sys.stderr if stream is None else stream
        self.shown = self.stream.isatty()
        self._drawn = 0.0
        self._width = 0

    def advance(self, count: int = 1, note: str = "") -> None:
        self.done += count
        if self.shown and (time.monotonic() - self._drawn >= EVERY or note):
            self._draw(note)

    def _draw(self, note: str = "") -> None:
        self._drawn = time.monotonic()
        if self.total:
            filled = "#" * (WIDTH * min(self.done, self.total) // self.total)
            line = f"{self.label} [{filled:<{WIDTH}}] {self.done}/{self.total}"
        else:
            line = f"{self.label}: {self.done}"
        if note:
            line += f" {note}"
        self._width = max(self._width, len(line))
        self.stream.write(f"\r{line:<{self._width}}")
        self.stream.flush()

    def close(self) -> None:
        """Draw the last state and end the line (nothing when not a terminal)."""
        if self.shown:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()

"""Progress on stderr, drawn only when stderr is a terminal: a pipe or a log gets no
carriage returns and no bars (stdout stays the answer either way). Each draw shows the
rate so far and, with a known total, the time left at that rate (ETA); the last one
the time taken."""

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
        self._started = time.monotonic()

    def advance(self, count: int = 1, note: str = "") -> None:
        self.done += count
        if self.shown and (time.monotonic() - self._drawn >= EVERY or note):
            self._draw(note)

    def _draw(self, note: str = "", *, last: bool = False) -> None:
        self._drawn = time.monotonic()
        if self.total:
            filled = "#" * (WIDTH * min(self.done, self.total) // self.total)
            line = f"{self.label} [{filled:<{WIDTH}}] {self.done}/{self.total}"
        else:
            line = f"{self.label}: {self.done}"
        line += self._pace(last=last)
        if note:
            line += f" {note}"
        self._width = max(self._width, len(line))
        self.stream.write(f"\r{line:<{self._width}}")
        self.stream.flush()

    def _pace(self, *, last: bool) -> str:
        """The rate so far and, while a total is known and work remains, the time
        left at that rate (the last draw gives the time taken instead)."""
        elapsed = self._drawn - self._started
        if elapsed <= 0 or self.done <= 0:
            return ""
        rate = self.done / elapsed
        pace = f" {_amount(rate)}/s"
        if last:
            return pace + f" in {_duration(elapsed)}"
        if self.total and self.done < self.total:
            pace += f" ETA {_duration((self.total - self.done) / rate)}"
        return pace

    def close(self) -> None:
        """Draw the last state and end the line (nothing when not a terminal)."""
        if self.shown:
            self._draw(last=True)
            self.stream.write("\n")
            self.stream.flush()


def _amount(rate: float) -> str:
    """``8607.3`` -> ``8,607``; ``2.46`` -> ``2.5``."""
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.1f}"


def _duration(seconds: float) -> str:
    """``4.2`` -> ``4s``; ``75`` -> ``1m15s``; ``3725`` -> ``1h02m``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"

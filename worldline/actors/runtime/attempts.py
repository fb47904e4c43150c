"""What the consume loop does after a batch fails to commit: pure, so tests pin it.

A batch is applied in one LMDB transaction; when that fails, nothing of it was
committed, and nothing fetched after it may apply first (the applied sequence would
move past it, and the failed batch would then be skipped as already applied: lost).
So the loop retries the same batch, in place, until every delivery of it is committed
or dead-lettered, in stream order:

- No room (:class:`~worldline.actors.runtime.errors.StoreFull`: a full disk, the map at
  its ceiling): wait, backing off from :data:`BACKOFF_FIRST` to :data:`BACKOFF_MAX`
  seconds, and try the same part again, for as long as it takes. Never dead-lettered:
  the input is fine, the machine is full, and once there is room it applies, without
  a restart.
- Any other store error: wait :data:`FIRST_RETRY` seconds and try the whole batch
  once more (a passing fault). If it fails again, split it in halves and apply them
  in order, splitting a failing half again at once, down to single deliveries: the
  good ones commit, and one that fails on its own is dead-lettered with the store's
  reason (``unstorable: ...``) and the loop goes on. If even its dead letter cannot be
  committed, the store is broken for everything: wait and retry, as for no room.

:class:`BatchAttempts` holds that plan for one fetched batch; the loop asks it which
part to apply next (:meth:`~BatchAttempts.next`), with which deliveries to refuse
(:attr:`~BatchAttempts.refuse`), and reports each outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_MAX",
    "FIRST_RETRY",
    "BatchAttempts",
    "Outcome",
]

FIRST_RETRY: Final = 1.0  # seconds before a failed batch is tried once more, whole
BACKOFF_FIRST: Final = 0.5  # seconds before the first retry when there is no room
BACKOFF_MAX: Final = 10.0  # seconds between retries at most (under ack_wait, 30 s)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to do after a failure: wait ``wait`` seconds, then apply the next part;
    ``action`` says what changed, for the log."""

    wait: float
    action: str


@dataclass(slots=True)
class _Part:
    lo: int
    hi: int
    suspect: bool = False  # cut from a batch that failed twice: no second chance


@dataclass(slots=True)
class BatchAttempts:
    """The plan for applying one fetched batch (its deliveries' stream sequences,
    in order) until all of it is committed or dead-lettered."""

    seqs: list[int]
    # Stream sequence -> reason: dead-letter these instead of applying them.
    refuse: dict[int, str] = field(default_factory=dict)
    _parts: list[_Part] = field(default_factory=list)
    _retried: bool = False  # the head part had its second chance
    _backoff: float = BACKOFF_FIRST

    def __post_init__(self) -> None:
        if self.seqs:
            self._parts = [_Part(0, len(self.seqs))]

    def next(self) -> tuple[int, int] | None:
        """The part to apply now, as ``deliveries[lo:hi]``; None once all is done."""
        if not self._parts:
            return None
        head = self._parts[0]
        return head.lo, head.hi

    def committed(self) -> None:
        """The part :meth:`next` named committed: go on with the rest."""
        self._parts.pop(0)
        self._retried = False
        self._backoff = BACKOFF_FIRST

    def failed(self, reason: str, *, no_room: bool) -> Outcome:
        """The part :meth:`next` named failed to commit with ``reason``."""
        head = self._parts[0]
        first = self.seqs[head.lo]
        if no_room or (head.hi - head.lo == 1 and first in self.refuse):
            # No room, or not even a dead letter commits: nothing to split out.
            wait, self._backoff = self._backoff, min(self._backoff * 2, BACKOFF_MAX)
            return Outcome(wait, f"retrying in {wait:g}s")
        if not head.suspect and not self._retried:
            self._retried = True
            return Outcome(FIRST_RETRY, f"retrying once in {FIRST_RETRY:g}s")
        self._retried = False
        if head.hi - head.lo == 1:
            self.refuse[first] = f"unstorable: {reason}"
            return Outcome(0.0, f"dead-lettering stream sequence {first}")
        mid = (head.lo + head.hi) // 2
        self._parts[0:1] = [_Part(head.lo, mid, True), _Part(mid, head.hi, True)]
        last = self.seqs[head.hi - 1]
        return Outcome(0.0, f"splitting sequences {first}-{last} in halves")

"""Where a batch applies: on the event loop, or in a worker thread (:class:`Pace`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from collections.abc import Callable

    from worldline.actors.runtime.outbox import BatchResult

__all__ = ["INLINE_BUDGET", "Pace"]

# A batch expected to apply within this many seconds runs on the event loop; a longer
# one in a worker thread (see Pace).
INLINE_BUDGET = 0.05


class Pace:
    """How long each input's deliveries take to apply, to choose where a batch runs.

    On the event loop a batch costs no thread hop and no handoffs of the GIL between
    the loop and a worker (about a tenth of an actor's CPU at tens of thousands of
    ops a second), but nothing else on the loop runs meanwhile: reads, heartbeats,
    lease renewals and the other inputs wait. So only a batch expected to take at
    most :data:`INLINE_BUDGET` runs there, and only while no other input of the
    actor is applying in a worker thread (its write transaction would hold the
    store's write lock, and the loop would wait on it); slower batches, and an
    input's first, not yet measured, run in a worker thread. One per actor.
    """

    def __init__(self) -> None:
        self._per_item: dict[str, float] = {}  # seconds by input, smoothed
        self._threads = 0  # batches applying in worker threads now

    def inline(self, durable: str, items: int) -> bool:
        per_item = self._per_item.get(durable)
        return (
            self._threads == 0
            and per_item is not None
            and per_item * items <= INLINE_BUDGET
        )

    def note(self, durable: str, items: int, seconds: float) -> None:
        sample = seconds / max(items, 1)
        held = self._per_item.get(durable)
        self._per_item[durable] = sample if held is None else 0.7 * held + 0.3 * sample

    async def in_thread(self, apply: Callable[[], BatchResult]) -> BatchResult:
        self._threads += 1
        try:
            return await anyio.to_thread.run_sync(apply)
        finally:
            self._threads -= 1

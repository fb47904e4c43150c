"""Contradictions with ids and a lifecycle, and how an open one widens the
uncertainty of its ends. Pure functions over :class:`Contradiction` records; the
projector keeps the records as the change feed arrives
(:mod:`worldline.actors.projector.beliefs`) and reads them through these.

A contradiction is identified by what it is about, not by when it was seen:
``c-`` + the first 16 hex digits of sha256(world, kind, sorted belief ids). It is
``open`` from the op that opened it (a ``contradicts`` edge linked between two
beliefs; for a belief whose evidence is split now, the item that made the current
split, :func:`split_opening`) until the earlier, in log order, of

- a ``ResolveContradiction`` recorded after it opened: ``resolved``;
- an end closed or (every) edge removed: ``dissolved``.

A split whose evidence is no longer split is no contradiction at all. So its status
is a function of the log, never of the clock a read asks for, and of the log alone,
never of the order in which a replica happened to receive the changes that carry it
(:func:`lifecycle` folds the events by OPS sequence) nor of the order causally
independent ops reached the log. The formulas are in docs/belief-math.md,
"Contradictions".
"""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING

import msgspec

from worldline.actors.belief_model import posterior
from worldline.protocols.beliefs import Contradiction

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from datetime import datetime

    from worldline.protocols.beliefs import Evidence
    from worldline.protocols.contradictions import ContradictionResolved

__all__ = [
    "contradiction_id",
    "disagreement",
    "dissolve",
    "is_split",
    "lifecycle",
    "opened",
    "split_opening",
    "split_strength",
    "widened",
]


def contradiction_id(world: str, kind: str, beliefs: Iterable[str]) -> str:
    """``c-`` + 16 hex of sha256(world \\0 kind \\0 sorted belief ids joined by \\0)."""
    parts = [world, kind, *sorted(beliefs)]
    return "c-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def split_strength(support: float, refute: float) -> float:
    """The minority side's share of the weight, 0 (one-sided) to 0.5 (even)."""
    total = support + refute
    return 0.0 if total <= 0 else min(support, refute) / total


def is_split(support: float, refute: float) -> bool:
    """Evidence split as fusion flags it ``contradicted``: the minority side carries
    at least ``CONTRADICTION_MIN`` and ``CONTRADICTION_RATIO`` of the majority."""
    minority = min(support, refute)
    return minority >= posterior.CONTRADICTION_MIN and (
        minority >= posterior.CONTRADICTION_RATIO * max(support, refute)
    )


def _told(item: Evidence) -> tuple[datetime, str]:
    """Where an item stands in the order the world was told: its op's ``at``
    (its observation for items recorded before that was kept), then its id."""
    return (item.recorded_at or item.observed_at, item.id)


def split_opening(
    evidence: Sequence[Evidence],
    trust: Mapping[str, float],
    *,
    after: Evidence | None = None,
    held: tuple[datetime, int] | None = None,
) -> Evidence | None:
    """The item whose recording opened the belief's current split: with ``evidence``
    (split now) in the order the world was told (:func:`_told`), the first item
    from which every longer prefix is split, each prefix read at its own last
    item's time. A function of the evidence and the trust alone, so the same
    whatever order the items arrived in (None: no item, e.g. a rival answer's
    split). ``after``: the item this change added and ``held``: the opening
    recorded before it; when the added item is the last told and the evidence
    before it still split, that opening stands (one reading instead of a walk)."""
    if not evidence:
        return None
    items = sorted(evidence, key=_told)
    n = len(items)
    # A prefix without both a supporting and a refuting item is never split: no
    # reading needed for the prefixes shorter than ``both``.
    firsts: dict[str, int] = {}
    for i, item in enumerate(items):
        firsts.setdefault(item.direction, i)
    both = max(firsts.get("supports", n), firsts.get("refutes", n)) + 1

    def split(k: int) -> bool:
        return k >= both and is_split(
            *posterior.sides(items[:k], trust, _told(items[k - 1])[0])
        )

    if (
        after is not None
        and held is not None
        and n > 1
        and items[-1] is after
        and split(n - 1)
    ):
        for item in items[:-1]:
            if (item.recorded_at or item.observed_at, item.recorded_seq) == held:
                return item
    for k in range(n - 1, 0, -1):
        if not split(k):
            return items[k]
    return items[0]


def opened(
    world: str,
    kind: str,
    beliefs: tuple[str, ...],
    *,
    strength: float,
    trace: tuple[str, ...],
    at: datetime,
    seq: int,
) -> Contradiction:
    """A contradiction opened by the op at OPS sequence ``seq`` (its ``at``)."""
    ends = tuple(sorted(beliefs))
    return Contradiction(
        id=contradiction_id(world, kind, ends),
        kind="edge" if kind == "edge" else "split",
        beliefs=ends,
        strength=strength,
        trace=trace,
        status="open",
        opened_at=at,
        opened_seq=seq,
    )


def dissolve(
    record: Contradiction, at: datetime, seq: int, reason: str
) -> Contradiction:
    """``record`` dissolved by the op at ``seq``: an end closed or its edge removed.
    The event is placed no earlier than the opening (an end closed before the edge
    was linked dissolves it at the link), so either arrival order of the two
    changes records the same event. A later dissolution never replaces an earlier
    one: earlier by ``at``, then by reason, then by sequence, so of two ends closed
    by independent ops the one closed first in time (not in arrival) dissolves it."""
    opened_at = record.opened_at
    when = at if opened_at is None else max(at, opened_at)
    if record.status == "dissolved" and record.resolved_at is not None:
        kept = (record.resolved_at, record.reason, record.resolved_seq)
        if kept <= (when, reason, max(seq, record.opened_seq)):
            return record
    return msgspec.structs.replace(
        record,
        status="dissolved",
        resolved_at=when,
        resolved_seq=max(seq, record.opened_seq),
        reason=reason,
    )


def lifecycle(
    record: Contradiction,
    resolutions: Iterable[ContradictionResolved],
    as_of: datetime | None = None,
) -> Contradiction | None:
    """The contradiction as reported: the first event after its opening, in OPS
    order, decides (a resolution recorded after it opened: ``resolved``; its
    dissolution: ``dissolved``); none: ``open``. With ``as_of`` (recorded time)
    only the events the world had been told by then count, and a contradiction
    opened later is None."""
    if as_of is not None and (record.opened_at is None or record.opened_at > as_of):
        return None
    dissolved = record.status == "dissolved" and (
        as_of is None
        or (record.resolved_at is not None and record.resolved_at <= as_of)
    )
    first = None
    for res in sorted(resolutions, key=lambda r: r.seq):
        if res.seq > record.opened_seq and (as_of is None or res.at <= as_of):
            first = res
            break
    if first is not None and (not dissolved or first.seq < record.resolved_seq):
        return msgspec.structs.replace(
            record,
            status="resolved",
            resolved_at=first.at,
            resolved_seq=first.seq,
            winner=first.winner,
            reason=first.reason,
            resolved_by=first.author,
        )
    if dissolved:
        return record
    return msgspec.structs.replace(
        record, status="open", resolved_at=None, resolved_seq=0, reason=""
    )


def disagreement(contradiction: Contradiction) -> float:
    """How much an open contradiction disputes its ends, 0..1: an edge's stated
    strength; for split evidence twice the minority's share (1 for an even split).
    Resolved and dissolved ones dispute nothing."""
    if contradiction.status != "open":
        return 0.0
    if contradiction.kind == "split":
        return min(max(2.0 * contradiction.strength, 0.0), 1.0)
    return min(max(contradiction.strength, 0.0), 1.0)


def widened(
    uncertainty: float | None, confidence: float | None, disputes: Iterable[float]
) -> float | None:
    """The uncertainty of a belief its open contradictions dispute:

        max(uncertainty, d * sqrt(confidence * (1 - confidence)))

    with ``d`` the largest disagreement among them. ``sqrt(c (1 - c))`` is the sd
    of the claim's own outcome (true with probability ``c``), the widest any
    distribution on [0, 1] with mean ``c`` can be: a full-strength open
    contradiction leaves the belief as uncertain as a coin with its odds. Never
    narrower than ``uncertainty``; no probability (goals, gaps): unchanged."""
    if uncertainty is None or confidence is None:
        return uncertainty
    d = max(disputes, default=0.0)
    if d <= 0.0:
        return uncertainty
    floor = d * math.sqrt(max(confidence * (1.0 - confidence), 0.0))
    return max(uncertainty, floor)

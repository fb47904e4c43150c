"""The two time axes of a belief read (docs/belief-math.md, "Two time axes"):
valid time ``at`` (what was true then: evidence observed by then, beliefs created
by then, with the status they had) and recorded time ``as_of`` (what the world had
been told by then: evidence recorded by then, by the ``at`` of the op that recorded
it). A read without ``at`` is read at the world's clock (:func:`world_clock`), one
clock for the whole answer.

State key: ``bclock/<w>`` -> the newest ``updated_at`` of any belief change applied.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import msgspec

from worldline.actors.belief_model import posterior
from worldline.actors.belief_model.posterior import NO_PROBABILITY
from worldline.actors.projector import history, slots
from worldline.actors.projector.history import recorded
from worldline.protocols.messages import Belief, BeliefChanged

if TYPE_CHECKING:
    from collections.abc import Sequence

    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.beliefs import BeliefEdge, Evidence

__all__ = [
    "Reads",
    "as_of",
    "at_clock",
    "clock_key",
    "recorded",
    "stored_then",
    "world_clock",
]

_RECORD = msgspec.msgpack.Decoder(BeliefChanged)
_CLOCK = msgspec.msgpack.Decoder(datetime)


def _key(world: str, belief_id: str) -> bytes:
    return f"belief/{world}/{belief_id}".encode()


def clock_key(world: str) -> bytes:
    return f"bclock/{world}".encode()


def world_clock(reader: Reader, world: str) -> datetime | None:
    """The clock a read without ``at`` uses: the newest ``updated_at`` among the
    world's belief changes (None for a world without beliefs). Kept under
    ``bclock/<w>`` as changes arrive; a replica written before that key existed
    gets it from the start-up upgrade (``upgrade.py``), never from a scan on a
    read."""
    raw = reader.get(clock_key(world))
    return None if raw is None else _CLOCK.decode(raw)


def at_clock(
    record: BeliefChanged,
    at: datetime | None,
    *,
    dated: bool = True,
    as_of: datetime | None = None,
    rivals: Sequence[BeliefChanged] = (),
) -> Belief:
    """The belief re-read at ``at`` (None: the stored reading). ``dated``: only the
    evidence observed by then counts (a caller's ``at``); otherwise (the world's
    clock) every recorded item counts, as fusion counts it. ``as_of`` (recorded
    time): only the evidence recorded by then counts."""
    belief = record.belief
    if at is None or (as_of is None and not dated and belief.updated_at == at):
        return belief  # fusion read it at this very clock

    def counts(e: Evidence) -> bool:
        return (not dated or e.observed_at <= at) and (
            as_of is None or recorded(e) <= as_of
        )

    evidence = [e for e in record.evidence if counts(e)]
    if belief.slot:  # a rival answer: weighed against its rivals, as fusion does
        reading = slots.read(record, evidence, rivals, counts, at, dated=dated)
    else:
        reading = posterior.read(
            belief.prior,
            evidence,
            record.trust,
            at,
            probabilistic=belief.type not in NO_PROBABILITY,
        )
    return msgspec.structs.replace(
        belief,
        confidence=reading.confidence,
        evidence_weight=reading.evidence_weight,
        uncertainty=reading.uncertainty,
        fragility=reading.fragility,
        flags=reading.flags,
        evidence_count=len(evidence),
    )


class Reads:
    """Beliefs read at one clock, each at most once per request: the caller's
    ``at``, else the world's clock (:func:`world_clock`) for the whole answer."""

    def __init__(
        self,
        reader: Reader,
        world: str,
        at: datetime | None,
        *,
        one_clock: bool = True,
        as_of: datetime | None = None,
    ) -> None:
        self.reader = reader
        self.world = world
        self.at = at  # the caller's clock (None: none given)
        self.as_of = as_of  # recorded time (None: everything recorded)
        self.clock = at
        if at is None and (one_clock or as_of is not None):
            self.clock = world_clock(reader, world)
            if as_of is not None and (self.clock is None or self.clock > as_of):
                # the world's clock as it stood then (as_of: none kept)
                self.clock = history.clock_at(reader, world, as_of) or as_of
        self.memo: dict[str, Belief | None] = {}
        self.evidence: dict[str, list[Evidence]] = {}  # of each belief read, as held

    def edges(self, edges: list[BeliefEdge]) -> list[BeliefEdge]:
        """``edges`` as recorded by ``as_of`` (an edge keeps only its last write)."""
        if self.as_of is None:
            return edges
        return [e for e in edges if e.at is None or e.at <= self.as_of]

    def belief(self, belief_id: str) -> Belief | None:
        if belief_id not in self.memo:
            raw = self.reader.get(_key(self.world, belief_id))
            record = None if raw is None else _RECORD.decode(raw)
            rivals: list[BeliefChanged] = []
            if record is not None:
                rivals = slots.rival_records(
                    self.reader,
                    self.world,
                    record.belief,
                    lambda rival: _key(self.world, rival),
                )
                record = self.known(record, rivals)
            if record is not None:
                self.evidence[belief_id] = record.evidence
            self.memo[belief_id] = (
                None
                if record is None
                else at_clock(
                    record,
                    self.clock,
                    dated=self.at is not None,
                    as_of=self.as_of,
                    rivals=[
                        known
                        for rival in rivals
                        if (known := self.known(rival)) is not None
                    ],
                )
            )
        return self.memo[belief_id]

    def known(
        self, record: BeliefChanged, rivals: Sequence[BeliefChanged] = ()
    ) -> BeliefChanged | None:
        """``record`` as the world knew it at ``as_of`` (None: not yet created);
        ``rivals``: its rival answers' records, whose items re-read it."""
        if self.as_of is None:
            return record
        return history.known(self.reader, self.world, record, self.as_of, rivals)


def as_of(belief: Belief, at: datetime) -> Belief:
    """The belief's status as it stood at ``at``: a belief retracted, resolved or
    superseded later was still active then."""
    if belief.valid_until is not None and belief.valid_until > at:
        return msgspec.structs.replace(belief, status="active", valid_until=None)
    return belief


def stored_then(
    reader: Reader, world: str, record: BeliefChanged, as_of: datetime
) -> BeliefChanged | None:
    """``record`` (a belief's newest) as it was stored at recorded time ``as_of``:
    its head then, read at its own clock then as fusion read it (with its rival
    answers as they stood); None when it was not created by then."""
    rivals = slots.rival_records(
        reader, world, record.belief, lambda rival: _key(world, rival)
    )
    known = history.known(reader, world, record, as_of, rivals)
    if known is None or known is record:
        return known
    then = known.belief.updated_at
    others = [r for rival in rivals if (r := history.known(reader, world, rival, then))]
    belief = at_clock(known, then, dated=False, as_of=then, rivals=others)
    return msgspec.structs.replace(known, belief=belief)

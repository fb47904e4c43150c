"""The simulator's own track record (issue 26): measured on its index with each
transition's group left out, kept beside the index, carried by forecast replies and
status, and used by ``before --forecast`` to hold back forecasts the record does not
support. Pure, over a real index on disk, no bus.

Before this change nothing measured how often a forecast's outcomes held the real
one, and ``before --forecast`` showed every grounded forecast."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from tests.runtime.test_forecast import ASK, SEARCH, make_index
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.simulator import track
from worldline.actors.simulator.index import load
from worldline.actors.simulator.service import SessionService
from worldline.protocols.messages import (
    ForecastTrack,
    SimForecast,
    SimForecastReply,
    SimStatus,
    SimStatusReply,
)
from worldline.sdk.sim import _held_back

if TYPE_CHECKING:
    from pathlib import Path


def test_the_record_counts_hits_with_each_group_left_out(tmp_path: Path) -> None:
    index = load(make_index(tmp_path))
    record = track.evaluate(index)
    assert record.index == index.manifest.id
    assert record.sample == 5
    message = record.of(ASK)
    # lin-a and lin-c answered "To Lisbon": each is forecast by the other (a hit);
    # lin-b answered "Madrid.", which no other lineage said (a miss).
    assert (message.key, message.asked, message.grounded, message.hits) == (
        "message",
        3,
        3,
        2,
    )
    searched = record.of(SEARCH)
    assert searched.key == "tool:search_flights"
    assert (searched.asked, searched.hits) == (2, 2)
    assert record.of('book_hotel({"city": "Paris"})') == ForecastTrack(
        key="tool:book_hotel"
    )
    # The same index gives the same record (a deterministic sample).
    assert track.evaluate(index) == record


def test_support_needs_enough_grounded_forecasts_and_hits() -> None:
    assert not ForecastTrack(key="message", grounded=4, hits=4).supported()
    assert ForecastTrack(key="message", grounded=5, hits=2).supported()
    assert not ForecastTrack(key="message", grounded=10, hits=2).supported()


def test_the_record_is_kept_beside_its_index_and_served(tmp_path: Path) -> None:
    path = make_index(tmp_path)
    index = load(path)
    record = track.evaluate(index)
    track.save(record, path)
    assert track.load(path, index.manifest.id) == record
    assert track.load(path, "another-index") is None  # stale: rebuilt since
    service = SessionService(index, record=record)
    status = service.serve(MemoryState(), SimStatus(), "w")
    assert isinstance(status, SimStatusReply)
    assert status.track == record.keys
    reply = service.serve(MemoryState(), SimForecast(move=ASK), "w")
    assert isinstance(reply, SimForecastReply)
    assert reply.track == record.of(ASK)
    assert reply.grounded


def test_before_holds_back_a_forecast_the_record_does_not_support() -> None:
    reply = SimForecastReply(
        move=ASK,
        grounded=True,
        track=ForecastTrack(key="message", asked=9, grounded=9, hits=1),
    )
    held = _held_back(reply, reply.track or ForecastTrack(key="message"))
    assert not held.grounded
    assert held.outcomes == ()
    assert "1 hits of 9" in held.note
    assert msgspec.json.encode(held)

"""Issue 26.3 and 26.4: a session shares forecast's floor and never answers what the
index never saw (an unknown tool, an id no recorded call names) with confidence;
retrieval scores contiguous blocks without copying them; BLAS threads are pinned."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pytest

from worldline.actors.runtime.requester import AS_OPERATOR
from worldline.actors.runtime.serve import answering_for
from worldline.actors.simulator import threads
from worldline.actors.simulator.forecast import FLOOR, forecast
from worldline.actors.simulator.grounded import identifiers
from worldline.actors.simulator.index import TransitionIndex, build, retrieve, save
from worldline.actors.simulator.provider import LocalProvider
from worldline.actors.simulator.service import SessionService, spec
from worldline.protocols.messages import (
    Message,
    SimError,
    SimStart,
    SimStarted,
    SimStep,
    SimStepReply,
    Transition,
)

if TYPE_CHECKING:
    from pathlib import Path

T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
TASK: Final = "Help the user with their flight reservations."


def tr(n: int, lineage: str, action: str, observation: str, pairing: str) -> Transition:
    return Transition(
        id=f"t-{lineage}-{n}",
        lineage=lineage,
        task=TASK,
        context="user: Can you check my reservation?",
        action=action,
        observation=observation,
        pairing=pairing,  # type: ignore[arg-type]
    )


def details(code: str) -> str:
    return f'get_reservation_details({{"reservation_id": "{code}"}})'


REAL: Final = [
    tr(1, "lin-a", details("ZFA04Y"), '{"reservation_id": "ZFA04Y", "user": "mia"}',
       "id"),
    tr(2, "lin-b", details("K1DL3Q"), '{"reservation_id": "K1DL3Q", "user": "raj"}',
       "id"),
    tr(3, "lin-c", 'book_flight({"city": "Paris"})', '{"flight": "AF1280"}', "id"),
    tr(4, "lin-d", "Your reservation is confirmed.", "Thank you, bye.", "turn"),
]  # fmt: skip


@pytest.fixture(scope="module")
def index() -> TransitionIndex:
    return build(REAL, held_out=0.0)


def call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ],
    }


def stepped(index: TransitionIndex, message: dict[str, Any], **options: Any) -> Message:
    service = SessionService(index, rng=random.Random(5), clock=lambda: T0)
    service.provider = LocalProvider(index)  # the local one, whatever the env
    with answering_for(AS_OPERATOR):
        started = service.serve(None, SimStart(task=TASK, agent="ada"), "w")  # type: ignore[arg-type]
        assert isinstance(started, SimStarted)
        step = SimStep(session_id=started.session_id, message=message, **options)
        return service.serve(None, step, "w")  # type: ignore[arg-type]


def test_a_tool_the_index_does_not_hold_answers_no_grounding(
    index: TransitionIndex,
) -> None:
    # book_flight shares the arguments, so cosine alone scores it high.
    hotel = call("book_hotel", '{"city": "Paris"}')
    refused = stepped(index, hotel)
    assert isinstance(refused, SimError)
    assert refused.name == "no_grounding"
    assert "the tool 'book_hotel'" in refused.message
    assert refused.similarity is not None
    assert refused.similarity <= FLOOR
    guess = stepped(index, hotel, best_guess=True)
    assert isinstance(guess, SimStepReply)
    assert not guess.grounded
    assert guess.note.startswith("call_1: no grounding:")
    assert guess.messages[0]["content"] == '{"flight": "AF1280"}'  # flagged
    held = stepped(index, call("book_flight", '{"city": "Paris"}'))
    assert isinstance(held, SimStepReply)
    assert held.grounded
    assert held.similarity is not None
    assert held.similarity > FLOOR
    assert held.note == ""


def test_a_reservation_never_seen_answers_no_grounding_a_seen_one_answers(
    index: TransitionIndex,
) -> None:
    unseen = stepped(
        index, call("get_reservation_details", '{"reservation_id": "XYZ999"}')
    )
    assert isinstance(unseen, SimError)
    assert unseen.name == "no_grounding"
    assert "'xyz999'" in unseen.message
    flagged = stepped(
        index,
        call("get_reservation_details", '{"reservation_id": "XYZ999"}'),
        best_guess=True,
    )
    assert isinstance(flagged, SimStepReply)
    assert not flagged.grounded  # someone else's reservation, said so
    seen = stepped(
        index, call("get_reservation_details", '{"reservation_id": "K1DL3Q"}')
    )
    assert isinstance(seen, SimStepReply)
    assert seen.grounded
    assert seen.messages[0]["content"] == '{"reservation_id": "K1DL3Q", "user": "raj"}'
    assert seen.grounding[0] == "t-lin-b-2"


def test_a_message_nothing_recorded_is_close_to_is_no_grounding(
    index: TransitionIndex,
) -> None:
    far = {"role": "assistant", "content": "Quarterly revenue grew up north."}
    refused = stepped(index, far)
    assert isinstance(refused, SimError)
    assert refused.name == "no_grounding"
    near = stepped(
        index, {"role": "assistant", "content": "Your reservation is confirmed."}
    )
    assert isinstance(near, SimStepReply)
    assert near.grounded
    assert near.messages[0]["content"] == "Thank you, bye."


def test_one_ungrounded_call_of_several_flags_the_reply_by_its_id(
    index: TransitionIndex,
) -> None:
    both = call("book_flight", '{"city": "Paris"}', "call_ok")
    both["tool_calls"] += call("book_hotel", '{"city": "Paris"}', "call_far")[
        "tool_calls"
    ]
    assert isinstance(stepped(index, both), SimError)  # nothing silently wrong
    reply = stepped(index, both, best_guess=True)
    assert isinstance(reply, SimStepReply)
    assert not reply.grounded
    assert reply.note.startswith("call_far: no grounding:")
    assert "call_ok" not in reply.note


def test_forecast_applies_the_same_identifier_rule(index: TransitionIndex) -> None:
    unseen = forecast(index, details("XYZ999"))
    assert not unseen.grounded
    assert unseen.outcomes == ()
    assert unseen.note.startswith("no grounding:")
    seen = forecast(index, details("ZFA04Y"))
    assert seen.grounded
    assert seen.outcomes[0].transitions == ("t-lin-a-1",)


def test_identifiers_are_the_tool_and_argument_tokens_with_digits() -> None:
    assert identifiers(details("ZFA04Y")) == {"tool:get_reservation_details", "zfa04y"}
    assert identifiers('search({"date": "2024-05-01", "n": 2, "to": "LIS"})') == {
        "tool:search",
        "2024-05-01",
    }
    assert identifiers("Your order 4471 shipped.") == frozenset()  # a message


class _NoCopy(np.ndarray):
    """Vectors that refuse to be indexed by an array of rows (a copy)."""

    def __getitem__(self, key: Any) -> Any:
        parts = key if isinstance(key, tuple) else (key,)
        if self.ndim == 2 and any(isinstance(k, np.ndarray) for k in parts):
            raise AssertionError("the block was copied by fancy indexing")
        return super().__getitem__(key)


def test_retrieval_scores_slices_of_the_vectors_never_a_copy() -> None:
    index = build(REAL, held_out=0.0)
    guarded = np.asarray(index.vectors).view(_NoCopy)
    object.__setattr__(index, "vectors", guarded)
    for action, kind in (
        (details("ZFA04Y"), "tool"),
        ('book_hotel({"city": "Paris"})', "tool"),
        ("Your reservation is confirmed.", "message"),
    ):
        found = retrieve(index, task=TASK, context="", action=action, kind=kind, k=2)  # type: ignore[arg-type]
        assert found


def test_blas_threads_are_pinned_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if threads.blas_threads() is None:
        pytest.skip("numpy's BLAS here is not OpenBLAS")
    before = threads.blas_threads()
    try:
        monkeypatch.setenv(threads.BLAS_THREADS_ENV, "2")
        pinned = threads.pin_blas_threads()
        assert pinned is not None
        assert pinned == threads.blas_threads()
        assert pinned >= 1
        monkeypatch.delenv(threads.BLAS_THREADS_ENV)
        assert threads.pin_blas_threads() == 1
        assert threads.blas_threads() == 1
        monkeypatch.setenv(threads.BLAS_THREADS_ENV, "zero")
        with pytest.raises(ValueError, match=threads.BLAS_THREADS_ENV):
            threads.pin_blas_threads()
    finally:
        threads.pin_blas_threads(before)


def test_the_simulator_pins_blas_when_it_starts_with_an_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = threads.blas_threads()
    if before is None:
        pytest.skip("numpy's BLAS here is not OpenBLAS")
    save(build(REAL, held_out=0.0), tmp_path / "index")
    monkeypatch.delenv(threads.BLAS_THREADS_ENV, raising=False)
    try:
        threads.pin_blas_threads(2)
        spec(tmp_path / "index")
        assert threads.blas_threads() == 1
    finally:
        threads.pin_blas_threads(before)

"""World-model sessions: every limit has a test that hits it and gets its name."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pytest

from worldline.actors.simulator.sessions import (
    Prediction,
    Session,
    SessionError,
    Sessions,
    accepted_text,
)
from worldline.protocols.simulator import Limits

W: Final = "w1"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)


def echo(observation: str = "ok", terminal: bool = False) -> Any:
    def provider(session: Session, action: str) -> Prediction:
        return Prediction(observation=observation, terminal=terminal, grounding=("t",))

    return provider


def sessions(**limits: Any) -> Sessions:
    return Sessions(Limits(**limits), rng=random.Random(7))


def say(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def refused(name: str) -> Any:
    return pytest.raises(SessionError, match=f"^{name}:")


def test_a_step_appends_the_action_and_the_predicted_reply() -> None:
    s = sessions()
    session = s.start(W, "book a flight", "", T0)
    reply, prediction = s.step(W, session.id, say("Where to?"), T0, echo("Lisbon"))
    assert reply == {"role": "user", "content": "Lisbon"}
    assert prediction.grounding == ("t",)
    assert session.transcript == [say("Where to?"), reply]


def test_ids_are_opaque_and_distinct() -> None:
    s = sessions()
    a, b = s.start(W, "t", "", T0), s.start(W, "t", "", T0)
    assert a.id != b.id
    assert a.id.startswith("sim-")
    assert "t" not in a.id.removeprefix("sim-")  # reveals nothing of the task


@pytest.mark.parametrize(
    ("message", "name"),
    [
        ({"role": "user", "content": "hi"}, "not_assistant"),
        ("hi", "not_assistant"),
        ({"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]},
         "tool_calls_unsupported"),
        ({"role": "assistant", "content": None, "function_call": {"name": "f"}},
         "tool_calls_unsupported"),
        ({"role": "assistant", "content": [{"type": "text", "text": "x"}]}, "not_text"),
        ({"role": "assistant", "content": "   "}, "empty_message"),
    ],
)  # fmt: skip
def test_only_non_empty_assistant_text_is_accepted(message: Any, name: str) -> None:
    with refused(name):
        accepted_text(message)
    s = sessions()
    session = s.start(W, "t", "", T0)
    called: list[str] = []

    def provider(session: Session, action: str) -> Prediction:
        called.append(action)
        return Prediction(observation="x", terminal=False, grounding=())

    with refused(name):
        s.step(W, session.id, message, T0, provider)
    assert called == []  # refused before the provider (and retrieval) ran
    assert session.transcript == []


def test_too_many_sessions() -> None:
    s = sessions(sessions=2)
    s.start(W, "a", "", T0)
    s.start(W, "b", "", T0)
    with refused("too_many_sessions"):
        s.start(W, "c", "", T0)


def test_expired_sessions_are_removed_and_free_their_slot() -> None:
    s = sessions(sessions=1, expiry=60)
    session = s.start(W, "a", "", T0)
    later = T0 + timedelta(seconds=61)
    with refused("unknown_session"):
        s.step(W, session.id, say("hi"), later, echo())
    assert s.active == {}
    s.start(W, "b", "", later)


@pytest.mark.parametrize(
    ("limit", "field"), [("task_bytes", "task"), ("context_bytes", "context")]
)
def test_task_and_context_sizes(limit: str, field: str) -> None:
    s = sessions(**{limit: 10})
    args = {"task": "t", "context": ""}
    args[field] = "x" * 11
    with refused(f"{field}_too_large"):
        s.start(W, args["task"], args["context"], T0)
    args[field] = "x" * 10
    s.start(W, args["task"], args["context"], T0)


def test_message_count() -> None:
    s = sessions(messages=4)
    session = s.start(W, "t", "", T0)
    s.step(W, session.id, say("one"), T0, echo())
    s.step(W, session.id, say("two"), T0, echo())
    with refused("too_many_messages"):
        s.step(W, session.id, say("three"), T0, echo())
    assert len(session.transcript) == 4


def test_observation_bytes_fail_the_step_without_truncating() -> None:
    s = sessions(observation_bytes=5)
    session = s.start(W, "t", "", T0)
    with refused("observation_too_large"):
        s.step(W, session.id, say("go"), T0, echo("123456"))
    assert session.transcript == []
    s.step(W, session.id, say("go"), T0, echo("12345"))


def test_transcript_bytes() -> None:
    s = sessions(transcript_bytes=10)
    session = s.start(W, "t", "", T0)
    s.step(W, session.id, say("abc"), T0, echo("defg"))  # 7 bytes
    with refused("transcript_too_large"):
        s.step(W, session.id, say("hi"), T0, echo("xy"))  # would be 11
    assert session.size == 7


def test_a_terminal_prediction_or_end_removes_the_transcript() -> None:
    s = sessions()
    session = s.start(W, "t", "", T0)
    s.step(W, session.id, say("bye"), T0, echo("done", terminal=True))
    assert session.closed
    assert session.transcript == []
    with refused("unknown_session"):
        s.step(W, session.id, say("again"), T0, echo())
    other = s.start(W, "t", "", T0)
    s.end(W, other.id)
    assert other.transcript == []
    with refused("unknown_session"):
        s.get(W, other.id, T0)


def test_sessions_are_per_world() -> None:
    s = sessions()
    session = s.start(W, "t", "", T0)
    with refused("unknown_session"):
        s.get("w2", session.id, T0)

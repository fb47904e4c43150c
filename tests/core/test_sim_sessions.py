"""World-model sessions: every limit has a test that hits it and gets its name."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pytest

from worldline.actors.simulator.sessions import (
    DEFAULT_EXPIRY,
    Kind,
    Prediction,
    Session,
    SessionError,
    Sessions,
    accepted,
    accepted_text,
)
from worldline.protocols.simulator import Limits

W: Final = "w1"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)


def echo(observation: str = "ok", terminal: bool = False) -> Any:
    def provider(
        session: Session,
        action: str,
        kind: Kind = "message",
        *,
        best_guess: bool = False,
    ) -> Prediction:
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
    replies, prediction = s.step(W, session.id, say("Where to?"), T0, echo("Lisbon"))
    assert replies == [{"role": "user", "content": "Lisbon"}]
    assert prediction.grounding == ("t",)
    assert session.transcript == [say("Where to?"), *replies]


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
         "bad_tool_call"),
        ({"role": "assistant", "content": None, "function_call": {"name": "f"}},
         "function_call_unsupported"),
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

    def provider(
        session: Session,
        action: str,
        kind: Kind = "message",
        *,
        best_guess: bool = False,
    ) -> Prediction:
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
    with refused("session_expired"):
        s.step(W, session.id, say("hi"), later, echo())
    assert s.active == {}
    assert session.transcript == []
    assert session.closed
    s.start(W, "b", "", later)
    with refused("session_expired"):  # still named, not unknown
        s.get(W, session.id, later)
    with refused("unknown_session"):  # never started
        s.get(W, "sim-000000000000000000000000", later)


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


# --- tool calls ----------------------------------------------------------------------


def call(call_id: str, name: str, arguments: Any = "{}") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def calls(*items: dict[str, Any], content: Any = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(items)}


def test_each_tool_call_gets_a_tool_result_keyed_by_its_id() -> None:
    s = sessions()
    session = s.start(W, "refund order 4471", "user: refund order 4471", T0)
    asked: list[tuple[str, str, str]] = []

    def provider(
        session: Session,
        action: str,
        kind: Kind = "message",
        *,
        best_guess: bool = False,
    ) -> Prediction:
        asked.append((action, kind, session.text()))
        return Prediction(
            observation=f"result of {action}", terminal=False, grounding=(action,)
        )

    message = calls(
        call("c1", "get_order", '{"id": 4471}'),
        call("c2", "get_user", {"name": "ada", "age": 3}),
        content="Let me look.",
    )
    replies, prediction = s.step(W, session.id, message, T0, provider)
    assert replies == [
        {"role": "tool", "tool_call_id": "c1",
         "content": 'result of get_order({"id": 4471})'},
        {"role": "tool", "tool_call_id": "c2",
         "content": 'result of get_user({"age": 3, "name": "ada"})'},
    ]  # fmt: skip
    # Each call is asked as a tool call, on the context before the message (as the
    # trace adapters pair calls), rendered "name(arguments)" with decoded arguments'
    # keys sorted.
    assert [(a, k) for a, k, _ in asked] == [
        ('get_order({"id": 4471})', "tool"),
        ('get_user({"age": 3, "name": "ada"})', "tool"),
    ]
    assert {text for _, _, text in asked} == {"user: refund order 4471"}
    assert prediction.grounding == tuple(a for a, _, _ in asked)
    assert session.transcript == [message, *replies]
    # The transcript reads like a trace's context: calls on the assistant's line.
    assert session.text() == (
        "user: refund order 4471\n"
        "assistant: Let me look.\n"
        'get_order({"id": 4471})\n'
        'get_user({"age": 3, "name": "ada"})\n'
        'tool: result of get_order({"id": 4471})\n'
        'tool: result of get_user({"age": 3, "name": "ada"})'
    )
    # A text message afterwards is asked as a message.
    replies, _ = s.step(W, session.id, say("Refunded."), T0, provider)
    assert replies == [{"role": "user", "content": "result of Refunded."}]
    assert asked[-1][1] == "message"


@pytest.mark.parametrize(
    ("message", "detail"),
    [
        (calls(), "non-empty list"),
        (calls({"type": "function", "function": {"name": "f"}}), "no id"),
        (calls(call("c1", "f"), call("c1", "g")), "reuses the id"),
        (calls(call("c1", "f", "{not json")), "not valid JSON"),
        (calls(call("c1", "f", 3)), "not a JSON string"),
        (calls({"id": "c1", "type": "retrieval", "function": {"name": "f"}}),
         "only \"function\""),
        (calls({"id": "c1", "function": {"arguments": "{}"}}), "no \"function\""),
    ],
)  # fmt: skip
def test_malformed_tool_calls_are_refused_by_name(message: Any, detail: str) -> None:
    with pytest.raises(SessionError, match=r"^bad_tool_call:") as caught:
        accepted(message)
    assert detail in caught.value.message
    s = sessions()
    session = s.start(W, "t", "", T0)
    with refused("bad_tool_call"):
        s.step(W, session.id, message, T0, echo())
    assert session.transcript == []


def test_a_call_without_type_is_a_function_call() -> None:
    found = accepted(calls({"id": "c1", "function": {"name": "f", "arguments": "{}"}}))
    assert isinstance(found, list)
    assert [(c.id, c.name, c.action) for c in found] == [("c1", "f", "f({})")]


def test_tool_results_count_against_the_message_limit() -> None:
    s = sessions(messages=4)
    session = s.start(W, "t", "", T0)
    with refused("too_many_messages"):  # 1 assistant + 4 results
        s.step(
            W, session.id, calls(*(call(f"c{i}", "f") for i in range(4))), T0, echo()
        )
    s.step(W, session.id, calls(call("c1", "f"), call("c2", "f")), T0, echo())
    assert len(session.transcript) == 3


def test_a_terminal_tool_result_ends_the_session() -> None:
    s = sessions()
    session = s.start(W, "t", "", T0)
    _, prediction = s.step(W, session.id, calls(call("c1", "submit")), T0, echo(
        "submitted", terminal=True))  # fmt: skip
    assert prediction.terminal
    with refused("unknown_session"):
        s.get(W, session.id, T0)


# --- the per-client quota ------------------------------------------------------------


def test_one_client_cannot_take_every_session() -> None:
    s = Sessions(Limits(sessions=4), rng=random.Random(7), per_client=2)
    a1 = s.start(W, "t", "", T0, client="ada")
    s.start(W, "t", "", T0, client="ada")
    with refused("session_quota") as caught:
        s.start(W, "t", "", T0, client="ada")
    message = caught.value.message
    assert "'ada'" in message
    assert "quota 2" in message
    assert "sim_end" in message
    # Others still get sessions, across worlds too (the quota is the client's).
    s.start("w2", "t", "", T0, client="bob")
    s.start(W, "t", "", T0, client="bob")
    with refused("session_quota"):
        s.start("w2", "t", "", T0, client="bob")
    # Ending one frees a slot for that client.
    s.end(W, a1.id)
    s.start(W, "t", "", T0, client="ada")
    with refused("too_many_sessions"):
        s.start(W, "t", "", T0, client="cy")


def test_an_expired_session_frees_its_clients_slot() -> None:
    s = Sessions(Limits(expiry=60), rng=random.Random(7), per_client=1)
    s.start(W, "t", "", T0, client="ada")
    with refused("session_quota"):
        s.start(W, "t", "", T0, client="ada")
    s.start(W, "t", "", T0 + timedelta(seconds=61), client="ada")


# --- ownership, the per-requester cap and expiry, with the clock passed in ------------


def test_only_the_client_that_opened_a_session_steps_or_ends_it() -> None:
    s = Sessions(rng=random.Random(7))
    mine = s.start(W, "t", "", T0, client="acc:AGENT_spock/U1", agent="spock")
    with refused("not_your_session"):
        s.step(W, mine.id, say("hi"), T0, echo(), client="acc:AGENT_zora/U2")
    with refused("not_your_session"):
        s.get(W, mine.id, T0, "acc:AGENT_zora/U2")
    assert mine.transcript == []  # the refused step changed nothing
    s.step(W, mine.id, say("hi"), T0, echo(), client="acc:AGENT_spock/U1")
    # No client (nothing vouches for the caller): the session id is the key.
    s.step(W, mine.id, say("again"), T0, echo())
    assert len(mine.transcript) == 4


def test_one_requester_never_reaches_the_global_limit() -> None:
    s = Sessions(rng=random.Random(7))  # the defaults: 16 per client of 256
    answers = []
    for _ in range(320):
        try:
            s.start(W, "t", "", T0, client="acc:AGENT_spock/U1")
            answers.append("started")
        except SessionError as exc:
            answers.append(exc.name)
    assert answers.count("started") == s.per_client == 16
    assert set(answers[16:]) == {"session_quota"}
    assert s.per_client * 16 == s.limits.sessions  # well below the global limit
    # Everyone else still gets theirs, up to the global limit and no further.
    for n in range(s.limits.sessions - 16):
        s.start(W, "t", "", T0, client=f"acc:AGENT_a{n // 16}/U{n // 16}")
    with refused("too_many_sessions"):
        s.start(W, "t", "", T0, client="acc:AGENT_late/U9")


def test_idle_sessions_expire_after_ten_minutes_by_default() -> None:
    s = Sessions(rng=random.Random(7))
    assert s.limits.expiry == DEFAULT_EXPIRY == 600
    idle = s.start(W, "t", "", T0, client="a")
    busy = s.start(W, "t", "", T0, client="a")
    s.step(W, busy.id, say("hi"), T0 + timedelta(seconds=590), echo(), client="a")
    at = T0 + timedelta(seconds=601)
    with refused("session_expired") as caught:
        s.get(W, idle.id, at, "a")
    assert "600s" in caught.value.message
    s.get(W, busy.id, at, "a")  # its step touched it at 590 s
    with refused("session_expired"):
        s.get(W, busy.id, T0 + timedelta(seconds=1191), "a")


def test_the_quota_frees_when_the_clock_passes_the_expiry() -> None:
    s = Sessions(Limits(sessions=4, expiry=30), rng=random.Random(7), per_client=2)
    s.start(W, "t", "", T0, client="a")
    s.start(W, "t", "", T0, client="a")
    with refused("session_quota"):
        s.start(W, "t", "", T0 + timedelta(seconds=30), client="a")  # not yet
    s.start(W, "t", "", T0 + timedelta(seconds=31), client="a")

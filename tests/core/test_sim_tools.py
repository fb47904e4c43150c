"""The local provider: a tool call is answered from real tool results only (same tool
first), a message from real messages only, and a session does not end on a step just
because its nearest neighbour closed a much longer conversation."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any, Final

import pytest

from worldline.actors.runtime.requester import AS_OPERATOR, Requester, agent_account
from worldline.actors.runtime.serve import answering_for
from worldline.actors.simulator.index import build
from worldline.actors.simulator.provider import LocalProvider, depth, ends_here
from worldline.actors.simulator.service import (
    EXPIRY_ENV,
    SessionService,
    expiry_from_env,
    spec,
)
from worldline.actors.simulator.sessions import Session, SessionError, Sessions
from worldline.protocols.messages import (
    Message,
    SimEnd,
    SimEnded,
    SimError,
    SimStart,
    SimStarted,
    SimStep,
    SimStepReply,
    Transition,
)

T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
TASK: Final = "refund order 4471"
LONG: Final = "\n".join(
    f"assistant: step {n}\nuser: answer {n}" for n in range(12)
)  # a conversation twelve assistant turns deep


def tr(
    id: str,
    action: str,
    observation: str,
    *,
    pairing: str = "turn",
    context: str = "",
    final: bool = False,
    lineage: str = "lin-a",
) -> Transition:
    return Transition(
        id=id,
        lineage=lineage,
        task=TASK,
        context=context,
        action=action,
        observation=observation,
        pairing=pairing,  # type: ignore[arg-type]
        final=final,
    )


REAL: Final = [
    # A message whose text is exactly the tool call: it must never answer the call.
    tr("t-1", 'get_order({"id": 4471})', "what do you mean?"),
    tr("t-2", 'get_user({"id": 4471})', '{"name": "ada"}', pairing="id"),
    tr("t-3", 'get_order({"id": 9})', '{"order": 9, "status": "shipped"}',
       pairing="id", lineage="lin-b"),
    tr("t-4", "Can I help with anything else?", "No, that's all. Bye!",
       context=LONG, final=True, lineage="lin-c"),
    tr("t-5", "Good morning.", "Yes, refund order 4471 please."),
]  # fmt: skip


def session(context: str = "", exclude: tuple[str, ...] = ()) -> Session:
    return Session(
        id="sim-1",
        world="w",
        task=TASK,
        context=context,
        exclude_lineages=exclude,
        touched=T0,
    )


@pytest.fixture(scope="module")
def provider() -> LocalProvider:
    return LocalProvider(build(REAL, held_out=0.0))


def test_a_tool_call_is_answered_by_a_tool_result_of_the_same_tool(
    provider: LocalProvider,
) -> None:
    # Order 4471 was never looked up (t-3 is order 9's): only a flagged best guess.
    p = provider(session(), 'get_order({"id": 4471})', "tool", best_guess=True)
    assert p.observation == '{"order": 9, "status": "shipped"}'
    assert p.grounding[0] == "t-3"  # same tool first
    assert set(p.grounding) == {"t-2", "t-3"}  # tool results only, never t-1
    assert not p.grounded
    seen = provider(session(), 'get_order({"id": 9})', "tool")
    assert (seen.grounding[0], seen.grounded) == ("t-3", True)


def test_a_message_is_answered_by_a_message(provider: LocalProvider) -> None:
    p = provider(session(), 'get_order({"id": 4471})')
    assert p.observation == "what do you mean?"
    assert set(p.grounding) <= {"t-1", "t-4", "t-5"}


def test_no_tool_result_left_is_no_grounding(provider: LocalProvider) -> None:
    with pytest.raises(SessionError, match=r"^no_grounding:.*tool result"):
        provider(session(exclude=("lin-a", "lin-b")), "get_order({})", "tool")


def test_an_empty_context_does_not_end_on_a_long_conversations_last_turn(
    provider: LocalProvider,
) -> None:
    # The nearest real transition closed a twelve-turn conversation: that is no
    # evidence that a conversation with nothing before it ends here.
    others = ("lin-a", "lin-b")  # leave only the long conversation to retrieve
    early = provider(session(exclude=others), "Can I help with anything else?")
    assert early.grounding[0] == "t-4"
    assert early.observation == "No, that's all. Bye!"
    assert not early.terminal
    # As deep as that conversation (or about half as deep), the same step ends it.
    assert provider(session(LONG, others), "Can I help with anything else?").terminal
    half = "\n".join(f"assistant: a{n}\nuser: b{n}" for n in range(6))
    assert provider(session(half, others), "Can I help with anything else?").terminal


def test_depth_and_ends_here() -> None:
    assert depth("") == 0
    assert depth(LONG) == 12
    assert depth("user: hi\nassistant: hello\nuser: bye") == 1
    shallow = tr("x", "a", "b", context="assistant: one", final=True)
    assert ends_here(shallow, "")  # ended at its second step: fine at the first
    assert not ends_here(tr("y", "a", "b", context=LONG, final=True), "")
    assert not ends_here(tr("z", "a", "b"), LONG)  # not final: never ends


# --- through the service -------------------------------------------------------------


def ask(s: SessionService, request: SimStart | SimStep | SimEnd) -> Message:
    reader: Any = None  # sessions never read the store
    return s.serve(reader, request, "w")


def service(per_client: int = 16) -> SessionService:
    built = SessionService(
        build(REAL, held_out=0.0), rng=random.Random(3), per_client=per_client
    )
    assert built.index is not None
    built.provider = LocalProvider(built.index)  # the local one, whatever the env
    return built


def test_the_service_answers_tool_calls_keyed_by_id() -> None:
    s = service()
    started = ask(s, SimStart(task=TASK, agent="ada"))
    assert isinstance(started, SimStarted)
    assert started.per_client == 16
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "get_order", "arguments": '{"id": 9}'}},
            {"id": "call_b", "type": "function",
             "function": {"name": "get_user", "arguments": '{"id": 4471}'}},
        ],
    }  # fmt: skip
    reply = ask(s, SimStep(session_id=started.session_id, message=message))
    assert isinstance(reply, SimStepReply)
    assert [(m["role"], m["tool_call_id"]) for m in reply.messages] == [
        ("tool", "call_a"),
        ("tool", "call_b"),
    ]
    assert reply.messages[1]["content"] == '{"name": "ada"}'
    assert reply.message == reply.messages[0]
    assert not reply.terminal


def test_the_service_applies_the_quota_per_agent() -> None:
    s = service(per_client=1)
    assert isinstance(ask(s, SimStart(task=TASK, agent="ada")), SimStarted)
    refused = ask(s, SimStart(task=TASK, agent="ada"))
    assert isinstance(refused, SimError)
    assert refused.name == "session_quota"
    assert isinstance(ask(s, SimStart(task=TASK, agent="bob")), SimStarted)


def test_sessions_reject_a_bad_quota() -> None:
    with pytest.raises(ValueError, match="per_client"):
        Sessions(rng=random.Random(1), per_client=0)


def test_the_service_counts_the_attested_requester_not_the_body() -> None:
    s = service(per_client=1)
    spock, zora = (
        Requester(key=f"acc:{agent_account(a)}/U{a}", agent=a, attested=True)
        for a in ("spock", "zora")
    )
    with answering_for(spock):
        started = ask(s, SimStart(task=TASK, agent="zora"))  # claims to be zora
        again = ask(s, SimStart(task=TASK, agent="zora"))
    assert isinstance(started, SimStarted)
    assert isinstance(again, SimError)
    assert again.name == "session_quota"
    assert "'spock'" in again.message
    step = SimStep(
        session_id=started.session_id,
        message={"role": "assistant", "content": "Good morning."},
    )
    with answering_for(zora):
        assert isinstance(ask(s, SimStart(task=TASK, agent="zora")), SimStarted)
        taken = ask(s, step)
        ended = ask(s, SimEnd(session_id=started.session_id))
    assert isinstance(taken, SimError)
    assert taken.name == "not_your_session"
    assert isinstance(ended, SimError)
    assert ended.name == "not_your_session"
    with answering_for(spock):
        assert isinstance(ask(s, step), SimStepReply)
    with answering_for(AS_OPERATOR):  # the operator may end anyone's session
        assert isinstance(ask(s, SimEnd(session_id=started.session_id)), SimEnded)


def test_the_expiry_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EXPIRY_ENV, raising=False)
    assert expiry_from_env() == 600
    monkeypatch.setenv(EXPIRY_ENV, "90")
    assert expiry_from_env() == 90
    simulator = spec()
    served = simulator.services[0].serve
    assert isinstance(served.__self__, SessionService)  # type: ignore[attr-defined]
    assert served.__self__.sessions.limits.expiry == 90  # type: ignore[attr-defined]
    for bad in ("0", "-5", "soon", "inf", "nan"):
        monkeypatch.setenv(EXPIRY_ENV, bad)
        with pytest.raises(ValueError, match=EXPIRY_ENV):
            expiry_from_env()

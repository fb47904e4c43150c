"""The OpenAI-compatible world-model provider, against a fake server on 127.0.0.1:
the request it sends, the grounded prompt, parsing, loud failures and its counters."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import pytest

from tests.support.fake_llm import Fake, Reply, completion, serve
from worldline.actors.simulator.http_provider import (
    HttpConfig,
    HttpProvider,
    grounded_messages,
    parse_completion,
)
from worldline.actors.simulator.index import TransitionIndex, build, retrieve
from worldline.actors.simulator.sessions import Session, SessionError
from worldline.protocols.messages import Transition

if TYPE_CHECKING:
    from collections.abc import Iterator

T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
MODEL: Final = "sim-model-1"
KEY: Final = "sk-test-123"

TASK: Final = "refund my order"
CONTEXT: Final = "user: my parcel never arrived"
ACTION: Final = "lookup_order 4471"


def tr(
    id: str, lineage: str, task: str, action: str, observation: str, final: bool = False
) -> Transition:
    return Transition(
        id=id,
        lineage=lineage,
        task=task,
        action=action,
        observation=observation,
        final=final,
    )


EXAMPLES: Final = [
    tr("id-aaa1", "lin-a", "refund my order", "lookup_order 9001", "order 9001 lost"),
    tr("id-bbb2", "lin-b", "refund my order", "issue refund 9001", "refund sent", True),
    tr("id-ccc3", "lin-c", "book a flight", "search flights friday", "three found"),
]


def index(items: list[Transition] = EXAMPLES) -> TransitionIndex:
    return build(items, held_out=0.0)  # every lineage in the fit partition


def session(exclude: tuple[str, ...] = ()) -> Session:
    return Session(
        id="sim-1",
        world="w1",
        task=TASK,
        context=CONTEXT,
        exclude_lineages=exclude,
        touched=T0,
    )


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fake]:
    """A fake OpenAI-compatible server on 127.0.0.1 (tests/support/fake_llm.py)."""
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # never route the test via a proxy
    with serve() as state:
        yield state


def provider(fake: Fake, **config: Any) -> HttpProvider:
    settings: dict[str, Any] = {"url": fake.url, "model": MODEL, "api_key": KEY}
    return HttpProvider(index(), HttpConfig(**(settings | config)))


def failed(detail: str = "") -> Any:
    return pytest.raises(SessionError, match=f"^provider_failed: .*{detail}")


# --- the request and the prompt ------------------------------------------------------


def test_the_request_is_a_grounded_chat_completion(fake: Fake) -> None:
    p = provider(fake)
    p(session(), ACTION)
    [sent] = fake.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["content-type"] == "application/json"
    payload = sent.json()
    assert payload["model"] == MODEL
    assert payload["temperature"] == 0
    messages = payload["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    prompt = "\n".join(m["content"] for m in messages)
    for text in (TASK, CONTEXT, ACTION, '"observation"', '"terminal"'):
        assert text in prompt
    for example in EXAMPLES:  # k=5 > 3: every real transition grounds the prompt
        assert example.action in prompt
        assert example.observation in prompt
        assert example.id not in prompt
        assert example.lineage not in prompt


def test_no_authorization_header_without_a_key(fake: Fake) -> None:
    provider(fake, api_key="")(session(), ACTION)
    assert "authorization" not in fake.requests[0].headers


def test_the_examples_are_the_retrieved_ones_numbered_best_first() -> None:
    found = retrieve(index(), task=TASK, context=CONTEXT, action=ACTION, k=2)
    examples = [t for t, _ in found]
    prompt = grounded_messages(TASK, CONTEXT, ACTION, examples)[1]["content"]
    for number, example in enumerate(examples, start=1):
        block = f"Example {number}:\nAssistant: {example.action}\n"
        assert block in prompt
    assert f"Example {len(examples) + 1}:" not in prompt


def test_an_example_that_ended_its_trace_says_so() -> None:
    prompt = grounded_messages(TASK, CONTEXT, ACTION, EXAMPLES)[1]["content"]
    ended = "(the conversation ended here)"
    assert f"Reply {ended}: refund sent" in prompt  # EXAMPLES[1] is final
    assert prompt.count(ended) == 1


def test_the_prompt_is_deterministic(fake: Fake) -> None:
    a = grounded_messages(TASK, CONTEXT, ACTION, EXAMPLES)
    b = grounded_messages(TASK, CONTEXT, ACTION, list(EXAMPLES))
    assert json.dumps(a).encode() == json.dumps(b).encode()
    p = provider(fake)
    p(session(), ACTION)
    provider(fake)(session(), ACTION)  # a fresh provider over a fresh index
    first, second = fake.requests
    assert first.body == second.body


def test_the_prompt_follows_the_example_order() -> None:
    forward = grounded_messages(TASK, CONTEXT, ACTION, EXAMPLES)
    backward = grounded_messages(TASK, CONTEXT, ACTION, EXAMPLES[::-1])
    assert forward[0] == backward[0]  # the system message is fixed
    assert forward[1] != backward[1]  # best first is part of the prompt


def test_the_transcript_so_far_is_in_the_prompt(fake: Fake) -> None:
    s = session()
    s.transcript += [
        {"role": "assistant", "content": "which order?"},
        {"role": "user", "content": "number 4471"},
    ]
    provider(fake)(s, ACTION)
    prompt = fake.requests[0].json()["messages"][1]["content"]
    assert f"{CONTEXT}\nassistant: which order?\nuser: number 4471" in prompt


# --- answers -------------------------------------------------------------------------


def test_a_json_answer_gives_observation_terminal_and_grounding(fake: Fake) -> None:
    fake.answer(
        Reply(body=completion('{"observation": "thanks, bye", "terminal": true}'))
    )
    p = provider(fake)
    prediction = p(session(), ACTION)
    assert prediction.observation == "thanks, bye"
    assert prediction.terminal is True
    expected = retrieve(index(), task=TASK, context=CONTEXT, action=ACTION, k=5)
    assert prediction.grounding == tuple(t.id for t, _ in expected)
    assert set(prediction.grounding) == {t.id for t in EXAMPLES}
    assert (p.calls, p.failures) == (1, 0)
    sent = fake.requests[0].json()["messages"]
    assert p.prompt_chars == sum(len(m["content"]) for m in sent)
    assert p.completion_chars == len('{"observation": "thanks, bye", "terminal": true}')


def test_a_plain_text_answer_is_a_non_terminal_observation(fake: Fake) -> None:
    fake.answer(Reply(body=completion("  Order 4471 was lost, please refund.  ")))
    prediction = provider(fake)(session(), ACTION)
    assert prediction.observation == "Order 4471 was lost, please refund."
    assert prediction.terminal is False


def test_grounding_honours_k(fake: Fake) -> None:
    prediction = provider(fake, k=1)(session(), ACTION)
    [best] = retrieve(index(), task=TASK, context=CONTEXT, action=ACTION, k=1)
    assert prediction.grounding == (best[0].id,)
    prompt = fake.requests[0].json()["messages"][1]["content"]
    assert "Example 1:" in prompt
    assert "Example 2:" not in prompt


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"observation": "hi", "terminal": false}', ("hi", False)),
        ('{"observation": "bye", "terminal": true}', ("bye", True)),
        ('{"observation": "no flag"}', ("no flag", False)),
        ('```json\n{"observation": "fenced", "terminal": true}\n```', ("fenced", True)),
        ("just words", ("just words", False)),
        ("[1, 2]", ("[1, 2]", False)),
    ],
)
def test_parse_completion(content: str, expected: tuple[str, bool]) -> None:
    assert parse_completion(completion(content)) == expected


@pytest.mark.parametrize(
    "body",
    [
        b"not json at all",
        b'{"choices": []}',
        b'{"object": "list"}',
        b'{"error": {"message": "model not found"}}',
        json.dumps({"choices": [{"message": {"content": None}}]}).encode(),
        completion(""),
        completion('{"observation": "cut off'),
        completion('{"terminal": true}'),
        completion('{"observation": "x", "terminal": "yes"}'),
        b"\xff\xfe",
    ],
)
def test_parse_completion_refuses_what_it_cannot_read(body: bytes) -> None:
    with failed():
        parse_completion(body)


# --- failures are loud and counted ---------------------------------------------------


def test_a_500_fails_loudly_and_counts(fake: Fake) -> None:
    fake.answer(Reply(status=500, body=b'{"error": "boom"}'))
    p = provider(fake)
    with failed() as caught:
        p(session(), ACTION)
    assert "HTTP 500" in str(caught.value)
    assert "boom" in str(caught.value)
    assert (p.calls, p.failures) == (1, 1)


def test_a_401_names_the_key(fake: Fake) -> None:
    fake.answer(Reply(status=401, body=b"unauthorized"))
    p = provider(fake)
    with failed() as caught:
        p(session(), ACTION)
    assert "WORLDLINE_LLM_KEY" in str(caught.value)
    assert KEY not in str(caught.value)
    assert p.failures == 1


def test_a_non_200_success_status_fails(fake: Fake) -> None:
    fake.answer(Reply(status=202, body=completion("accepted")))
    p = provider(fake)
    with failed("HTTP 202"):
        p(session(), ACTION)
    assert p.failures == 1


def test_a_malformed_body_fails_loudly_and_counts(fake: Fake) -> None:
    fake.answer(Reply(body=b"<html>gateway</html>"))
    p = provider(fake)
    with failed("not JSON"):
        p(session(), ACTION)
    assert (p.calls, p.failures) == (1, 1)
    assert p.completion_chars == 0


def test_a_timeout_fails_loudly_and_counts(fake: Fake) -> None:
    fake.answer(Reply(stall=True))
    p = provider(fake, timeout=0.2)
    with failed("timed out after 0.2s"):
        p(session(), ACTION)
    assert (p.calls, p.failures) == (1, 1)


def test_an_unreachable_server_fails_loudly() -> None:
    config = HttpConfig(url="http://127.0.0.1:9/v1", model=MODEL, timeout=2)
    p = HttpProvider(index(), config)
    with failed("check that the server is running"):
        p(session(), ACTION)
    assert (p.calls, p.failures) == (1, 1)


def test_failures_accumulate_and_a_later_success_still_works(fake: Fake) -> None:
    fake.answer(Reply(status=500), Reply(body=b"{}"), Reply())
    p = provider(fake)
    for _ in range(2):
        with failed():
            p(session(), ACTION)
    assert p(session(), ACTION).observation == "ok"
    assert (p.calls, p.failures) == (3, 2)


def test_every_lineage_excluded_means_no_grounding_and_no_call(fake: Fake) -> None:
    p = provider(fake)
    every = tuple(sorted({t.lineage for t in EXAMPLES}))
    with pytest.raises(SessionError, match=r"^no_grounding:"):
        p(session(exclude=every), ACTION)
    assert fake.requests == []
    assert (p.calls, p.failures, p.prompt_chars) == (0, 0, 0)


def test_excluded_lineages_never_reach_the_prompt(fake: Fake) -> None:
    p = provider(fake)
    # What is left is unrelated (below the floor): asked for, a flagged best guess.
    prediction = p(session(exclude=("lin-a",)), ACTION, best_guess=True)
    assert not prediction.grounded
    assert "id-aaa1" not in prediction.grounding
    prompt = fake.requests[0].json()["messages"][1]["content"]
    assert EXAMPLES[0].action not in prompt
    assert EXAMPLES[0].observation not in prompt


def test_an_injected_opener_receives_the_request_and_timeout() -> None:
    seen: list[tuple[Any, float]] = []

    class Response:
        status = 200

        def __enter__(self) -> Response:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def read(self, size: int = -1) -> bytes:
            return completion("fine")

    def opener(request: Any, *, timeout: float) -> Response:
        seen.append((request, timeout))
        return Response()

    config = HttpConfig(url="http://127.0.0.1:1/v1/", model=MODEL, timeout=3.5)
    prediction = HttpProvider(index(), config, opener=opener)(session(), ACTION)
    assert prediction.observation == "fine"
    [(request, timeout)] = seen
    assert request.full_url == "http://127.0.0.1:1/v1/chat/completions"
    assert request.get_method() == "POST"
    assert timeout == 3.5


# --- configuration -------------------------------------------------------------------


def test_from_env_reads_the_three_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLDLINE_LLM_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("WORLDLINE_LLM_MODEL", MODEL)
    monkeypatch.setenv("WORLDLINE_LLM_KEY", KEY)
    config = HttpConfig.from_env()
    assert config == HttpConfig(
        url="http://127.0.0.1:8000/v1", model=MODEL, api_key=KEY
    )
    assert KEY not in repr(config)
    monkeypatch.delenv("WORLDLINE_LLM_KEY")
    assert HttpConfig.from_env() == HttpConfig(
        url="http://127.0.0.1:8000/v1", model=MODEL
    )


def test_from_env_is_none_without_a_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLDLINE_LLM_URL", raising=False)
    monkeypatch.setenv("WORLDLINE_LLM_MODEL", MODEL)
    assert HttpConfig.from_env() is None
    monkeypatch.setenv("WORLDLINE_LLM_URL", "  ")
    assert HttpConfig.from_env() is None


def test_from_env_refuses_a_url_without_a_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORLDLINE_LLM_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.delenv("WORLDLINE_LLM_MODEL", raising=False)
    with pytest.raises(ValueError, match="WORLDLINE_LLM_MODEL"):
        HttpConfig.from_env()


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"url": "file:///etc/passwd"}, "http"),
        ({"url": "127.0.0.1:8000/v1"}, "http"),
        ({"model": " "}, "model"),
        ({"timeout": 0}, "timeout"),
        ({"k": 0}, "k 0"),
    ],
)
def test_config_is_checked(settings: dict[str, Any], match: str) -> None:
    base: dict[str, Any] = {"url": "http://127.0.0.1:8000/v1", "model": MODEL}
    with pytest.raises(ValueError, match=match):
        HttpConfig(**(base | settings))

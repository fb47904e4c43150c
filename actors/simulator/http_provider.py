"""An optional world-model provider that asks an OpenAI-compatible chat-completions
endpoint for the user's (or environment's) reply.

It retrieves real transitions exactly as :class:`~actors.simulator.provider.
LocalProvider` does (task + session text + candidate action, the session's excluded
lineages removed before scoring, fit partition only) and sends a grounded prompt:
the task, the context so far, the visible assistant action and the numbered real
examples (action -> observation, never their ids or lineages). The model answers as
JSON ``{"observation": "...", "terminal": true|false}``; plain text is accepted as the
observation of a non-terminal turn.

Nothing is ever made up on failure: an HTTP error, a timeout, a non-200 status or a
body that is not a chat completion raises ``SessionError("provider_failed", ...)``
naming what happened and how to fix it, and counts a failure. No retrieved
transition raises ``SessionError("no_grounding", ...)`` without calling the model.

Costs are tracked apart from the candidate's: :attr:`HttpProvider.calls`,
``failures``, ``prompt_chars`` and ``completion_chars``. Only the standard library
is used (``urllib.request``); the endpoint is configured by :class:`HttpConfig`,
e.g. from ``WORLDLINE_LLM_URL``, ``WORLDLINE_LLM_MODEL`` and ``WORLDLINE_LLM_KEY``.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from actors.simulator.index import retrieve
from actors.simulator.sessions import Prediction, Session, SessionError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from actors.simulator.index import TransitionIndex
    from protocols.messages import Transition

__all__ = [
    "ENV_KEY",
    "ENV_MODEL",
    "ENV_URL",
    "PROMPT_VERSION",
    "HttpConfig",
    "HttpProvider",
    "grounded_messages",
    "parse_completion",
]

ENV_URL: Final = "WORLDLINE_LLM_URL"
ENV_MODEL: Final = "WORLDLINE_LLM_MODEL"
ENV_KEY: Final = "WORLDLINE_LLM_KEY"

PROMPT_VERSION: Final = "grounded-v1"  # change it whenever the prompt text changes

_MAX_BODY: Final = 8 * 1024 * 1024  # bytes read from a response, at most
_SNIPPET: Final = 200  # characters of a bad body quoted in an error

_SYSTEM: Final = (
    "You are the world model of a text simulator. An AI assistant is working on a "
    "task with a user (or an environment). Given the task, the conversation so far "
    "and the assistant's latest message, reply exactly as the user or environment "
    "would reply next. Stay consistent with the real examples: they are what real "
    "users and environments answered after similar assistant messages. Do not help "
    "the assistant, do not explain, and do not invent abilities the examples do not "
    "show.\n"
    'Answer with one JSON object and nothing else: {"observation": "<the reply>", '
    '"terminal": <true if the conversation ends with this reply, else false>}'
)


@dataclass(frozen=True)
class HttpConfig:
    """Where and how to reach an OpenAI-compatible endpoint.

    ``url`` is the API base (``http://127.0.0.1:8000/v1``); requests go to
    ``{url}/chat/completions``. ``api_key`` is sent as a bearer token when set
    (never shown in ``repr``). ``timeout`` is in seconds; ``k`` is how many real
    transitions ground each prediction.
    """

    url: str
    model: str
    api_key: str = field(default="", repr=False)
    timeout: float = 30.0
    k: int = 5

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(
                f"url {self.url!r}: an http:// or https:// API base, e.g. "
                "http://127.0.0.1:8000/v1"
            )
        if not self.model.strip():
            raise ValueError("model is empty: name the model the endpoint serves")
        if not self.timeout > 0:
            raise ValueError(f"timeout {self.timeout!r}: seconds, more than 0")
        if self.k < 1:
            raise ValueError(f"k {self.k}: at least 1 real transition per prediction")

    @property
    def endpoint(self) -> str:
        return f"{self.url.rstrip('/')}/chat/completions"

    @classmethod
    def from_env(cls) -> HttpConfig | None:
        """The config named by ``WORLDLINE_LLM_URL``, ``WORLDLINE_LLM_MODEL`` and
        ``WORLDLINE_LLM_KEY`` (optional); ``None`` when the URL is unset or empty.
        A URL without a model raises ``ValueError``."""
        url = os.environ.get(ENV_URL, "").strip()
        if not url:
            return None
        model = os.environ.get(ENV_MODEL, "").strip()
        if not model:
            raise ValueError(
                f"{ENV_URL} is set but {ENV_MODEL} is not: name the model to ask"
            )
        return cls(url=url, model=model, api_key=os.environ.get(ENV_KEY, "").strip())


def grounded_messages(
    task: str, context: str, action: str, examples: Sequence[Transition]
) -> list[dict[str, str]]:
    """The chat messages for one prediction: a fixed system message, then the task,
    the context, the assistant's action and the numbered real examples (in the
    order given, i.e. best first). Only the examples' actions, observations and
    whether the trace ended there are shown, never ids or lineages. The same inputs
    always give the same messages."""
    parts = [
        f"Task:\n{task}",
        f"Conversation so far:\n{context if context else '(nothing yet)'}",
        f"The assistant's latest message:\n{action}",
        "Real examples (what happened after similar assistant messages):",
    ]
    for number, example in enumerate(examples, start=1):
        ended = " (the conversation ended here)" if example.final else ""
        parts.append(
            f"Example {number}:\nAssistant: {example.action}\n"
            f"Reply{ended}: {example.observation}"
        )
    parts.append(
        "Reply to the assistant's latest message as the user or environment would, "
        'as JSON: {"observation": "...", "terminal": true|false}'
    )
    return [
        {"role": "system", "content": _SYSTEM},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def _failed(message: str) -> SessionError:
    return SessionError("provider_failed", message)


def _snippet(data: bytes | str) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return repr(text[:_SNIPPET] + ("..." if len(text) > _SNIPPET else ""))


def _content(body: bytes) -> str:
    """``choices[0].message.content`` of a chat completion, or a named failure."""
    try:
        document: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _failed(
            f"the response is not JSON ({exc}): {_snippet(body)}; check that the URL "
            "is the API base of an OpenAI-compatible server (ending in /v1)"
        ) from None
    if isinstance(document, dict) and "error" in document:
        raise _failed(
            f"the server answered with an error: {_snippet(json.dumps(document))}"
        )
    try:
        content = document["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise _failed(
            f"the response has no choices[0].message.content: {_snippet(body)}; the "
            "endpoint must speak the OpenAI chat-completions format"
        ) from None
    if not isinstance(content, str):
        raise _failed(
            f"choices[0].message.content is {type(content).__name__}, not text; the "
            "world model must answer in plain text (no tool calls)"
        )
    return content


def _unfenced(text: str) -> str:
    """The text inside one surrounding Markdown code fence, if it has one."""
    if not (text.startswith("```") and text.endswith("```") and len(text) >= 6):
        return text
    inner = text[3:-3]
    first, newline, rest = inner.partition("\n")
    if newline and (not first.strip() or first.strip().isalnum()):
        inner = rest  # drop the fence's language tag line
    return inner.strip()


def parse_completion(body: bytes) -> tuple[str, bool]:
    """The (observation, terminal) in a chat-completion response body.

    The message content is either the JSON object the prompt asks for (optionally
    inside a code fence; ``terminal`` defaults to false when absent) or plain text,
    taken as the observation of a non-terminal turn. Anything else (not a chat
    completion, an object without a string observation, a non-boolean terminal, an
    empty observation) raises ``SessionError("provider_failed", ...)``.
    """
    return _answer(_content(body))


def _answer(text: str) -> tuple[str, bool]:
    """The (observation, terminal) in the model's message content."""
    content = text.strip()
    candidate = _unfenced(content)
    if not candidate.startswith("{"):
        if not content:
            raise _failed(
                "the model answered with empty content; check the model name and "
                "that it supports chat completions"
            )
        return content, False
    try:
        answer: Any = json.loads(candidate)
    except ValueError as exc:
        raise _failed(
            f"the model's answer looks like JSON but does not parse ({exc}): "
            f"{_snippet(candidate)}; it may have been cut off (raise the server's "
            "max tokens) or the model does not follow the format"
        ) from None
    if not isinstance(answer, dict):
        raise _failed(f"the model's answer is not a JSON object: {_snippet(candidate)}")
    observation = answer.get("observation")
    terminal = answer.get("terminal", False)
    if not isinstance(observation, str) or not observation.strip():
        raise _failed(
            'the model\'s JSON answer has no non-empty string "observation": '
            f"{_snippet(candidate)}"
        )
    if not isinstance(terminal, bool):
        raise _failed(
            f'the model\'s JSON answer has "terminal": {terminal!r}, not true or false'
        )
    return observation, terminal


class HttpProvider:
    """A :data:`~actors.simulator.sessions.Provider` backed by an OpenAI-compatible
    chat-completions endpoint, grounded on the top ``config.k`` real transitions.

    ``opener`` is called like ``urllib.request.urlopen(request, timeout=...)`` (the
    default) and must return a context-managed response with ``status`` and
    ``read``. Cost counters, kept apart from any candidate's: ``calls`` (requests
    sent), ``failures`` (of those, how many raised ``provider_failed``),
    ``prompt_chars`` and ``completion_chars`` (characters of message content sent,
    and of the model's message content received).
    """

    def __init__(
        self,
        index: TransitionIndex,
        config: HttpConfig,
        *,
        opener: Callable[..., Any] | None = None,
    ) -> None:
        self.index = index
        self.config = config
        self.opener: Callable[..., Any] = (
            opener if opener is not None else urllib.request.urlopen
        )
        self.calls = 0
        self.failures = 0
        self.prompt_chars = 0
        self.completion_chars = 0

    def __call__(self, session: Session, action: str) -> Prediction:
        context = session.text()
        found = retrieve(
            self.index,
            task=session.task,
            context=context,
            action=action,
            exclude_lineages=session.exclude_lineages,
            k=self.config.k,
        )
        if not found:
            raise SessionError(
                "no_grounding",
                "no real transition is left to ground a prediction on (the index is "
                "empty, or every lineage is excluded)",
            )
        examples = [t for t, _ in found]
        messages = grounded_messages(session.task, context, action, examples)
        body = self._post(messages)
        try:
            content = _content(body)
            self.completion_chars += len(content)
            observation, terminal = _answer(content)
        except SessionError:
            self.failures += 1
            raise
        return Prediction(
            observation=observation,
            terminal=terminal,
            grounding=tuple(t.id for t in examples),
        )

    def _request(self, messages: list[dict[str, str]]) -> urllib.request.Request:
        payload = {"model": self.config.model, "messages": messages, "temperature": 0}
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        return urllib.request.Request(
            self.config.endpoint,
            data=json.dumps(payload, ensure_ascii=False).encode(),
            headers=headers,
            method="POST",
        )

    def _post(self, messages: list[dict[str, str]]) -> bytes:
        """Send one request; the response body, or a counted ``provider_failed``."""
        request = self._request(messages)
        self.calls += 1
        self.prompt_chars += sum(len(m["content"]) for m in messages)
        try:
            body = self._send(request)
        except SessionError:
            self.failures += 1
            raise
        return body

    def _send(self, request: urllib.request.Request) -> bytes:
        where = f"POST {self.config.endpoint}"
        try:
            with self.opener(request, timeout=self.config.timeout) as response:
                status = getattr(response, "status", None)
                body: bytes = response.read(_MAX_BODY + 1)
        except urllib.error.HTTPError as exc:
            with exc:
                detail = _snippet(exc.read(_SNIPPET * 4) if exc.fp else b"")
            hint = {
                401: "check the API key (WORLDLINE_LLM_KEY)",
                403: "check the API key (WORLDLINE_LLM_KEY) and its permissions",
                404: "check the URL (the API base, e.g. http://host:port/v1) and "
                "the model name",
                429: "the server is rate limiting; retry later or lower the load",
            }.get(exc.code, "check the server's logs")
            raise _failed(f"{where} -> HTTP {exc.code}: {detail}; {hint}") from None
        except TimeoutError:
            raise self._timed_out(where) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise self._timed_out(where) from None
            raise _failed(
                f"{where} failed: {exc.reason}; check that the server is running and "
                "the URL is right"
            ) from None
        except (http.client.HTTPException, OSError) as exc:
            raise _failed(
                f"{where} failed: {type(exc).__name__}: {exc}; check that the server "
                "is running and speaks HTTP"
            ) from None
        if status != 200:
            raise _failed(
                f"{where} -> HTTP {status}: {_snippet(body)}; a chat completion "
                "answers 200"
            )
        if len(body) > _MAX_BODY:
            raise _failed(
                f"{where} answered more than {_MAX_BODY} bytes; check the URL and the "
                "server"
            )
        return body

    def _timed_out(self, where: str) -> SessionError:
        return _failed(
            f"{where} timed out after {self.config.timeout:g}s; check that the server "
            "is up, or raise the timeout"
        )

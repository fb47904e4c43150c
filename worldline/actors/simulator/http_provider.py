"""An optional world-model provider that asks an OpenAI-compatible chat-completions
endpoint for the user's (or environment's) reply.

It retrieves real transitions exactly as :class:`~worldline.actors.simulator.provider.
LocalProvider` does (task + session text + candidate action, the session's excluded
lineages removed before scoring, fit partition only, only transitions of the action's
kind: tool results for a tool call, messages for a message) and sends a grounded
prompt: the task, the context so far, the visible assistant action (or tool call) and
the numbered real examples (action -> observation, never their ids or lineages). The
model answers as JSON ``{"observation": "...", "terminal": true|false}``; plain text is
accepted as the observation of a non-terminal turn.

Nothing is ever made up on failure: an HTTP error, a timeout, a non-200 status or a
body that is not a chat completion raises ``SessionError("provider_failed", ...)``
naming what happened and how to fix it, and counts a failure. No retrieved
transition, or none above the floor when no best guess was asked for (see
``provider.admitted``), raises ``SessionError("no_grounding", ...)`` without calling
the model.

Costs are tracked apart from the candidate's: :attr:`HttpProvider.calls`,
``failures``, ``prompt_chars`` and ``completion_chars``. Only the standard library
is used (``urllib.request``, through :mod:`worldline.actors.runtime.llm`, the client the
extractor shares); the endpoint is configured by :class:`HttpConfig`,
e.g. from ``WORLDLINE_LLM_URL``, ``WORLDLINE_LLM_MODEL`` and ``WORLDLINE_LLM_KEY``.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from worldline.actors.runtime import llm
from worldline.actors.runtime.llm import (
    ENV_KEY,
    ENV_MODEL,
    ENV_URL,
    LlmConfig,
    LlmError,
)
from worldline.actors.simulator.provider import admitted, grounding, judged
from worldline.actors.simulator.sessions import Kind, Prediction, Session, SessionError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from worldline.actors.simulator.index import TransitionIndex
    from worldline.protocols.messages import Transition

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

PROMPT_VERSION: Final = "grounded-v2"  # change it whenever the prompt text changes

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
class HttpConfig(LlmConfig):
    """Where and how to reach an OpenAI-compatible endpoint (see
    :class:`~worldline.actors.runtime.llm.LlmConfig`, the same ``WORLDLINE_LLM_*``
    variables the extractor reads), plus ``k``: how many real transitions ground each
    prediction.
    """

    k: int = 5

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.k < 1:
            raise ValueError(f"k {self.k}: at least 1 real transition per prediction")


def grounded_messages(
    task: str,
    context: str,
    action: str,
    examples: Sequence[Transition],
    kind: Kind = "message",
) -> list[dict[str, str]]:
    """The chat messages for one prediction: a fixed system message, then the task,
    the context, the assistant's action and the numbered real examples (in the
    order given, i.e. best first). Only the examples' actions, observations and
    whether the trace ended there are shown, never ids or lineages. For a tool call
    (``kind="tool"``) the action is the call and the reply is the tool's result.
    The same inputs always give the same messages."""
    latest = (
        f"The assistant's latest tool call (reply with the tool's result):\n{action}"
        if kind == "tool"
        else f"The assistant's latest message:\n{action}"
    )
    parts = [
        f"Task:\n{task}",
        f"Conversation so far:\n{context if context else '(nothing yet)'}",
        latest,
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


def _content(body: bytes) -> str:
    """``choices[0].message.content`` of a chat completion, or a named failure."""
    try:
        return llm.content_of(body)
    except LlmError as exc:
        raise _failed(str(exc)) from None


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
    candidate = llm.unfenced(content)
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
            f"{llm.snippet(candidate)}; it may have been cut off (raise the server's "
            "max tokens) or the model does not follow the format"
        ) from None
    if not isinstance(answer, dict):
        raise _failed(
            f"the model's answer is not a JSON object: {llm.snippet(candidate)}"
        )
    observation = answer.get("observation")
    terminal = answer.get("terminal", False)
    if not isinstance(observation, str) or not observation.strip():
        raise _failed(
            'the model\'s JSON answer has no non-empty string "observation": '
            f"{llm.snippet(candidate)}"
        )
    if not isinstance(terminal, bool):
        raise _failed(
            f'the model\'s JSON answer has "terminal": {terminal!r}, not true or false'
        )
    return observation, terminal


class HttpProvider:
    """A :data:`~worldline.actors.simulator.sessions.Provider` backed by an
    OpenAI-compatible chat-completions endpoint, grounded on the top ``config.k`` real
    transitions.

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

    def __call__(
        self,
        session: Session,
        action: str,
        kind: Kind = "message",
        *,
        best_guess: bool = False,
    ) -> Prediction:
        context = session.text()
        scored = grounding(self.index, session, action, kind, self.config.k)
        examples = admitted(scored, best_guess)  # below the floor: refused first
        messages = grounded_messages(session.task, context, action, examples, kind)
        body = self._post(messages)
        try:
            content = _content(body)
            self.completion_chars += len(content)
            observation, terminal = _answer(content)
        except SessionError:
            self.failures += 1
            raise
        prediction = Prediction(
            observation=observation,
            terminal=terminal,
            grounding=tuple(t.id for t in examples),
            support=tuple(t.support for t in examples),
        )
        return judged(prediction, scored)

    def _post(self, messages: list[dict[str, str]]) -> bytes:
        """Send one request; the response body, or a counted ``provider_failed``."""
        request = llm.chat_request(self.config, messages)
        self.calls += 1
        self.prompt_chars += sum(len(m["content"]) for m in messages)
        try:
            body = self._send(request)
        except SessionError:
            self.failures += 1
            raise
        return body

    def _send(self, request: Any) -> bytes:
        try:
            return llm.send(self.config, request, self.opener)
        except LlmError as exc:
            raise _failed(str(exc)) from None

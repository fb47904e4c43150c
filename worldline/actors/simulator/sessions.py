"""World-model sessions: bounded, in-memory, pure. A session holds a task, a context
and a transcript; each step takes one assistant message and asks a provider for what
comes next, then appends both, or fails by name without changing anything:

* a text message gets the user's (or environment's) reply, one ``role: "user"``
  message;
* a message with OpenAI-style ``tool_calls`` gets one ``role: "tool"`` result per
  call, keyed by the call's id (``tool_call_id``), each predicted from real tool
  results, in the order of the calls.

A provider refuses (``no_grounding``, with the nearest score) what nothing recorded
is close enough to, unless the step asks for a best guess, answered and flagged
``grounded=False`` (``provider.py``, ``grounded.py``).

Ending or expiring a session removes its transcript; a session idle for
``limits.expiry`` seconds (:data:`DEFAULT_EXPIRY`, 10 minutes, unless configured)
expires, and then answers ``session_expired`` (for a while: the last ``4 x sessions``
expired ids are kept). Each client may hold at most ``per_client`` open sessions (16
of 256), so one client cannot take every slot, and only the client that opened a
session may step or end it. Who the client is, the caller decides: the service passes
the requester the server vouches for on a secured deploy, or, on the open bus, the
agent the start claims (see ``worldline/actors/runtime/requester.py``). The clock and
the random source are arguments.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from worldline.protocols.simulator import Limits

if TYPE_CHECKING:
    import random

__all__ = [
    "DEFAULT_EXPIRY",
    "DEFAULT_PER_CLIENT",
    "SESSION_LIMITS",
    "Call",
    "Kind",
    "Prediction",
    "Provider",
    "Session",
    "SessionError",
    "Sessions",
    "accepted",
    "accepted_text",
    "render",
]

DEFAULT_PER_CLIENT: Final = 16  # open sessions one client may hold (of 256)
# Seconds a session lives without a step. An agent loop steps within seconds; an
# abandoned session holds a slot of its client's quota until then.
DEFAULT_EXPIRY: Final = 600.0
# The limits a simulator runs with (the wire's ``Limits()`` says 3,600 s for a reply
# that omits ``expiry``; this one is always sent).
SESSION_LIMITS: Final = Limits(expiry=DEFAULT_EXPIRY)

Kind = Literal["message", "tool"]


class SessionError(ValueError):
    """A step or start refused by name (``name`` is stable, the message says why;
    ``similarity``: for ``no_grounding``, the nearest neighbour's score)."""

    def __init__(
        self, name: str, message: str, *, similarity: float | None = None
    ) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message
        self.similarity = similarity


@dataclass(frozen=True)
class Prediction:
    """What a world-model provider answered for one action."""

    observation: str
    terminal: bool
    grounding: tuple[str, ...]  # ids of the real transitions it was conditioned on
    # False: a best guess the caller asked for, no neighbour above the floor
    grounded: bool = True
    similarity: float | None = None  # the nearest neighbour's score (the lowest)
    note: str = ""  # why it is not grounded
    support: tuple[int, ...] = ()  # how many times each was recorded


@dataclass(frozen=True)
class Call:
    """One tool call of an assistant message: its id, the function's name, and the
    action retrieval reads (``name(arguments)``, as traces render a call)."""

    id: str
    name: str
    action: str


def render(message: dict[str, Any]) -> str:
    """One transcript message as a line of context, the way trace adapters render a
    conversation (``role: text``, an assistant's calls as ``name(arguments)`` lines),
    so a session's context reads like the contexts of the real transitions."""
    calls = [c.action for c in _calls(message)] if message.get("tool_calls") else []
    text = message.get("content") if isinstance(message.get("content"), str) else ""
    body = "\n".join([text, *calls] if text else calls)
    return f"{message['role']}: {body}"


@dataclass
class Session:
    """One bounded simulated episode (in memory only)."""

    id: str
    world: str
    task: str
    context: str
    exclude_lineages: tuple[str, ...]
    touched: datetime
    transcript: list[dict[str, Any]] = field(default_factory=list)
    size: int = 0  # transcript bytes
    closed: bool = False
    client: str = ""  # who opened it: the key its quota and ownership count by
    agent: str = ""  # the agent it names (for errors)

    def text(self) -> str:
        """The context plus the transcript so far, as retrieval reads it."""
        lines = [self.context] if self.context else []
        lines += [render(m) for m in self.transcript]
        return "\n".join(lines)


class Provider(Protocol):
    """Predicts what follows ``action`` in ``session``: a user (or environment)
    message for ``kind="message"``, a tool's result for ``kind="tool"``."""

    def __call__(
        self,
        session: Session,
        action: str,
        kind: Kind = "message",
        *,
        best_guess: bool = False,
    ) -> Prediction: ...


def _size(text: str) -> int:
    return len(text.encode())


class Sessions:
    """The active sessions of one simulator process, with their limits."""

    def __init__(
        self,
        limits: Limits = SESSION_LIMITS,
        *,
        rng: random.Random,
        per_client: int = DEFAULT_PER_CLIENT,
    ) -> None:
        if per_client < 1:
            raise ValueError(f"per_client {per_client}: at least 1")
        self.limits = limits
        self.rng = rng
        self.per_client = per_client
        self.active: dict[tuple[str, str], Session] = {}
        # Recently expired (world, id), oldest first: they answer session_expired.
        self.expired: OrderedDict[tuple[str, str], None] = OrderedDict()

    def expire(self, now: datetime) -> None:
        """Remove every session idle for longer than the expiry."""
        horizon = timedelta(seconds=self.limits.expiry)
        for key in [k for k, s in self.active.items() if now - s.touched > horizon]:
            self.end(*key)
            self.expired[key] = None
        while len(self.expired) > 4 * self.limits.sessions:
            self.expired.popitem(last=False)

    def start(
        self,
        world: str,
        task: str,
        context: str,
        now: datetime,
        exclude_lineages: tuple[str, ...] = (),
        client: str = "",
        agent: str = "",
    ) -> Session:
        """Open a session; refuse oversized task or context, one over the client's
        quota, or one too many. ``client`` is who holds the quota and owns the
        session (the service passes who asked, as the server vouches for it);
        ``agent`` only names it in errors."""
        self.expire(now)
        if _size(task) > self.limits.task_bytes:
            raise SessionError(
                "task_too_large",
                f"task is {_size(task)} bytes, over {self.limits.task_bytes}",
            )
        if _size(context) > self.limits.context_bytes:
            raise SessionError(
                "context_too_large",
                f"context is {_size(context)} bytes, over {self.limits.context_bytes}",
            )
        held = sum(1 for s in self.active.values() if s.client == client)
        if held >= self.per_client:
            raise SessionError(
                "session_quota",
                f"client {agent or client or '(anonymous)'!r} holds {held} open "
                "sessions (counted by who asks, as the server vouches for it), the "
                f"most one client may hold (quota {self.per_client} of "
                f"{self.limits.sessions}); end one (sim_end, or let `worldline sim "
                "session` finish) or wait until one has been idle for "
                f"{self.limits.expiry:g}s",
            )
        if len(self.active) >= self.limits.sessions:
            raise SessionError(
                "too_many_sessions",
                f"{self.limits.sessions} sessions are active; end one first",
            )
        session_id = f"sim-{self.rng.getrandbits(96):024x}"
        session = Session(
            id=session_id,
            world=world,
            task=task,
            context=context,
            exclude_lineages=exclude_lineages,
            touched=now,
            client=client,
            agent=agent,
        )
        self.active[(world, session_id)] = session
        return session

    def get(
        self, world: str, session_id: str, now: datetime, client: str | None = None
    ) -> Session:
        """The active session, after expiring the idle ones. ``client``: who asks;
        a session another client opened is refused (None: not checked, for a caller
        nothing vouches for, who holds the session id as its only key)."""
        self.expire(now)
        session = self.active.get((world, session_id))
        if session is None:
            if (world, session_id) in self.expired:
                raise SessionError(
                    "session_expired",
                    f"session {session_id!r} expired after {self.limits.expiry:g}s "
                    "without a step, and its transcript is gone; start a new one",
                )
            raise SessionError(
                "unknown_session",
                f"no active session {session_id!r} (ended, or never started)",
            )
        if client is not None and client != session.client:
            raise SessionError(
                "not_your_session",
                f"session {session_id!r} was opened by another client; only the "
                "client that started it may step or end it",
            )
        return session

    def step(
        self,
        world: str,
        session_id: str,
        message: Any,
        now: datetime,
        provider: Provider,
        client: str | None = None,
        *,
        best_guess: bool = False,
    ) -> tuple[list[dict[str, str]], Prediction]:
        """Take one assistant message; return what follows it and the prediction.

        A text message gets one user message; a message with ``tool_calls`` gets one
        tool result per call, in order, each ``{"role": "tool", "tool_call_id",
        "content"}``. The returned prediction is terminal if any of them is, and its
        grounding is every transition they were conditioned on (in order, once).

        The message is checked before retrieval or the provider. Every limit is
        checked before the transcript changes; nothing is ever truncated. ``client``
        is who asks, as :meth:`get` checks it. An action nothing recorded is close
        enough to is refused as ``no_grounding`` (with the nearest score), unless
        ``best_guess``: then the nearest answers, and the prediction says it is not
        grounded.
        """
        session = self.get(world, session_id, now, client)
        action = accepted(message)
        calls = action if isinstance(action, list) else []
        if len(session.transcript) + 1 + max(1, len(calls)) > self.limits.messages:
            raise SessionError(
                "too_many_messages",
                f"the transcript holds {len(session.transcript)} messages; this step "
                f"would pass {self.limits.messages}",
            )
        replies: list[dict[str, str]] = []
        predictions: list[Prediction] = []
        if isinstance(action, str):
            prediction = _ask(provider, session, action, "message", best_guess)
            predictions.append(prediction)
            replies.append({"role": "user", "content": prediction.observation})
            sent: dict[str, Any] = {"role": "assistant", "content": action}
        else:
            for call in calls:  # every call reads the context before the message
                prediction = _ask(provider, session, call.action, "tool", best_guess)
                predictions.append(prediction)
                replies.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "content": prediction.observation,
                    }
                )
            sent = _stored(message)
        for p in predictions:
            if _size(p.observation) > self.limits.observation_bytes:
                raise SessionError(
                    "observation_too_large",
                    f"the predicted observation is {_size(p.observation)} bytes,"
                    f" over {self.limits.observation_bytes}",
                )
        body = render(sent).removeprefix("assistant: ")  # the text and the calls
        grown = session.size + _size(body)
        grown += sum(_size(p.observation) for p in predictions)
        if grown > self.limits.transcript_bytes:
            raise SessionError(
                "transcript_too_large",
                f"the transcript would be {grown} bytes, over "
                f"{self.limits.transcript_bytes}",
            )
        session.transcript += [sent, *replies]
        session.size = grown
        session.touched = now
        # support per grounding id (a provider that leaves it out: 1 each)
        pairs = (zip(p.grounding, p.support, strict=False) for p in predictions)
        seen = {g: n for found in pairs for g, n in found}
        grounding = tuple(dict.fromkeys(g for p in predictions for g in p.grounding))
        scores = [p.similarity for p in predictions if p.similarity is not None]
        labels = [f"{c.id}: " for c in calls] if calls else [""]
        notes = [
            f"{a}{p.note}" for a, p in zip(labels, predictions, strict=True) if p.note
        ]
        combined = Prediction(
            observation=predictions[0].observation if len(predictions) == 1 else "",
            terminal=any(p.terminal for p in predictions),
            grounding=grounding,
            grounded=all(p.grounded for p in predictions),
            similarity=min(scores) if scores else None,
            note="; ".join(notes),
            support=tuple(seen.get(g, 1) for g in grounding),
        )
        if combined.terminal:
            self.end(world, session_id)
        return replies, combined

    def end(self, world: str, session_id: str) -> None:
        """Close a session and drop its transcript."""
        session = self.active.pop((world, session_id), None)
        if session is not None:
            session.transcript.clear()
            session.closed = True


def _ask(
    provider: Provider, session: Session, action: str, kind: Kind, best_guess: bool
) -> Prediction:
    """One prediction; ``best_guess`` is passed only when asked for, so a provider
    that always answers need not take it."""
    if best_guess:
        return provider(session, action, kind, best_guess=True)
    return provider(session, action, kind)


def _stored(message: dict[str, Any]) -> dict[str, Any]:
    """The assistant message as the transcript keeps it: role, text, calls."""
    content = message.get("content")
    kept: dict[str, Any] = {"role": "assistant", "content": content}
    kept["tool_calls"] = message["tool_calls"]
    return kept


def _arguments(value: Any, where: str) -> str:
    """A call's arguments as written: a JSON string (or an already decoded object,
    rendered with sorted keys, as the trace adapters do)."""
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    if not isinstance(value, str):
        raise SessionError(
            "bad_tool_call",
            f"{where}: arguments are a {type(value).__name__}, not a JSON string",
        )
    try:
        json.loads(value)
    except ValueError as exc:
        raise SessionError(
            "bad_tool_call", f"{where}: arguments are not valid JSON ({exc})"
        ) from None
    return value


def _calls(message: dict[str, Any]) -> list[Call]:
    """The calls of a message's ``tool_calls``, checked (ids present and unique, a
    function with a name and JSON arguments), or a ``bad_tool_call`` refusal."""
    raw = message.get("tool_calls")
    if not isinstance(raw, list) or not raw:
        raise SessionError("bad_tool_call", "tool_calls must be a non-empty list")
    calls: list[Call] = []
    for n, item in enumerate(raw):
        where = f"tool call {n}"
        if not isinstance(item, dict):
            raise SessionError("bad_tool_call", f"{where} is not an object")
        call_id = item.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise SessionError(
                "bad_tool_call", f"{where} has no id: its result is keyed by it"
            )
        if item.get("type", "function") != "function":
            raise SessionError(
                "bad_tool_call",
                f'{where} has type {item.get("type")!r}; only "function" calls are '
                "simulated",
            )
        function = item.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise SessionError(
                "bad_tool_call",
                f'{where} has no "function": {{"name": ..., "arguments": ...}}',
            )
        assert isinstance(function, dict)
        args = _arguments(function.get("arguments", "{}"), f"{where} ({name})")
        if any(c.id == call_id for c in calls):
            raise SessionError(
                "bad_tool_call", f"{where} reuses the id {call_id!r} of an earlier call"
            )
        calls.append(Call(id=call_id, name=name, action=f"{name}({args})"))
    return calls


def accepted(message: Any) -> str | list[Call]:
    """What a step takes: the text of a non-empty assistant text message, or the
    checked calls of an assistant message with ``tool_calls``; else a named
    refusal."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        role = message.get("role") if isinstance(message, dict) else type(message)
        raise SessionError(
            "not_assistant", f"a step takes an assistant message, not {role!r}"
        )
    if message.get("function_call"):
        raise SessionError(
            "function_call_unsupported",
            "legacy function_call is not simulated; send the call as tool_calls "
            '([{"id", "type": "function", "function": {"name", "arguments"}}])',
        )
    content = message.get("content")
    if message.get("tool_calls") is not None:
        if content is not None and not isinstance(content, str):
            raise SessionError(
                "not_text", "only plain text content is simulated (no parts, no audio)"
            )
        return _calls(message)
    if not isinstance(content, str):
        raise SessionError(
            "not_text", "only plain text content is simulated (no parts, no audio)"
        )
    if not content.strip():
        raise SessionError("empty_message", "the assistant message is empty")
    return content


def accepted_text(message: Any) -> str:
    """The text of a non-empty assistant text message, or a named refusal (a
    message with tool calls is refused as ``tool_calls_unsupported`` here: use
    :func:`accepted` where calls are simulated)."""
    action = accepted(message)
    if isinstance(action, list):
        raise SessionError("tool_calls_unsupported", "a text step takes no tool calls")
    return action

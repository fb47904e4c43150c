"""World-model sessions: bounded, in-memory, pure. A session holds a task, a context
and a transcript; each step takes one assistant text message, asks a provider for the
user's (or environment's) reply, and appends both, or fails by name without changing
anything. Ending or expiring a session removes its transcript. The clock and the random
source are arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from worldline.protocols.simulator import DEFAULT_LIMITS, Limits

if TYPE_CHECKING:
    import random

__all__ = [
    "Prediction",
    "Provider",
    "Session",
    "SessionError",
    "Sessions",
]


class SessionError(ValueError):
    """A step or start refused by name (``name`` is stable, the message says why)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


@dataclass(frozen=True)
class Prediction:
    """What a world-model provider answered for one action."""

    observation: str
    terminal: bool
    grounding: tuple[str, ...]  # ids of the real transitions it was conditioned on


@dataclass
class Session:
    """One bounded simulated episode (in memory only)."""

    id: str
    world: str
    task: str
    context: str
    exclude_lineages: tuple[str, ...]
    touched: datetime
    transcript: list[dict[str, str]] = field(default_factory=list)
    size: int = 0  # transcript bytes
    closed: bool = False

    def text(self) -> str:
        """The context plus the transcript so far, as retrieval reads it."""
        lines = [self.context] if self.context else []
        lines += [f"{m['role']}: {m['content']}" for m in self.transcript]
        return "\n".join(lines)


Provider = Callable[[Session, str], Prediction]


def _size(text: str) -> int:
    return len(text.encode())


class Sessions:
    """The active sessions of one simulator process, with their limits."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS, *, rng: random.Random) -> None:
        self.limits = limits
        self.rng = rng
        self.active: dict[tuple[str, str], Session] = {}

    def expire(self, now: datetime) -> None:
        """Remove every session idle for longer than the expiry."""
        horizon = timedelta(seconds=self.limits.expiry)
        for key in [k for k, s in self.active.items() if now - s.touched > horizon]:
            del self.active[key]

    def start(
        self,
        world: str,
        task: str,
        context: str,
        now: datetime,
        exclude_lineages: tuple[str, ...] = (),
    ) -> Session:
        """Open a session; refuse oversized task or context, or one too many."""
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
        )
        self.active[(world, session_id)] = session
        return session

    def get(self, world: str, session_id: str, now: datetime) -> Session:
        self.expire(now)
        session = self.active.get((world, session_id))
        if session is None:
            raise SessionError(
                "unknown_session",
                f"no active session {session_id!r} (ended, expired, or never started)",
            )
        return session

    def step(
        self,
        world: str,
        session_id: str,
        message: Any,
        now: datetime,
        provider: Provider,
    ) -> tuple[dict[str, str], Prediction]:
        """Take one assistant message, return the predicted user message.

        The message is checked before retrieval or the provider: only a non-empty
        assistant text message is accepted. Every limit is checked before the
        transcript changes; nothing is ever truncated.
        """
        session = self.get(world, session_id, now)
        action = accepted_text(message)
        if len(session.transcript) + 2 > self.limits.messages:
            raise SessionError(
                "too_many_messages",
                f"the transcript holds {len(session.transcript)} messages; one more "
                f"turn would pass {self.limits.messages}",
            )
        prediction = provider(session, action)
        if _size(prediction.observation) > self.limits.observation_bytes:
            raise SessionError(
                "observation_too_large",
                f"the predicted observation is {_size(prediction.observation)} bytes,"
                f" over {self.limits.observation_bytes}",
            )
        grown = session.size + _size(action) + _size(prediction.observation)
        if grown > self.limits.transcript_bytes:
            raise SessionError(
                "transcript_too_large",
                f"the transcript would be {grown} bytes, over "
                f"{self.limits.transcript_bytes}",
            )
        reply = {"role": "user", "content": prediction.observation}
        session.transcript += [{"role": "assistant", "content": action}, reply]
        session.size = grown
        session.touched = now
        if prediction.terminal:
            self.end(world, session_id)
        return reply, prediction

    def end(self, world: str, session_id: str) -> None:
        """Close a session and drop its transcript."""
        session = self.active.pop((world, session_id), None)
        if session is not None:
            session.transcript.clear()
            session.closed = True


def accepted_text(message: Any) -> str:
    """The text of a non-empty assistant text message, or a named refusal."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        role = message.get("role") if isinstance(message, dict) else type(message)
        raise SessionError(
            "not_assistant", f"a step takes an assistant message, not {role!r}"
        )
    if message.get("tool_calls") or message.get("function_call"):
        raise SessionError(
            "tool_calls_unsupported",
            "tool and function calls are not simulated in a text session",
        )
    content = message.get("content")
    if not isinstance(content, str):
        raise SessionError(
            "not_text", "only plain text content is simulated (no parts, no audio)"
        )
    if not content.strip():
        raise SessionError("empty_message", "the assistant message is empty")
    return content

"""Pair actions with observations across one conversation of a trace: an assistant
text and the user message after it, or a tool call and its result (by id, or by name
and order). Each pair becomes a :class:`~worldline.protocols.messages.Transition`; a
record that cannot be used becomes a :class:`~worldline.protocols.simulator.TraceIssue`.
See ``traces.py``.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Final, Literal

from worldline.protocols.messages import Transition
from worldline.protocols.simulator import TraceIssue

__all__ = ["Conversation", "Pairing", "conversation", "derived_lineage"]

Pairing = Literal["id", "name-order", "turn"]
_OBSERVER_ROLES: Final = frozenset({"user", "tool", "function"})


@dataclass(frozen=True)
class Conversation:
    index: int  # its position in the file (the line, for JSONL)
    messages: list[object]
    prefix: str  # what a source reference starts with, before the message index
    lineage: str | None = None  # declared by the trace ("lineage"), else derived
    group: str | None = None  # declared by the trace ("group"), else the lineage

    def lineage_of(self, name: str) -> str:
        """The declared lineage, else one derived from the file and position."""
        return self.lineage if self.lineage else derived_lineage(name, self.index)

    def group_of(self, name: str) -> str:
        """The declared group, else the conversation's own lineage."""
        return self.group if self.group else self.lineage_of(name)


def derived_lineage(name: str, index: int) -> str:
    """The lineage of a conversation that declares none: ``lin-`` and the first 16
    hex digits of the sha256 of ``"<file name>#<position in the file>"`` (one per
    conversation: per file, or per JSONL line)."""
    digest = hashlib.sha256(f"{name}#{index}".encode()).hexdigest()[:16]
    return f"lin-{digest}"


@dataclass
class _Call:
    index: int  # the message that made it
    action: str  # "name(arguments)"
    context: str
    usable: bool  # False: a malformed call, already reported as an issue


@dataclass
class _Builder:
    """Pairs actions with observations across one conversation."""

    conv: Conversation
    task: str
    lineage: str
    transitions: list[Transition] = field(default_factory=list)
    obs_index: list[int] = field(default_factory=list)  # observation message, each
    issues: list[TraceIssue] = field(default_factory=list)

    def source(self, index: int) -> str:
        return f"{self.conv.prefix}#{index}"

    def issue(self, index: int, reason: str) -> None:
        self.issues.append(TraceIssue(source=self.source(index), reason=reason))

    def emit(
        self,
        *,
        action_index: int,
        context: str,
        action: str,
        observation_index: int,
        observation: str,
        pairing: Pairing,
    ) -> None:
        material = json.dumps(
            [self.lineage, context, action, observation, pairing], ensure_ascii=False
        )
        digest = hashlib.sha256(material.encode("utf-8")).hexdigest()[:24]
        self.transitions.append(
            Transition(
                id=f"tr-{digest}",
                lineage=self.lineage,
                task=self.task,
                context=context,
                action=action,
                observation=observation,
                pairing=pairing,
                source=self.source(action_index),
            )
        )
        self.obs_index.append(observation_index)

    def finished(self) -> list[Transition]:
        """The transitions, the ones on the last observation marked ``final``."""
        if not self.obs_index:
            return []
        last = max(self.obs_index)
        return [
            _replace_final(t) if at == last else t
            for t, at in zip(self.transitions, self.obs_index, strict=True)
        ]


def _replace_final(t: Transition) -> Transition:
    return Transition(
        id=t.id,
        lineage=t.lineage,
        task=t.task,
        context=t.context,
        action=t.action,
        observation=t.observation,
        pairing=t.pairing,
        source=t.source,
        final=True,
    )


def _content(value: object) -> tuple[str, str | None]:
    """The text of a message's content, and the reason it is unusable (or None).

    Content is a string, None (no text), or a list of ``{"type": "text", "text"}``
    parts, joined with newlines. Any other part makes the record unusable."""
    if value is None:
        return "", None
    if isinstance(value, str):
        return value, None
    if not isinstance(value, list):
        return "", f"content is a {type(value).__name__}, not text or a list of parts"
    texts: list[str] = []
    other: list[str] = []
    for part in value:
        if (
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ):
            texts.append(part["text"])
        elif isinstance(part, dict):
            other.append(repr(part.get("type")))
        else:
            other.append(type(part).__name__)
    if other:
        return "\n".join(texts), (
            f"content has non-text parts ({', '.join(other)}): only text is supported"
        )
    return "\n".join(texts), None


def _arguments(value: object) -> tuple[str, str | None]:
    """A call's arguments as written, and why they are malformed (or None). They must
    be a JSON-encoded string (or, leniently, an already decoded object)."""
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, sort_keys=True), None
    if not isinstance(value, str):
        return "", f"arguments are a {type(value).__name__}, not a JSON string"
    try:
        json.loads(value)
    except json.JSONDecodeError as exc:
        return value, f"arguments are not valid JSON ({exc})"
    return value, None


def _function(spec: object) -> tuple[str, str, str | None]:
    """Name, arguments, and the reason the call is malformed (or None)."""
    if not isinstance(spec, dict):
        return "", "", "call has no function object"
    fname = spec.get("name")
    if not isinstance(fname, str) or not fname:
        return "", "", "call has no function name"
    args, problem = _arguments(spec.get("arguments", "{}"))
    return fname, args, problem


def _render(role: str, text: str, calls: list[str]) -> str:
    body = "\n".join([text, *calls] if text else calls)
    return f"{role}: {body}"


def _task(messages: list[object]) -> str:
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "user":
            return _content(m.get("content"))[0]
    return ""


def conversation(
    name: str, conv: Conversation
) -> tuple[list[Transition], list[TraceIssue]]:
    b = _Builder(conv=conv, task=_task(conv.messages), lineage=conv.lineage_of(name))
    lines: list[str] = []  # the conversation so far, one rendered message each
    by_id: dict[str, _Call] = {}  # unanswered calls that declared an id
    by_name: dict[str, deque[_Call]] = {}  # unanswered legacy calls, oldest first
    turn: _Call | None = None  # an assistant text message waiting for the user
    last_observer = max(
        (
            i
            for i, m in enumerate(conv.messages)
            if isinstance(m, dict) and m.get("role") in _OBSERVER_ROLES
        ),
        default=-1,
    )

    for i, message in enumerate(conv.messages):
        waiting, turn = turn, None
        if not isinstance(message, dict):
            b.issue(i, f"message is a {type(message).__name__}, not an object")
            continue
        role = message.get("role")
        if not isinstance(role, str) or not role:
            b.issue(i, "message has no role")
            continue
        text, problem = _content(message.get("content"))
        if problem:
            b.issue(i, problem)
        context = "\n".join(lines)
        rendered_calls: list[str] = []

        if role == "assistant":
            calls = _assistant_calls(b, i, message, context, by_id, by_name)
            rendered_calls = [c.action for c in calls]
            has_calls = bool(message.get("tool_calls")) or (
                message.get("function_call") is not None
            )
            if not has_calls and not problem:
                if text.strip():
                    turn = _Call(i, text, context, usable=True)
                else:
                    b.issue(i, "assistant message has no text and no tool call")
        elif role == "user":
            if waiting is not None and not problem:
                b.emit(
                    action_index=waiting.index,
                    context=waiting.context,
                    action=waiting.action,
                    observation_index=i,
                    observation=text,
                    pairing="turn",
                )
        elif role == "tool":
            _tool_result(b, i, message, text, problem, by_id)
        elif role == "function":
            _function_result(b, i, message, text, problem, by_name)
        lines.append(_render(role, text, rendered_calls))

    # Calls never answered: terminal ones (nothing observed after them) are simply
    # not transitions; one followed by later observations lost its result.
    unanswered = [*by_id.values(), *(c for q in by_name.values() for c in q)]
    for call in sorted(unanswered, key=lambda c: c.index):
        if call.usable and call.index < last_observer:
            b.issue(
                call.index,
                f"tool call {call.action[:80]} was never answered, though the "
                "conversation continues",
            )
    return b.finished(), b.issues


def _assistant_calls(
    b: _Builder,
    i: int,
    message: dict[str, object],
    context: str,
    by_id: dict[str, _Call],
    by_name: dict[str, deque[_Call]],
) -> list[_Call]:
    """Register an assistant message's calls as waiting for their results."""
    calls: list[_Call] = []
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        b.issue(i, f"tool_calls is a {type(tool_calls).__name__}, not a list")
        tool_calls = None
    for n, raw in enumerate(tool_calls or []):
        spec = raw.get("function") if isinstance(raw, dict) else None
        fname, args, problem = _function(spec)
        call_id = raw.get("id") if isinstance(raw, dict) else None
        if not fname:
            b.issue(i, f"tool call {n}: {problem}")
            continue
        call = _Call(i, f"{fname}({args})", context, usable=problem is None)
        calls.append(call)
        if problem:
            b.issue(i, f"tool call {n} ({fname}): {problem}")
        if not isinstance(call_id, str) or not call_id:
            b.issue(i, f"tool call {n} ({fname}) has no id: its result cannot pair")
            continue
        older = by_id.get(call_id)
        if older is not None and older.usable:
            b.issue(
                older.index,
                f"tool call id {call_id!r} was reused at #{i} before any result "
                "answered it: the result pairs with the newer call",
            )
        by_id[call_id] = call
    legacy = message.get("function_call")
    if legacy is not None:
        fname, args, problem = _function(legacy)
        if not fname:
            b.issue(i, f"function_call: {problem}")
        else:
            call = _Call(i, f"{fname}({args})", context, usable=problem is None)
            calls.append(call)
            if problem:
                b.issue(i, f"function_call ({fname}): {problem}")
            by_name.setdefault(fname, deque()).append(call)
    return calls


def _tool_result(
    b: _Builder,
    i: int,
    message: dict[str, object],
    text: str,
    problem: str | None,
    by_id: dict[str, _Call],
) -> None:
    """A ``role: "tool"`` result: it answers the calls named by ``tool_call_id`` (or
    SWE-agent's ``tool_call_ids`` list)."""
    ids_value = message.get("tool_call_ids")
    if ids_value is None and "tool_call_id" in message:
        ids_value = [message["tool_call_id"]]
    if not isinstance(ids_value, list) or not ids_value:
        b.issue(i, "tool result names no call (no tool_call_id or tool_call_ids)")
        return
    for call_id in ids_value:
        call = by_id.pop(call_id, None) if isinstance(call_id, str) else None
        if call is None:
            b.issue(
                i,
                f"tool result for call id {call_id!r} matches no earlier unanswered "
                "tool call",
            )
        else:
            _answer(b, call, i, text, problem, "id", "tool result")


def _function_result(
    b: _Builder,
    i: int,
    message: dict[str, object],
    text: str,
    problem: str | None,
    by_name: dict[str, deque[_Call]],
) -> None:
    """A legacy ``role: "function"`` result: no id, so it answers the oldest
    unanswered call of the same name."""
    fname = message.get("name")
    if not isinstance(fname, str) or not fname:
        b.issue(i, "function result has no name: it cannot pair with a call")
        return
    queue = by_name.get(fname)
    if not queue:
        b.issue(i, f"function result for {fname!r} matches no earlier unanswered call")
        return
    _answer(b, queue.popleft(), i, text, problem, "name-order", "function result")


def _answer(
    b: _Builder,
    call: _Call,
    i: int,
    text: str,
    problem: str | None,
    pairing: Literal["id", "name-order"],
    what: str,
) -> None:
    """Pair a result with its call: a transition, or an issue if the call was bad."""
    if not call.usable:
        b.issue(i, f"{what} answers the malformed call at #{call.index}")
    elif problem is None:
        b.emit(
            action_index=call.index,
            context=call.context,
            action=call.action,
            observation_index=i,
            observation=text,
            pairing=pairing,
        )

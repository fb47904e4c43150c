"""Trace adapters: turn recorded agent conversations into real action -> observation
:class:`~protocols.messages.Transition` records. Pure and deterministic: bytes in,
transitions and issues out, no I/O.

Three input formats are recognized:

``openai``
    OpenAI chat messages: a JSON list of messages, an object with ``"messages"``, or
    JSONL with one ``{"messages": [...]}`` conversation per line. Assistant
    ``tool_calls[].id`` pair with ``role: "tool"`` messages by ``tool_call_id``.
``legacy-function-call``
    The legacy ``function_call`` format (a bare message list, or the ToolBench answer
    wrapper, ``answer_generation.train_messages[-1]``): ``role: "function"`` results
    carry a tool ``name`` and no id, so they pair with calls by name and order (first
    unanswered call of that name first). That pairing is weaker and says so
    (``pairing="name-order"``).
``swe-agent``
    SWE-agent ``.traj`` files: ``{"history": [...]}``, assistant ``tool_calls`` with
    ids, tool results naming the calls they answer in ``tool_call_ids`` (a list).

A transition is an assistant text message and the user message right after it
(``pairing="turn"``), or a tool call and its result (``"id"`` or ``"name-order"``).
An action with no later observation (a terminal answer, ToolBench's final ``Finish``
call) is never a transition. A record that cannot be used becomes a
:class:`~protocols.simulator.TraceIssue`, never a silent skip.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Final, Literal

from protocols.messages import Transition
from protocols.simulator import TraceIssue

__all__ = [
    "FORMATS",
    "TraceFormat",
    "TraceParse",
    "UnknownTraceFormat",
    "parse_trace",
]

TraceFormat = Literal["openai", "legacy-function-call", "swe-agent"]
Pairing = Literal["id", "name-order", "turn"]

FORMATS: Final[tuple[TraceFormat, ...]] = (
    "openai",
    "legacy-function-call",
    "swe-agent",
)
EXPECTED: Final = (
    "expected one of: an OpenAI chat trace (a JSON list of messages, an object with "
    '"messages", or JSONL with one {"messages": [...]} per line); a legacy '
    'function_call trace (a message list with role "function" results, or a '
    "ToolBench answer file with answer_generation.train_messages); or a SWE-agent "
    '.traj file (an object with "history")'
)
_OBSERVER_ROLES: Final = frozenset({"user", "tool", "function"})


class UnknownTraceFormat(ValueError):
    """The bytes are not a trace in any recognized format (the message says which)."""


@dataclass(frozen=True)
class TraceParse:
    """What one trace file yields: its format, transitions, and unusable records."""

    format: TraceFormat
    transitions: list[Transition]
    issues: list[TraceIssue]


@dataclass(frozen=True)
class _Conversation:
    index: int  # its position in the file (the line, for JSONL)
    messages: list[object]
    prefix: str  # what a source reference starts with, before the message index


@dataclass
class _Call:
    index: int  # the message that made it
    action: str  # "name(arguments)"
    context: str
    usable: bool  # False: a malformed call, already reported as an issue


@dataclass
class _Builder:
    """Pairs actions with observations across one conversation."""

    conv: _Conversation
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


def parse_trace(name: str, data: bytes) -> TraceParse:
    """Parse one trace file's bytes (``name`` only labels sources and lineages).

    Raises :class:`UnknownTraceFormat` for bytes that are not UTF-8 JSON (or JSONL)
    in one of the three recognized shapes.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnknownTraceFormat(f"{name}: not UTF-8 text ({exc}); {EXPECTED}") from exc
    issues: list[TraceIssue] = []
    try:
        doc: object = json.loads(text)
    except json.JSONDecodeError as exc:
        fmt, convs = _jsonl(name, text, exc, issues)
    else:
        fmt, convs = _shape(name, doc, issues)
    transitions: list[Transition] = []
    for conv in convs:
        found, problems = _conversation(name, conv)
        transitions.extend(found)
        issues.extend(problems)
    return TraceParse(format=fmt, transitions=transitions, issues=issues)


# --- shapes -----------------------------------------------------------------------


def _shape(
    name: str, doc: object, issues: list[TraceIssue]
) -> tuple[TraceFormat, list[_Conversation]]:
    """Recognize a whole-file JSON document."""
    if isinstance(doc, list):
        if doc and not any(isinstance(m, dict) for m in doc):
            raise UnknownTraceFormat(
                f"{name}: a JSON list with no message objects in it; {EXPECTED}"
            )
        return _message_format(doc), [_Conversation(0, doc, name)]
    if not isinstance(doc, dict):
        raise UnknownTraceFormat(
            f"{name}: a JSON {type(doc).__name__}, not a list or object; {EXPECTED}"
        )
    if "history" in doc:
        history = doc["history"]
        if not isinstance(history, list):
            raise UnknownTraceFormat(
                f'{name}: "history" is a {type(history).__name__}, not a list of '
                f"messages; {EXPECTED}"
            )
        return "swe-agent", [_Conversation(0, history, name)]
    if "messages" in doc:
        messages = doc["messages"]
        if not isinstance(messages, list):
            raise UnknownTraceFormat(
                f'{name}: "messages" is a {type(messages).__name__}, not a list; '
                f"{EXPECTED}"
            )
        return _message_format(messages), [_Conversation(0, messages, name)]
    generation = doc.get("answer_generation")
    if isinstance(generation, dict):
        return "legacy-function-call", _toolbench(name, generation, issues)
    raise UnknownTraceFormat(
        f"{name}: a JSON object with keys {sorted(doc)[:8]!r}, none of "
        f'"messages", "history" or "answer_generation"; {EXPECTED}'
    )


def _toolbench(
    name: str, generation: dict[str, object], issues: list[TraceIssue]
) -> list[_Conversation]:
    """ToolBench's answer wrapper: the full conversation is the last (longest) entry
    of ``train_messages``, each earlier entry being a prefix of it."""
    train = generation.get("train_messages")
    if not isinstance(train, list) or not train or not isinstance(train[-1], list):
        valid = generation.get("valid_data")
        issues.append(
            TraceIssue(
                source=f"{name}#answer_generation",
                reason=(
                    "ToolBench answer has no usable answer_generation.train_messages "
                    f"(valid_data: {json.dumps(valid)}): no conversation to read"
                ),
            )
        )
        return []
    return [_Conversation(0, train[-1], name)]


def _jsonl(
    name: str, text: str, error: json.JSONDecodeError, issues: list[TraceIssue]
) -> tuple[TraceFormat, list[_Conversation]]:
    """JSONL: one ``{"messages": [...]}`` conversation per line. A line that is not one
    is an issue, provided at least one line is."""
    convs: list[_Conversation] = []
    bad: list[TraceIssue] = []
    for number, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        source = f"{name}:{number}"
        try:
            record: object = json.loads(line)
        except json.JSONDecodeError as exc:
            bad.append(TraceIssue(source=source, reason=f"line is not JSON: {exc}"))
            continue
        messages = record.get("messages") if isinstance(record, dict) else None
        if not isinstance(messages, list):
            bad.append(
                TraceIssue(
                    source=source,
                    reason='line is not a {"messages": [...]} conversation object',
                )
            )
            continue
        convs.append(_Conversation(number, messages, source))
    if not convs:
        raise UnknownTraceFormat(
            f"{name}: not JSON ({error}) and no line is a JSONL "
            f'{{"messages": [...]}} conversation; {EXPECTED}'
        )
    issues.extend(bad)
    kinds = {_message_format(c.messages) for c in convs}
    legacy = kinds == {"legacy-function-call"}
    return ("legacy-function-call" if legacy else "openai"), convs


def _message_format(messages: list[object]) -> TraceFormat:
    """A bare message list is legacy when it uses ``function_call``/``function``."""
    for m in messages:
        if isinstance(m, dict) and (
            m.get("role") == "function" or m.get("function_call") is not None
        ):
            return "legacy-function-call"
    return "openai"


# --- one conversation --------------------------------------------------------------


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


def _conversation(
    name: str, conv: _Conversation
) -> tuple[list[Transition], list[TraceIssue]]:
    lineage_hash = hashlib.sha256(f"{name}#{conv.index}".encode()).hexdigest()[:16]
    b = _Builder(conv=conv, task=_task(conv.messages), lineage=f"lin-{lineage_hash}")
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

"""Trace adapters: turn recorded agent conversations into real action -> observation
:class:`~worldline.protocols.messages.Transition` records. Pure and deterministic: bytes
in, transitions and issues out, no I/O.

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
:class:`~worldline.protocols.simulator.TraceIssue`, never a silent skip.

Recognizing a file's shape is here; pairing actions with observations across one
conversation is ``pairing.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from worldline.actors.extractor.pairing import Conversation, conversation
from worldline.protocols.simulator import TraceIssue

if TYPE_CHECKING:
    from worldline.protocols.messages import Transition

__all__ = [
    "FORMATS",
    "TraceFormat",
    "TraceParse",
    "UnknownTraceFormat",
    "parse_trace",
]

TraceFormat = Literal["openai", "legacy-function-call", "swe-agent"]

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


class UnknownTraceFormat(ValueError):
    """The bytes are not a trace in any recognized format (the message says which)."""


@dataclass(frozen=True)
class TraceParse:
    """What one trace file yields: its format, transitions, and unusable records."""

    format: TraceFormat
    transitions: list[Transition]
    issues: list[TraceIssue]


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
        found, problems = conversation(name, conv)
        transitions.extend(found)
        issues.extend(problems)
    return TraceParse(format=fmt, transitions=transitions, issues=issues)


# --- shapes -----------------------------------------------------------------------


def _shape(
    name: str, doc: object, issues: list[TraceIssue]
) -> tuple[TraceFormat, list[Conversation]]:
    """Recognize a whole-file JSON document."""
    if isinstance(doc, list):
        if doc and not any(isinstance(m, dict) for m in doc):
            raise UnknownTraceFormat(
                f"{name}: a JSON list with no message objects in it; {EXPECTED}"
            )
        return _message_format(doc), [Conversation(0, doc, name)]
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
        return "swe-agent", [Conversation(0, history, name)]
    if "messages" in doc:
        messages = doc["messages"]
        if not isinstance(messages, list):
            raise UnknownTraceFormat(
                f'{name}: "messages" is a {type(messages).__name__}, not a list; '
                f"{EXPECTED}"
            )
        return _message_format(messages), [Conversation(0, messages, name)]
    generation = doc.get("answer_generation")
    if isinstance(generation, dict):
        return "legacy-function-call", _toolbench(name, generation, issues)
    raise UnknownTraceFormat(
        f"{name}: a JSON object with keys {sorted(doc)[:8]!r}, none of "
        f'"messages", "history" or "answer_generation"; {EXPECTED}'
    )


def _toolbench(
    name: str, generation: dict[str, object], issues: list[TraceIssue]
) -> list[Conversation]:
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
    return [Conversation(0, train[-1], name)]


def _jsonl(
    name: str, text: str, error: json.JSONDecodeError, issues: list[TraceIssue]
) -> tuple[TraceFormat, list[Conversation]]:
    """JSONL: one ``{"messages": [...]}`` conversation per line. A line that is not one
    is an issue, provided at least one line is."""
    convs: list[Conversation] = []
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
        convs.append(Conversation(number, messages, source))
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

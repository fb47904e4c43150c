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

Lineage and group. Every transition names its *lineage* (the conversation family it
came from, what an evaluation excludes) and every lineage belongs to one *group* (the
unit the held-out split and group exclusion act on, e.g. every trial of one task). A
trace declares them with top-level string fields ``"lineage"`` and ``"group"``: on
each JSONL line, or on the whole-file object (``{"messages": ...}``, a SWE-agent
``.traj``, a ToolBench answer file). A lineage not declared is derived, one per
conversation (:func:`~worldline.actors.extractor.pairing.derived_lineage`: ``lin-``
and 16 hex digits of the sha256 of ``"<file name>#<position>"``, the position being
0 for a whole file, the line number for JSONL); a group not declared is the lineage
itself. A declared name must be an id (1-128 characters, no whitespace) and one
lineage has one group: a conversation that breaks either is an issue, not read.
:attr:`TraceParse.groups` maps each lineage the parse produced to its group.

Recognizing a file's shape is here; pairing actions with observations across one
conversation is ``pairing.py``.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from worldline.actors.extractor.pairing import Conversation, conversation
from worldline.protocols.simulator import TraceIssue

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from worldline.protocols.messages import Transition

__all__ = [
    "FORMATS",
    "TraceFormat",
    "TraceParse",
    "TraceReader",
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


_NAME: Final = re.compile(r"\S{1,128}\Z")


class UnknownTraceFormat(ValueError):
    """The bytes are not a trace in any recognized format (the message says which)."""


@dataclass(frozen=True)
class TraceParse:
    """What one trace file yields: its format, transitions, and unusable records."""

    format: TraceFormat
    transitions: list[Transition]
    issues: list[TraceIssue]
    groups: dict[str, str] = field(default_factory=dict)  # lineage -> group


def parse_trace(name: str, data: bytes) -> TraceParse:
    """Parse one trace file's bytes (``name`` only labels sources and lineages): a
    :class:`TraceReader` over them, read to the end.

    Raises :class:`UnknownTraceFormat` for bytes that are not UTF-8 JSON (or JSONL)
    in one of the three recognized shapes.
    """
    reader = TraceReader(name, io.BytesIO(data))
    transitions = list(reader)
    return TraceParse(
        format=reader.format,
        transitions=transitions,
        issues=reader.issues,
        groups=reader.groups,
    )


class TraceReader:
    """One trace file read conversation by conversation, so a file of any size is
    read in memory bounded by its longest conversation, not by the file.

    ``lines`` are the file's lines as bytes (an open binary file, read lazily).
    JSONL (a first line that is a whole JSON value, and more lines after it) is
    streamed a line at a time; any other file is one JSON document, read whole.
    Iterating yields the transitions; ``groups`` (lineage -> group) holds every
    lineage yielded so far before its transitions are, ``issues`` the unusable
    records met so far, ``format`` the format (for JSONL, final once read).
    Construction raises :class:`UnknownTraceFormat` for a document of no known
    shape (and iteration for JSONL with no conversation line or a line that is not
    UTF-8).
    """

    def __init__(self, name: str, lines: Iterable[bytes]) -> None:
        self.name = name
        self.issues: list[TraceIssue] = []
        self.groups: dict[str, str] = {}  # lineage -> group
        self._used: set[str] = set()  # lineages with transitions
        self._kinds: set[TraceFormat] = set()  # of JSONL conversations
        self._fixed: TraceFormat | None = None  # a whole document's format
        self._convs = self._open(iter(lines))

    @property
    def format(self) -> TraceFormat:
        """The format found: a document's, or for JSONL "legacy-function-call" when
        every conversation read is, else "openai"."""
        if self._fixed is not None:
            return self._fixed
        legacy = bool(self._kinds) and self._kinds == {"legacy-function-call"}
        return "legacy-function-call" if legacy else "openai"

    def _open(self, lines: Iterator[bytes]) -> Iterator[Conversation]:
        """Peek at the first lines: JSONL is streamed, anything else read whole."""
        head: list[bytes] = []
        parsed = False
        for raw in lines:
            head.append(raw)
            text = _line(self.name, raw, len(head) - 1)
            if text.strip():
                try:
                    json.loads(text)
                except json.JSONDecodeError:
                    break
                parsed = True
                break
        if parsed:
            for raw in lines:  # is anything after the first value?
                head.append(raw)
                if raw.strip():
                    return self._jsonl(itertools.chain(head, lines), "extra data")
        data = b"".join(itertools.chain(head, lines))
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise UnknownTraceFormat(
                f"{self.name}: not UTF-8 text ({exc}); {EXPECTED}"
            ) from exc
        try:
            doc: object = json.loads(text)
        except json.JSONDecodeError as exc:
            return self._jsonl(io.BytesIO(data), str(exc))
        self._fixed, convs = _shape(self.name, doc, self.issues)
        return iter(convs)

    def _jsonl(self, lines: Iterable[bytes], error: str) -> Iterator[Conversation]:
        """JSONL: one ``{"messages": [...]}`` conversation per line, numbered from
        0. A line that is not one is an issue, provided at least one line is."""
        shaped = 0  # lines that are conversation objects (read or not)
        for number, raw in enumerate(lines):
            text = _line(self.name, raw, number)
            if not text.strip():
                continue
            source = f"{self.name}:{number}"
            try:
                record: object = json.loads(text)
            except json.JSONDecodeError as exc:
                self.issues.append(
                    TraceIssue(source=source, reason=f"line is not JSON: {exc}")
                )
                continue
            if not isinstance(record, dict) or not isinstance(
                messages := record.get("messages"), list
            ):
                self.issues.append(
                    TraceIssue(
                        source=source,
                        reason='line is not a {"messages": [...]} conversation object',
                    )
                )
                continue
            shaped += 1
            declared = _declared(record, source, self.issues)
            if declared is not None:
                self._kinds.add(_message_format(messages))
                yield Conversation(number, messages, source, *declared)
        if not shaped:
            raise UnknownTraceFormat(
                f"{self.name}: not JSON ({error}) and no line is a JSONL "
                f'{{"messages": [...]}} conversation; {EXPECTED}'
            )

    def __iter__(self) -> Iterator[Transition]:
        for conv in self._convs:
            lineage, group = conv.lineage_of(self.name), conv.group_of(self.name)
            held = self.groups.setdefault(lineage, group)
            if held != group:
                self.issues.append(
                    TraceIssue(
                        source=conv.prefix,
                        reason=f"lineage {lineage!r} is declared in group {group!r} "
                        f"here and in {held!r} before: one lineage has one group; "
                        "not read",
                    )
                )
                continue
            found, problems = conversation(self.name, conv)
            self.issues.extend(problems)
            if found:
                self._used.add(lineage)
            elif lineage not in self._used:
                del self.groups[lineage]
            yield from found


def _line(name: str, raw: bytes, number: int) -> str:
    """One line of a trace as text (the first without a byte-order mark)."""
    try:
        return raw.decode("utf-8-sig" if number == 0 else "utf-8")
    except UnicodeDecodeError as exc:
        raise UnknownTraceFormat(
            f"{name}: not UTF-8 text (line {number}: {exc}); {EXPECTED}"
        ) from exc


def _declared(
    record: dict[str, object], source: str, issues: list[TraceIssue]
) -> tuple[str | None, str | None] | None:
    """A record's declared ``lineage`` and ``group`` (None: not declared), or None
    (and an issue) when one is declared but is not an id."""
    names: list[str | None] = []
    for key in ("lineage", "group"):
        value = record.get(key)
        if value is None:
            names.append(None)
        elif isinstance(value, str) and _NAME.match(value):
            names.append(value)
        else:
            issues.append(
                TraceIssue(
                    source=source,
                    reason=f"declared {key} {value!r} is not an id (a string of 1-128 "
                    "characters without whitespace): conversation not read",
                )
            )
            return None
    return names[0], names[1]


def _whole(
    name: str, doc: dict[str, object], messages: list[object], issues: list[TraceIssue]
) -> list[Conversation]:
    """The one conversation of a whole-file object, with what it declares."""
    declared = _declared(doc, name, issues)
    if declared is None:
        return []
    return [Conversation(0, messages, name, *declared)]


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
        return "swe-agent", _whole(name, doc, history, issues)
    if "messages" in doc:
        messages = doc["messages"]
        if not isinstance(messages, list):
            raise UnknownTraceFormat(
                f'{name}: "messages" is a {type(messages).__name__}, not a list; '
                f"{EXPECTED}"
            )
        return _message_format(messages), _whole(name, doc, messages, issues)
    generation = doc.get("answer_generation")
    if isinstance(generation, dict):
        declared = _declared(doc, name, issues)
        if declared is None:
            return "legacy-function-call", []
        found = _toolbench(name, generation, issues)
        return "legacy-function-call", [
            Conversation(c.index, c.messages, c.prefix, *declared) for c in found
        ]
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


def _message_format(messages: list[object]) -> TraceFormat:
    """A bare message list is legacy when it uses ``function_call``/``function``."""
    for m in messages:
        if isinstance(m, dict) and (
            m.get("role") == "function" or m.get("function_call") is not None
        ):
            return "legacy-function-call"
    return "openai"

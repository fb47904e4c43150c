"""How an index stores transitions so that its size grows linearly with the traces.

A transition's context is the whole conversation before its action, so storing it
per transition costs the square of a conversation's length. Here a context is a chain
of *segments* (one rendered message each, ``"role: text"``), each stored once as
``[parent, text]``: the context of segment ``i`` is the context of ``parent`` (``-1``:
none), a newline, and ``text``. Every transition of a conversation points at the last
segment of its context, so the conversation's messages are each stored once, and
equal chains are shared (the same system prompt at the head of a thousand
conversations is one segment). A task is a segment with no parent.

Segments are content-addressed: a segment is its parent and its text, interned once
(:class:`ContextTable`), and numbered canonically when an index is finished (in the
order the sorted rows first reach them, parents first), so the same transitions give
the same bytes whatever order they were added in.

What retrieval embeds is here too: the action and a bounded window of the context's
most recent messages (:func:`recent`), never the observation, never the whole prefix.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from typing import IO, TYPE_CHECKING, Final, Literal

import msgspec
import numpy as np
import numpy.typing as npt

from worldline.actors.belief_model.embedding import ENV_EMBEDDER

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from worldline.actors.belief_model.embedding import Embedder

__all__ = [
    "ACTION_WEIGHT",
    "CONTEXT_WEIGHT",
    "MANIFEST",
    "QUERY",
    "RECENT_CHARS",
    "RECENT_MESSAGES",
    "ContextTable",
    "IndexRefused",
    "Row",
    "Segment",
    "call_action",
    "call_tool",
    "combine",
    "command_of",
    "commands",
    "context_text",
    "embed_pairs",
    "embedder_refused",
    "recent",
    "row_tool",
    "segments",
]

MANIFEST: Final = "manifest.json"
RECENT_MESSAGES: Final = 4  # messages of context a query and a row are scored on
RECENT_CHARS: Final = 2000  # ... at most this many characters of them
ACTION_WEIGHT: Final = 0.8  # of the action's embedding in a row's vector
CONTEXT_WEIGHT: Final = 0.4  # of the recent window's
QUERY: Final = (
    f"action*{ACTION_WEIGHT}+recent({RECENT_MESSAGES} messages,"
    f"{RECENT_CHARS} chars)*{CONTEXT_WEIGHT}-v1"
)

# A new message starts a line with its role: "user: ...", "tool: ..." (as the trace
# adapters and sessions render a conversation).
_BOUNDARY: Final = re.compile(r"\n(?=[A-Za-z_][A-Za-z0-9_-]*: )")
_ROLE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*: ")
_CALL: Final = re.compile(r"\s*([A-Za-z_][\w.\-]*)\((.*)\)\s*\Z", re.DOTALL)
_FENCE: Final = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)

Vectors = npt.NDArray[np.float32]


class IndexRefused(ValueError):
    """An index artifact that must not be used: the message names the cause (and the
    file, when one is at fault) and the fix."""


def embedder_refused(index_embedder: str, embedder: str, what: str) -> IndexRefused:
    """An embedder mismatch: vectors of two embedders do not compare."""
    return IndexRefused(
        f"{what} embedded with {index_embedder!r}, not {embedder!r} (this process's "
        "embedder); similarity across two embedding spaces means nothing: load it "
        "with the embedder it names, or rebuild it with this one (select one with "
        f"{ENV_EMBEDDER}=hashing, wordllama or minilm; rebuild with worldline sim "
        "index)"
    )


class Row(msgspec.Struct, array_like=True, frozen=True):
    """One stored transition: its texts by reference (``task`` and ``context`` are
    segment numbers, ``-1`` for none), the rest as the trace had it. ``support``
    is how many times the traces recorded this very pair in its lineage (identical
    transitions are stored once); ``source`` is the first of the places it was
    seen, and ``final`` says most of its occurrences ended their trace. A row
    written before ``support`` existed reads as 1."""

    id: str
    lineage: str
    task: int
    context: int
    action: str
    observation: str
    pairing: Literal["id", "name-order", "turn"]
    source: str
    final: bool
    support: int = 1


class Segment(msgspec.Struct, array_like=True, frozen=True):
    """One stored message of a context: the segment before it (``-1``: none)."""

    parent: int
    text: str


def segments(context: str) -> list[str]:
    """A context's messages: split before each line that starts with ``role: ``
    (``"\\n".join`` of the result is the context again)."""
    return _BOUNDARY.split(context) if context else []


def recent(
    context: str, messages: int = RECENT_MESSAGES, chars: int = RECENT_CHARS
) -> str:
    """The bounded window of a context that is scored: its last ``messages``
    messages, cut to their last ``chars`` characters."""
    tail = context[-chars:]
    starts = [m.end() for m in _BOUNDARY.finditer(tail)]
    if len(starts) >= messages:
        tail = tail[starts[-messages] :]
    return tail


def call_tool(action: str) -> str | None:
    """The tool an action written as a call (``name(arguments)``) names, else None."""
    match = _CALL.match(action)
    return match.group(1) if match else None


def command_of(action: str) -> str | None:
    """The command a text action issues: the first word of its last fenced code
    block (how text agents, SWE-agent's for one, write a command), else None. For a
    message it plays the part a tool's name plays for a call."""
    blocks = _FENCE.findall(action)
    words = blocks[-1].split() if blocks else []
    return words[0] if words else None


def commands(rows: Sequence[Row], first: int) -> dict[str, npt.NDArray[np.int64]]:
    """The rows from ``first`` on (the message turns) by the command their action
    issues (:func:`command_of`), each set in stored order."""
    found: dict[str, list[int]] = {}
    for i in range(first, len(rows)):
        command = command_of(rows[i].action)
        if command is not None:
            found.setdefault(command, []).append(i)
    return {c: np.array(held, dtype=np.int64) for c, held in found.items()}


def row_tool(row: Row) -> str:
    """The tool a stored transition's action called ("" for a message turn)."""
    return "" if row.pairing == "turn" else row.action.partition("(")[0]


def call_action(name: str, arguments: str | Mapping[str, object]) -> str:
    """A tool call as the trace adapters write its action: ``name(arguments)``, the
    arguments as the JSON string the call carried (an already decoded object as
    sorted-key JSON), so a session's call and a recorded one compare alike."""
    if not isinstance(arguments, str):
        arguments = msgspec.json.encode(dict(arguments), order="sorted").decode()
    return f"{name}({arguments})"


def combine(action: Vectors, window: Vectors) -> Vectors:
    """Unit rows of ``ACTION_WEIGHT * action + CONTEXT_WEIGHT * window`` (zeros
    where both are zero)."""
    mixed = ACTION_WEIGHT * action + CONTEXT_WEIGHT * window
    norms = np.linalg.norm(mixed, axis=-1, keepdims=True)
    out: Vectors = np.divide(
        mixed, norms, out=np.zeros_like(mixed), where=norms > 0
    ).astype(np.float32)
    return out


def embed_pairs(pairs: Iterable[tuple[str, str]], embedder: Embedder) -> Vectors:
    """One vector per (action, context): the action and its recent window."""
    actions, windows = [], []
    for action, context in pairs:
        actions.append(action)
        windows.append(recent(context))
    shape = (len(actions), embedder.dimensions)
    if not actions:
        return np.zeros(shape, dtype=np.float32)
    a = np.asarray(embedder.embed_many(actions), dtype=np.float32)
    w = np.asarray(embedder.embed_many(windows), dtype=np.float32)
    if a.shape != shape or w.shape != shape:
        raise ValueError(
            f"embedder {embedder.id} gave shape {a.shape} for {len(actions)} texts, "
            f"not (n, {embedder.dimensions})"
        )
    return combine(a, w)


def context_text(segments: tuple[Segment, ...], node: int) -> str:
    """The text of a context (or task) by its last segment (``-1``: empty)."""
    parts: list[str] = []
    while node >= 0:
        segment = segments[node]
        parts.append(segment.text)
        node = segment.parent
    return "\n".join(reversed(parts))


class ContextTable:
    """Interns contexts as shared chains of segments while an index is built.

    A segment's text is kept in a temporary file, not in memory (only its parent and
    a 16-byte digest of its text are), so building holds the segments' count in
    memory, never their text: a file of any size builds in bounded memory."""

    def __init__(self) -> None:
        self.parents: list[int] = []
        self._ends: list[int] = [0]  # segment i's text is bytes _ends[i]:_ends[i + 1]
        self._texts: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self._ids: dict[tuple[int, bytes], int] = {}
        self._last: tuple[str, int] = ("", -1)  # the last context, and its node

    def __len__(self) -> int:
        return len(self.parents)

    def _node(self, parent: int, text: str) -> int:
        data = text.encode("utf-8", "surrogatepass")
        key = (parent, hashlib.blake2b(data, digest_size=16).digest())
        node = self._ids.get(key)
        if node is None:
            node = self._ids[key] = len(self.parents)
            self.parents.append(parent)
            self._texts.seek(self._ends[-1])
            self._texts.write(data)
            self._ends.append(self._ends[-1] + len(data))
        return node

    def text(self, node: int) -> str:
        """The text of segment ``node`` (read back from the temporary file)."""
        self._texts.seek(self._ends[node])
        data = self._texts.read(self._ends[node + 1] - self._ends[node])
        return data.decode("utf-8", "surrogatepass")

    def close(self) -> None:
        """Drop the temporary file (the table is unusable after)."""
        self._texts.close()

    def task(self, text: str) -> int:
        """A task: one segment with no parent (``-1`` for no task)."""
        return self._node(-1, text) if text else -1

    def context(self, context: str) -> int:
        """The last segment of ``context`` (``-1`` for an empty one). A context that
        extends the previous one by whole messages (the next transition of the same
        conversation) only interns what it adds."""
        if not context:
            return -1
        last, node = self._last
        cut = len(last)
        if (
            last
            and len(context) > cut + 1
            and context[cut] == "\n"
            and context.startswith(last)
            and _ROLE.match(context, cut + 1)
        ):
            rest = context[cut + 1 :]
        else:
            node, rest = -1, context
        for text in segments(rest):
            node = self._node(node, text)
        self._last = (context, node)
        return node

    def canonical(
        self, starts: Iterable[tuple[int, int]]
    ) -> tuple[list[int], list[int]]:
        """Number the segments in the order the (sorted) rows' ``(task, context)``
        first reach them, parents first: the old numbers in stored order, and each
        old number's new one."""
        new = [-1] * len(self.parents)
        order: list[int] = []
        for pair in starts:
            for start in pair:
                chain = []
                node = start
                while node >= 0 and new[node] < 0:
                    chain.append(node)
                    node = self.parents[node]
                for old in reversed(chain):
                    new[old] = len(order)
                    order.append(old)
        return order, new

    def stored(self, order: Sequence[int], new: Sequence[int]) -> Iterator[Segment]:
        """The segments in stored order (:meth:`canonical`), one at a time."""
        for old in order:
            parent = self.parents[old]
            yield Segment(
                parent=new[parent] if parent >= 0 else -1, text=self.text(old)
            )

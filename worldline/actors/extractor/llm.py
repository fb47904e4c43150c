"""Optional LLM extraction, the pure half: the prompt, and the strict reading of the
model's answer. No network here; the call is made by the extractor's prepare step
(``service.py``) outside the pure handler, and its result reaches
:func:`worldline.actors.extractor.core.handle` as an :class:`LlmReading`.

The model is asked for one JSON object, ``{"items": [{"type", "text", "confidence",
"span"}]}``: each item a claim, risk, gap or assumption stated as one standalone
sentence, the model's confidence that the artifact asserts it (0 to 1), and ``span``,
the exact words of the artifact it comes from. :func:`parse_answer` accepts nothing
else: unknown keys, missing fields, wrong types, a confidence outside [0, 1], texts
or spans too long, too many items, or a span that is not in the artifact (a model
must not put words in an agent's mouth) reject the whole answer, and the extractor
falls back to its deterministic reading of that observation, counted and logged.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Final, Literal

import msgspec

from worldline.actors.runtime.llm import snippet, unfenced

if TYPE_CHECKING:
    from worldline.protocols.messages import Observe

__all__ = [
    "DETERMINISTIC",
    "MAX_ARTIFACT_CHARS",
    "MAX_ITEMS",
    "PROMPT_VERSION",
    "AnswerRejected",
    "LlmItem",
    "LlmReading",
    "messages",
    "parse_answer",
]

PROMPT_VERSION: Final = "extract-v1"  # change it whenever the prompt text changes
DETERMINISTIC: Final = "deterministic"  # extracted_by of the rule-based reading
MAX_ITEMS: Final = 64  # per answer; more rejects the answer
MAX_ITEM_CHARS: Final = 1024  # of an item's text
MAX_SPAN_CHARS: Final = 2048  # of an item's quoted span
MAX_ARTIFACT_CHARS: Final = 24_000  # sent to the model; longer artifacts fall back

ItemType = Literal["claim", "risk", "gap", "assumption"]

SYSTEM: Final = (
    "You extract beliefs from an artifact an AI agent saw or wrote, for a shared world "
    "model. Read the artifact and list what it states:\n"
    '- "claim": something asserted as true (a fact, a measurement, a decision);\n'
    '- "risk": something that could go wrong;\n'
    '- "gap": an open question or missing information;\n'
    '- "assumption": something taken for granted or hedged.\n'
    "Write each item's text as one short standalone sentence (resolve pronouns, keep "
    "numbers and names exact, keep a negation as a negation). Give your confidence "
    "from 0 to 1 that the artifact really states it, and the span: the exact words "
    "of the artifact it comes from, copied verbatim. Do not add anything the "
    "artifact does not say.\n"
    "Answer with one JSON object and nothing else:\n"
    '{"items": [{"type": "claim|risk|gap|assumption", "text": "...", '
    '"confidence": 0.0, "span": "..."}]}\n'
    'If the artifact states nothing, answer {"items": []}.'
)

_ROLE: Final = {
    "artifact": "a document the agent observed",
    "output": "the agent's own output",
    "tool": "the result of a tool the agent ran",
}


class AnswerRejected(ValueError):
    """The model's answer is not what the prompt asks for; the message says how."""


class LlmItem(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One belief the model read in the artifact (validated, never trusted)."""

    type: ItemType
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ITEM_CHARS)]
    confidence: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
    span: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_SPAN_CHARS)]


class _Answer(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    items: Annotated[list[LlmItem], msgspec.Meta(max_length=MAX_ITEMS)]


class LlmReading(msgspec.Struct, frozen=True, kw_only=True):
    """What the prepare step hands the extractor's handler for one observation: the
    model's validated items, or (``fallback`` set) why the deterministic reading must
    be used instead."""

    model: str  # the model asked (its id is the ops' extracted_by)
    items: tuple[LlmItem, ...] = ()
    fallback: str = ""  # non-empty: the reason no model item is used


_DECODER: Final = msgspec.json.Decoder(_Answer)
_SPACE: Final = re.compile(r"\s+")


def _flat(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def messages(obs: Observe) -> list[dict[str, str]]:
    """The chat messages for one observation: a fixed system message, then what
    produced the artifact, its source and its text. The same observation always
    gives the same messages."""
    source = obs.source or obs.author
    user = (
        f"Artifact ({_ROLE[obs.role]}, source: {source}):\n"
        f"<<<\n{obs.text}\n>>>\n\n"
        'Answer with the JSON object {"items": [...]} only.'
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_answer(content: str, artifact: str) -> tuple[LlmItem, ...]:
    """The items of the model's answer ``content`` about ``artifact``.

    The answer is the JSON object the prompt asks for, optionally inside one Markdown
    code fence. Item texts are stripped of surrounding whitespace.

    Raises:
        AnswerRejected: the answer is not that object (not JSON, unknown or missing
            keys, wrong types, a confidence outside [0, 1], too long, too many items,
            a blank text), or an item's span is not in the artifact.
    """
    candidate = unfenced(content.strip())
    try:
        answer = _DECODER.decode(candidate)
    except msgspec.ValidationError as exc:
        raise AnswerRejected(
            f"the answer does not match the schema ({exc}): {snippet(candidate)}"
        ) from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise AnswerRejected(
            f"the answer is not a JSON object ({exc}): {snippet(candidate)}"
        ) from None
    where = _flat(artifact)
    items = []
    for number, item in enumerate(answer.items):
        text = item.text.strip()
        if not text:
            raise AnswerRejected(f"items[{number}].text is blank")
        if _flat(item.span) not in where:
            raise AnswerRejected(
                f"items[{number}].span is not in the artifact: {snippet(item.span)}; "
                "the model must quote the artifact verbatim"
            )
        items.append(msgspec.structs.replace(item, text=text))
    return tuple(items)

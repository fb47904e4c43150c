"""The observation's own context in the lexical channel (issue 27): a belief is
indexed with what came just before the statements it was read from.

The extractor gives each extracted evidence item a ``context``
(:func:`worldline.actors.extractor.text.contexts`): the artifact's speaker (a
transcript's ``Name:``) and the text just before the statement, the observation's
own ``context`` first (the previous turn of a conversation). A card keeps the terms
of the contexts of its first :data:`CONTEXTS` evidence items that have one (by id,
so the same evidence gives the same card in any order), less its own terms, at most
:data:`CONTEXT_TERMS`: its *near* terms. The lexical channel's document of a belief
is its own terms and its near terms, its length both lengths (one BM25 document, as
if the turn before were written above it), so a reply that holds none of the
question's words ("Yeah, he did.") is found through the turn it answers, and a
speaker question reaches every sentence that speaker said. With a semantic
embedder the card's vector reads the context too: the normalised weighted mean
of the text's embedding and that of the text after its contexts
(:func:`in_context`, weight :data:`VECTOR_SHARE`).
Computed when the card is written, never at read time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from worldline.actors.belief_model.text import content_stems
from worldline.actors.projector import lexical

if TYPE_CHECKING:
    from collections.abc import Iterable

    from worldline.protocols.beliefs import Evidence

__all__ = [
    "CONTEXTS",
    "CONTEXT_TERMS",
    "VECTOR_SHARE",
    "contexts",
    "in_context",
    "near",
    "said",
]

CONTEXTS: Final = 2  # evidence items whose context a card reads
CONTEXT_TERMS: Final = 24  # near terms a card keeps at most
# The weight of the text in context in a card's vector (the text alone: the rest).
# Chosen offline on the dev sets (docs/benchmarks.md, "The observation's context"):
# 0.2 helps dialogue and leaves SQuAD as it was; more starts to cost SQuAD.
VECTOR_SHARE: Final = 0.2


def contexts(evidence: Iterable[Evidence]) -> list[str]:
    """The contexts a card reads: of the first :data:`CONTEXTS` evidence items
    that have one, by id."""
    return [c for _, c in sorted((e.id, e.context) for e in evidence if e.context)][
        :CONTEXTS
    ]


def in_context(evidence: Iterable[Evidence], text: str) -> str:
    """``text`` after its :func:`contexts` ("" when it has none): what the
    semantic channel embeds beside the text alone (the card's vector is the
    normalised weighted mean of the two: :func:`.index.index_writes`)."""
    found = contexts(evidence)
    return " ".join([*found, text]) if found else ""


def near(evidence: Iterable[Evidence], own: lexical.Terms) -> lexical.Terms:
    """The near terms of a belief whose evidence is ``evidence`` and whose own
    terms are ``own`` (distinct, first occurrence first), and their length: the
    content words of the contexts read."""
    mine = set(own.distinct)
    found: dict[str, None] = {}
    length = 0
    for text in contexts(evidence):
        words = content_stems(text)
        length += len(words)
        found.update((w, None) for w in words if w not in mine)
    return lexical.Terms(tuple(found)[:CONTEXT_TERMS], length if found else 0)


def said(evidence: Iterable[Evidence]) -> str:
    """The day a belief was first said (``YYYY-MM-DD``, UTC): its earliest
    evidence item's ``observed_at``, which for a statement read from an artifact is
    when the artifact says it happened (``Observe.observed_at``); "" without
    evidence. A question about time is answered with it (:mod:`.answer_type`)."""
    try:
        first = min((e.observed_at for e in evidence), default=None)
    except TypeError:  # times with and without a zone (a raw client's): UTC
        first = min(_utc(e.observed_at) for e in evidence)
    return "" if first is None else _utc(first).astimezone(UTC).date().isoformat()


def _utc(t: datetime) -> datetime:
    """``t``, read as UTC when it has no zone."""
    return t if t.tzinfo else t.replace(tzinfo=UTC)

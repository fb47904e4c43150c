"""Rival answers: beliefs that answer the same question (a *slot*), at most one true.

Pure: beliefs and their evidence in, the inputs of :func:`posterior.read` out. Evidence
for one answer is evidence against its rivals, in the same posterior, without an op per
rival (docs/belief-math.md, "Rival answers").

For a belief ``b`` in a slot, and each voice ``s`` that supports some of the slot's
answers (``A(s)``, the answers ``s`` supports; a voice is an item's independent source,
:func:`posterior.voice_of`, so twenty names one agent invented are one voice):

- ``s``'s support for ``b`` itself counts ``1 / |A(s)|`` of its weight: a source that
  gives ``k`` answers to one question splits its vote between them;
- ``s``'s support for a rival ``r`` counts against ``b`` with
  ``(1 - sim(r, b)) / |A(s)|`` of its weight and for ``b`` with ``sim(r, b) / |A(s)|``:
  partial support between similar answers, ``sim`` being the overlap of their content
  words beyond the question's (:func:`similarity`; an author list that shares two of
  three names with ``b`` half supports it);
- refuting or neutral evidence for a rival says nothing about ``b`` (the slot may hold
  answers nobody has given yet).

Each implied item keeps its source, kind, author and observed time, so decay, trust and
grouping by ``(source, direction)`` apply to it exactly as to the belief's own evidence;
its id is the rival's item id behind a marker (``~<rival id>~<item id>``, plus ``+`` for
the supporting half), so the ordering and every sum stay deterministic.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.belief_model import posterior
from worldline.actors.belief_model.text import content_stems

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime

    from worldline.protocols.beliefs import Evidence

__all__ = [
    "MAX_AUTHOR_ANSWERS",
    "MAX_RIVALS",
    "Member",
    "answer_key",
    "read",
    "similarity",
    "slot_evidence",
]

MAX_RIVALS: Final = 64  # answers one slot may hold: each reading weighs them all
# ... of which one author may add at most this many (a quarter), so no one agent can
# fill a question and refuse the true answer as ``full``.
MAX_AUTHOR_ANSWERS: Final = 16


@dataclass(frozen=True, slots=True)
class Member:
    """One answer of a slot: its id, text and every evidence item recorded for it."""

    id: str
    text: str
    evidence: Sequence[Evidence]


def similarity(a: str, b: str, question: str = "") -> float:
    """The overlap of two answers' content words (Jaccard over their stems), 0..1,
    leaving out the words of the ``question`` they answer (the slot's name): "The
    Hobbit was written by Tolkien" and "The Hobbit was written by Lewis", answers to
    "who wrote The Hobbit", share only the question's words, so nothing.

    Two answers with the same content words (``"J. K. Rowling"``, ``"Rowling, J K"``)
    are the same answer to the math (1.0); answers with no word in common, 0.0."""
    left, right = _words(a, question), _words(b, question)
    if not left or not right:
        return 1.0 if a == b else 0.0
    return len(left & right) / len(left | right)


def _words(answer: str, question: str) -> set[str]:
    return set(content_stems(answer)) - set(content_stems(question))


def answer_key(answer: str, question: str = "") -> str:
    """What an answer says, as the math compares answers: its content-word stems
    beyond the question's, sorted (the text itself when it has none). Answers with one
    key are the same answer (:func:`similarity` 1.0), however they are written."""
    words = _words(answer, question)
    return " ".join(sorted(words)) if words else answer


def slot_evidence(
    belief_id: str, members: Sequence[Member], question: str = ""
) -> tuple[list[Evidence], dict[str, float]]:
    """The evidence ``belief_id`` is read on within its slot, and the per-item scale.

    ``members`` is every answer of the slot, ``belief_id``'s own included. Returns its
    own items and the items its rivals' support implies (see the module), with the
    multiplier of each item whose weight is not whole."""
    own = next((m for m in members if m.id == belief_id), None)
    if own is None:
        raise ValueError(f"{belief_id} is not one of the slot's members")
    answers: dict[str, set[str]] = defaultdict(set)
    for member in members:
        for item in member.evidence:
            if item.direction == "supports":
                answers[posterior.voice_of(item)].add(member.id)
    evidence: list[Evidence] = list(own.evidence)
    scale: dict[str, float] = {}
    for item in own.evidence:
        given = len(answers.get(posterior.voice_of(item), ()))
        if item.direction == "supports" and given > 1:
            scale[item.id] = 1.0 / given
    for rival in sorted(members, key=lambda m: m.id):
        if rival.id == belief_id:
            continue
        supports = [e for e in rival.evidence if e.direction == "supports"]
        if not supports:
            continue
        sim = similarity(rival.text, own.text, question)
        for item in supports:
            share = 1.0 / len(answers[posterior.voice_of(item)])
            base = f"~{rival.id}~{item.id}"
            if sim < 1.0:
                evidence.append(
                    msgspec.structs.replace(
                        item, id=base, belief_id=belief_id, direction="refutes"
                    )
                )
                scale[base] = (1.0 - sim) * share
            if sim > 0.0:
                evidence.append(
                    msgspec.structs.replace(item, id=base + "+", belief_id=belief_id)
                )
                scale[base + "+"] = sim * share
    return evidence, scale


def read(
    belief_id: str,
    confidence: float | None,
    members: Sequence[Member],
    trust: Mapping[str, float],
    now: datetime,
    question: str = "",
) -> posterior.Reading:
    """``belief_id``'s reading at ``now`` with its rivals weighed in; ``question``
    is the slot's name (its words are no overlap between answers)."""
    evidence, scale = slot_evidence(belief_id, members, question)
    return posterior.read(confidence, evidence, trust, now, scale=scale)

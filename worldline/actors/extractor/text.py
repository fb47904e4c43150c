"""The extractor's deterministic reading of text: statements and their type and
polarity. No network, no model weights. The normalized key and belief ids are the
shared belief model's (:mod:`worldline.actors.belief_model.text`), re-exported here for
the extractor's callers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from worldline.actors.belief_model.text import HEDGES, WORD, belief_id, normalize

__all__ = [
    "Reading",
    "belief_id",
    "classify",
    "normalize",
    "statements",
]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_BULLET = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s+(?:\[[ xX]\]\s+)?")

RISKS: Final = frozenset(
    [
        "risk",
        "risks",
        "risky",
        "danger",
        "dangerous",
        "fail",
        "fails",
        "failure",
        "outage",
        "breach",
        "vulnerable",
        "vulnerability",
        "exposure",
        "exposed",
        "leak",
        "leaks",
        "threat",
        "concern",
        "concerns",
        "regression",
        "break",
        "breaks",
        "broken",
        "lose",
        "losing",
        "loss",
        "churn",
        "blocker",
    ]
)

BeliefKind = Literal["claim", "assumption", "risk", "gap"]


@dataclass(frozen=True, slots=True)
class Reading:
    """What one statement says, as the extractor reads it."""

    text: str
    type: BeliefKind
    negated: bool
    key: str


def statements(text: str) -> list[str]:
    """Split text or markdown into statements: lines, then sentences; bullets,
    headings and code fences skipped."""
    found: list[str] = []
    seen: set[str] = set()
    fenced = False
    for raw in text.splitlines():
        if raw.lstrip().startswith("```"):
            fenced = not fenced
            continue
        line = _BULLET.sub("", raw).strip()
        if fenced or not line or line.startswith(("#", ">", "|")):
            continue
        for sentence in _SENTENCE_END.split(line):
            sentence = " ".join(sentence.split()).strip("*_` ")
            if sentence and sentence not in seen:
                seen.add(sentence)
                found.append(sentence)
    return found


def classify(sentence: str) -> Reading:
    """Type and polarity of one statement: a question is a gap, risk language a risk,
    a hedge an assumption, anything else a claim."""
    key, negated = normalize(sentence)
    words = {w.rstrip(".'-") for w in WORD.findall(sentence.lower())}
    kind: BeliefKind
    if sentence.rstrip().endswith("?"):
        kind = "gap"
    elif words & RISKS:
        kind = "risk"
    elif words & HEDGES or sentence.lower().startswith(("i think", "we assume")):
        kind = "assumption"
    else:
        kind = "claim"
    return Reading(text=sentence, type=kind, negated=negated, key=key)

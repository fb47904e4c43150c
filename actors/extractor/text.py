"""Deterministic reading of text: statements, their type, polarity, and a normalized
key so a restatement maps to the belief it restates. No network, no model weights.

The key is the sorted set of content-word stems (stop words, hedges and negations
removed), so "Auth is enforced at the middleware" and "The middleware enforces auth"
share a key, and "Auth is not enforced at the middleware" shares it with the opposite
polarity. The SDK uses :func:`belief_id` for ``add`` too, so a hand-entered belief and
an extracted restatement of it meet.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "Reading",
    "belief_id",
    "classify",
    "normalize",
    "statements",
]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_BULLET = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s+(?:\[[ xX]\]\s+)?")
_WORD = re.compile(r"[a-z0-9][a-z0-9$%.\-']*")

STOP: Final = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "to",
        "of",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "and",
        "or",
        "as",
        "that",
        "this",
        "these",
        "those",
        "it",
        "its",
        "it's",
        "there",
        "their",
        "they",
        "them",
        "we",
        "our",
        "you",
        "your",
        "i",
        "me",
        "my",
        "he",
        "she",
        "his",
        "her",
        "from",
        "into",
        "over",
        "than",
        "then",
        "so",
        "such",
        "which",
        "who",
        "whom",
        "what",
        "when",
        "where",
        "how",
        "why",
        "also",
        "just",
        "very",
        "really",
        "has",
        "have",
        "had",
        "will",
        "would",
        "shall",
        "should",
        "can",
        "all",
        "any",
        "some",
        "each",
        "every",
        "both",
    ]
)
NEGATIONS: Final = frozenset(
    ["not", "no", "never", "none", "nothing", "nobody", "cannot", "without"]
)
HEDGES: Final = frozenset(
    [
        "might",
        "may",
        "maybe",
        "perhaps",
        "probably",
        "possibly",
        "likely",
        "unlikely",
        "seems",
        "seem",
        "appears",
        "appear",
        "assume",
        "assuming",
        "assumed",
        "guess",
        "suspect",
        "think",
        "believe",
        "could",
        "suppose",
        "presumably",
        "apparently",
    ]
)
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


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    """A crude, deterministic stem: enforce, enforces, enforced -> enforc."""
    word = word.strip(".'-")
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) - len(suffix) >= 2 and word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    if len(word) > 2 and word.endswith("e"):
        word = word[:-1]
    return word


_IGNORED: Final = STOP | NEGATIONS | HEDGES  # words that carry no content


def normalize(text: str) -> tuple[str, bool]:
    """(key, negated): the content-word stems in sorted order, and whether the
    statement is negated (an odd number of negations)."""
    lowered = text.lower().replace("n't", " not").replace("\u2019", "'")
    words = [w.rstrip(".'-") for w in _WORD.findall(lowered)]
    negated = sum(w in NEGATIONS for w in words) % 2 == 1
    stems = {_stem(w) for w in words if w not in _IGNORED}
    stems.discard("")
    return " ".join(sorted(stems)), negated


def belief_id(world: str, text: str) -> str:
    """The id a statement's belief has in ``world``: the same for every restatement."""
    key, _ = normalize(text)
    digest = hashlib.sha256(f"{world}\0{key or text}".encode()).hexdigest()[:16]
    return f"b-{digest}"


def classify(sentence: str) -> Reading:
    """Type and polarity of one statement: a question is a gap, risk language a risk,
    a hedge an assumption, anything else a claim."""
    key, negated = normalize(sentence)
    words = {w.rstrip(".'-") for w in _WORD.findall(sentence.lower())}
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

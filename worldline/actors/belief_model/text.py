"""Text normalisation shared by every actor: the key that makes a restatement meet the
belief it restates, and the belief id derived from it. No network, no model weights.

The key is the sorted set of content-word stems (stop words, hedges and negations
removed), so "Auth is enforced at the middleware" and "The middleware enforces auth"
share a key, and "Auth is not enforced at the middleware" shares it with the opposite
polarity. The SDK uses :func:`belief_id` for ``add`` too, so a hand-entered belief and
an extracted restatement of it meet; fusion and the projector use :func:`normalize`.
A belief edge's default id, :func:`edge_id`, is derived from its content the same way.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Final

__all__ = [
    "HEDGES",
    "NEGATIONS",
    "STOP",
    "WORD",
    "answer_id",
    "belief_id",
    "content_stems",
    "edge_id",
    "negated",
    "normalize",
]

WORD: Final = re.compile(r"[a-z0-9][a-z0-9$%.\-']*")


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


def _words(text: str) -> list[str]:
    lowered = text.lower().replace("n't", " not").replace("\u2019", "'")
    return [w.rstrip(".'-") for w in WORD.findall(lowered)]


def negated(text: str) -> bool:
    """Whether the statement is negated (an odd number of negations): the second
    part of :func:`normalize`, without the stems."""
    return sum(w in NEGATIONS for w in _words(text)) % 2 == 1


def normalize(text: str) -> tuple[str, bool]:
    """(key, negated): the content-word stems in sorted order, and whether the
    statement is negated (an odd number of negations)."""
    words = _words(text)
    negated = sum(w in NEGATIONS for w in words) % 2 == 1
    stems = {_stem(w) for w in words if w not in _IGNORED}
    stems.discard("")
    return " ".join(sorted(stems)), negated


def content_stems(text: str) -> list[str]:
    """The stems of ``text``'s content words in the order they occur, repeats kept:
    the terms the projector's lexical channel counts (:func:`normalize`'s stems,
    but a possessive counts as its noun: "harbor's" is "harbor"; the key keeps its
    old stems, as belief ids depend on it)."""
    return [
        s
        for w in _words(text)
        if w not in _IGNORED and (s := _stem(w[:-2] if w.endswith("'s") else w))
    ]


def answer_id(world: str, slot: str | None, text: str) -> str:
    """The id of ``text`` as an answer to ``slot`` in ``world`` (no slot: the
    statement's :func:`belief_id`): one answer text in two slots is two beliefs."""
    if slot is None:
        return belief_id(world, text)
    key, _ = normalize(text)
    digest = hashlib.sha256(f"{world}\0{slot}\0{key or text}".encode()).hexdigest()
    return f"b-{digest[:16]}"


def belief_id(world: str, text: str) -> str:
    """The id a statement's belief has in ``world``: the same for every restatement."""
    key, _ = normalize(text)
    digest = hashlib.sha256(f"{world}\0{key or text}".encode()).hexdigest()[:16]
    return f"b-{digest}"


SYMMETRIC_EDGES: Final = frozenset({"contradicts"})  # "A contradicts B" is "B ... A"


def edge_id(world: str, edge_type: str, source: str, target: str) -> str:
    """The id a belief edge has in ``world`` unless one is named: the same for every
    relate of that type between the same beliefs, whoever relates them, so a repeat
    re-states that edge instead of adding a second (docs/belief-math.md, "Edges").
    The ends of a symmetric type count in either order."""
    symmetric = edge_type in SYMMETRIC_EDGES
    ends = sorted((source, target)) if symmetric else [source, target]
    digest = hashlib.sha256("\0".join([world, edge_type, *ends]).encode()).hexdigest()
    return f"be-{digest[:16]}"

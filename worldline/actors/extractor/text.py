"""The extractor's deterministic reading of text: statements and their type and
polarity. No network, no model weights. The normalized key and belief ids are the
shared belief model's (:mod:`worldline.actors.belief_model.text`), re-exported here for
the extractor's callers.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Final, Literal

from worldline.actors.belief_model.text import HEDGES, WORD, belief_id, normalize

__all__ = [
    "CONTEXT_CHARS",
    "RISKS",
    "TERM_AFTER",
    "TERM_BEFORE",
    "TYPING_HEDGES",
    "Reading",
    "belief_id",
    "classify",
    "contexts",
    "normalize",
    "speaker",
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
        # Harm verbs and nouns (added with the typing set, tests/data/typing/).
        "attack",
        "attacker",
        "attackers",
        "collapse",
        "corrupt",
        "corruption",
        "crash",
        "crashes",
        "damage",
        "downtime",
        "exploit",
        "hazard",
        "jeopardize",
        "lawsuit",
        "miss",
        "shortage",
        "shortages",
        "stall",
        "stalls",
        "undercut",
    ]
)

# A risk word that names a thing, not a harm, in the words around it: "stop loss"
# and "loss prevention" are products, "loss function" and "training loss" are
# metrics, "risk team" and "threat model" are a team and a document.
TERM_BEFORE: Final = frozenset(
    ["stop", "weight", "hair", "hearing", "training", "validation", "test", "eval"]
)
TERM_AFTER: Final = frozenset(
    [
        "appetite",
        "detection",
        "even",
        "function",
        "functions",
        "intelligence",
        "leader",
        "leaders",
        "management",
        "manager",
        "managers",
        "model",
        "modeling",
        "models",
        "officer",
        "prevention",
        "ratio",
        "register",
        "room",
        "score",
        "team",
        "teams",
    ]
)
# Harm said in a phrase rather than a word.
_HARM = re.compile(r"\b(?:takes?|taking|brings?|bringing) down\b|\bfills? up\b"
                   r"|\bruns? out of\b")  # fmt: skip
# A report of the past ("last month", "in March", "2 days ago") with no modal or
# condition is a claim about what happened, whatever words it uses.
_PAST = re.compile(r"\b(?:last|yesterday|ago|lasted|(?:in|since) (?:19|20)\d\d)\b")
_MODAL = re.compile(r"\b(?:can|could|may|might|will|would|should|if|unless)\b")
# Stated ignorance: an open question written as a statement.
_GAP = re.compile(
    r"^(?:unknown|unclear|tbd|todo|open question)\b"
    r"|\b(?:is|are|remains?) (?:still |yet )?(?:unknown|unclear|undecided)\b"
    r"|\bnot (?:yet )?known\b|\b(?:do|does|did) not know\b"
    r"|\bremains? to be seen\b|\bto be determined\b"
    r"|\bno (?:data|idea|evidence) (?:on|about|whether|if)\b"
    r"|\b(?:nobody|no one) (?:knows|has)\b"
    r"|\b(?:need|needs) to (?:find out|check|confirm|determine)\b"
)
_MONTH = re.compile(r"(?<=\S)(\s+)May\b")
# Hedges for typing only: not in the shared HEDGES, which also shape belief keys.
TYPING_HEDGES: Final = frozenset(["assumption", "expect", "expects", "supposedly"])

# What a statement's context keeps of the text before it (contexts()), in chars.
CONTEXT_CHARS: Final = 320
# A transcript's speaker: up to four capitalised words, speakers joined by ", ".
_NAME = r"[A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,3}"
_SPEAKER = re.compile(rf"({_NAME}(?:, {_NAME})*): ")

BeliefKind = Literal["claim", "assumption", "risk", "gap"]


@dataclass(frozen=True, slots=True)
class Reading:
    """What one statement says, as the extractor reads it."""

    text: str
    type: BeliefKind
    negated: bool
    key: str


def speaker(text: str) -> str:
    """Who says ``text``, when it opens as a transcript writes a turn (``Monica
    Geller: ...``, several speakers joined by ``, ``); "" otherwise."""
    found = _SPEAKER.match(text.lstrip())
    return found.group(1) if found else ""


def contexts(found: list[str], before: str, artifact: str) -> list[str]:
    """Each statement's context, in order: the artifact's :func:`speaker` and the
    last :data:`CONTEXT_CHARS` of what came before the statement (``before``, the
    observation's context, then the statements of ``found`` ahead of it), cut at a
    word. Retrieval reads it beside the statement (docs/worldview.md). Linear in
    the statements: a window keeps the fewest latest parts that hold more than
    :data:`CONTEXT_CHARS` (all of them while they hold less)."""
    who = speaker(artifact)
    out = []
    window: deque[str] = deque()
    size = 0  # the window's parts, each with its separator
    for i, part in enumerate((before.strip(), *found)):
        if i:  # the context of statement i - 1: what the window holds
            prior = " ".join(window)
            if len(prior) > CONTEXT_CHARS:
                prior = prior[-CONTEXT_CHARS:].split(" ", 1)[-1]
            if who and i > 1 and who not in prior:
                prior = f"{who}: {prior}"
            out.append(prior)
        if part:
            window.append(part)
            size += len(part) + 1
            while len(window) > 1 and size - len(window[0]) - 1 > CONTEXT_CHARS:
                size -= len(window.popleft()) + 1
    return out


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


def _risky(lower: str, tokens: list[str]) -> bool:
    """Risk language in context: a risk word that is not part of a term (see
    ``TERM_BEFORE``/``TERM_AFTER``), or a harm phrase; a plain report of the past
    is a claim."""
    if _PAST.search(lower) and not _MODAL.search(lower):
        return False
    for i, word in enumerate(tokens):
        if word not in RISKS:
            continue
        before = tokens[i - 1] if i > 0 else ""
        after = tokens[i + 1] if i + 1 < len(tokens) else ""
        if before not in TERM_BEFORE and after not in TERM_AFTER:
            return True
    return bool(_HARM.search(lower))


def classify(sentence: str) -> Reading:
    """Type and polarity of one statement: a question or stated ignorance is a gap,
    risk language in context a risk, a hedge an assumption, anything else a claim
    (measured on tests/data/typing/, see docs/belief-math.md)."""
    key, negated = normalize(sentence)
    # "May" inside a sentence is the month, not the hedge.
    lower = _MONTH.sub(r"\1month", sentence).lower().replace("n't", " not")
    tokens = [w.rstrip(".'-:,") for w in WORD.findall(lower)]
    words = set(tokens)
    kind: BeliefKind
    if sentence.rstrip().endswith("?") or _GAP.search(lower):
        kind = "gap"
    elif _risky(lower, tokens):
        kind = "risk"
    elif words & (HEDGES | TYPING_HEDGES) or lower.startswith(("i think", "we assume")):
        kind = "assumption"
    else:
        kind = "claim"
    return Reading(text=sentence, type=kind, negated=negated, key=key)

"""What kind of answer a question asks for, and whether a text offers one
(issue 27): a question that asks *when* prefers the beliefs that say when, one that
asks *where* those that name a place.

:func:`asked` reads the kind from the question's first words ("When did ...",
"What year ...", "How long ...", "Where is ...", "In which city ..."); :func:`offers`
whether a text holds an answer of that kind:

- ``time``: a date or a month, a weekday, a year, a clock time, a day word
  ("yesterday", "tonight", "the next morning"), an offset ("five hours ago", "in a
  couple of weeks", "last summer") or a word that places an event in time ("later",
  "until", "since");
- ``place``: a preposition of place before a name ("in Paris", "at Central Perk")
  or a place noun ("at the airport", "in Monica's apartment").

English patterns, deterministic, no model. On the dev sets (docs/benchmarks.md,
"Answer types") a gold answer to a when-question says when 6.7 times as often as an
utterance at random on FriendsQA and 2.9 times as often as a sentence on SQuAD; to a
where-question, it names a place 5.1 and 2.3 times as often. So the ranking lifts a
belief that offers the asked kind by :data:`LIFT` of its query relevance
(:class:`worldline.actors.projector.relevance.Relevance`): a lift, not a score of its
own, so a belief that shares nothing with the question is never brought in because
it names a day or a place. Numbers, reasons and people are not typed: measured the
same way, "how many" and "why" gained nothing or lost on the dev sets, and nearly
every sentence names someone.
"""

from __future__ import annotations

import functools
import re
from typing import Final, Literal

__all__ = ["LIFT", "Kind", "asked", "offers"]

Kind = Literal["time", "place"]

LIFT: Final = 0.3  # of the query relevance, for a belief offering the asked kind

_NUMBER: Final = (
    r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
    r"|fifteen|twenty|thirty|forty|fifty|hundred|few|several|many|some"
    r"|(?:a\s+)?(?:couple|few)(?:\s+of)?)"
)
_UNIT: Final = (
    r"(?:second|minute|hour|day|night|week|weekend|month|year|decade|century"
    r"|centuries|semester|season)s?"
)
_MONTH: Final = (
    r"(?:january|february|april|june|july|august|september|october|november"
    r"|december|jan|feb|apr|jun|jul|aug|sept|sep|oct|nov|dec)"
)
_WEEKDAY: Final = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?"
_PART: Final = r"(?:morning|afternoon|evening|night|summer|winter|spring|autumn|fall)"

# Time. "May" and "March" are months only beside a number or a word that dates them:
# "may" is mostly the verb, "march" often the noun.
_TIME: Final = re.compile(
    "|".join(
        [
            r"\b(?:yesterday|today|tonight|tomorrow|overnight|noon|midnight"
            r"|o'clock|dawn|dusk)\b",
            rf"\b{_MONTH}\b",
            r"\b(?:may|march)\s+\d",
            r"\b\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:may|march)\b",
            r"\b(?:in|early|late|mid|last|next|this)\s+(?:may|march)\b",
            rf"\b{_WEEKDAY}\b",
            r"\bweekends?\b",
            rf"\b{_NUMBER}\s+{_UNIT}\s+(?:ago|later|earlier|before|after|from\s+now"
            r"|back)\b",
            rf"\b(?:in|for|within|after)\s+(?:about\s+|like\s+|around\s+)?"
            rf"{_NUMBER}\s+{_UNIT}\b",
            r"\b(?:last|next|this|past|coming|previous|following|same|that|every"
            rf"|each)\s+(?:{_UNIT}|{_PART}|time|{_WEEKDAY})\b",
            r"\b(?:morning|afternoon|evening|night)s?\b",
            r"\b(?:1[0-9]{3}|20[0-9]{2})s?\b",
            r"'\d0s\b",
            r"\b\d{1,2}(?:st|nd|rd|th)\s+century\b",
            r"\b(?:century|centuries|decades?)\b",
            r"\b\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.)",
            r"\b\d{1,2}:\d{2}\b",
            r"\b\d{4}-\d{2}-\d{2}\b",
            r"\b\d{1,2}/\d{1,2}/\d{2,4}\b",
            r"\b(?:ago|later|soon|recently|lately|earlier|someday|nowadays|anymore"
            r"|eventually|finally|afterwards|beforehand|meanwhile|until|till|since"
            r"|during)\b",
        ]
    ),
    re.IGNORECASE,
)

_PLACE_NOUN: Final = (
    r"(?:apartment|house|home|room|office|restaurant|street|hospital|city|town"
    r"|country|building|store|shop|bar|cafe|coffee\s?house|park|school|university"
    r"|college|church|museum|hotel|airport|station|kitchen|bedroom|bathroom|hallway"
    r"|balcony|roof|lobby|stage|theat(?:er|re)|club|gym|beach|island|river|lake"
    r"|mountain|state|province|region|capital|village|county|district|coast|border"
    r"|bay|bridge|road|avenue|square|hall|library|lab|laboratory|court|prison|camp"
    r"|base|port|harbou?r|field|stadium|arena|continent|valley|desert|forest|ocean"
    r"|sea|temple|palace|castle|farm|factory|market|mall|garden|yard|garage)s?"
)
# Place: a preposition of place before a name or a place noun. Case matters here:
# a name is capitalised, and "In" opening a sentence is seldom a place.
_PLACE: Final = re.compile(
    r"\b(?:at|in|on|into|to|from|near|inside|outside|behind|across|around|toward"
    r"|towards|through|under|within)\s+(?:the\s+|a\s+|an\s+|his\s+|her\s+|their\s+"
    rf"|my\s+|your\s+|our\s+)?(?:[A-Z][\w'-]+|(?:[\w'-]+\s+)?{_PLACE_NOUN}\b)"
)
_OFFERS: Final[dict[str, re.Pattern[str]]] = {
    "time": _TIME,
    "place": _PLACE,
}

# What a question asks, by its first words (after "and", "so", "but"); the first
# that matches decides ("how long" asks a time).
_LEAD: Final = r"^\W*(?:(?:and|so|but|then)\s+)?"
_QUESTIONS: Final[tuple[tuple[Kind, str], ...]] = (
    (
        "time",
        r"(?:when\b|since\s+when\b|until\s+when\b|how\s+(?:long|soon|often)\b"
        r"|(?:(?:in|at|on|by|during|since|until|from)\s+)?(?:what|which)\s+"
        r"(?:year|years|date|dates|day|days|time|month|months|century"
        r"|centuries|decade|period|era|season|hour|week|morning|night)\b)",
    ),
    (
        "place",
        r"(?:where\b|(?:in|at|to|from)\s+(?:what|which)\s+(?:place|city|country"
        r"|state|town|building|room|part|area|region|location|continent|street"
        r"|county|province)\b|what\s+(?:place|city|country|state|town|location"
        r"|continent)\b)",
    ),
)
_ASKS: Final = tuple(
    (kind, re.compile(_LEAD + pattern, re.IGNORECASE)) for kind, pattern in _QUESTIONS
)


def asked(query: str) -> Kind | None:
    """The kind of answer ``query`` asks for, read from its first words (a "when"
    later in the question is a clause: "Where is she when ..." asks where); None
    for any other question ("what", "who", "which", a statement of the move)."""
    for kind, pattern in _ASKS:
        if pattern.match(query) is not None:
            return kind
    return None


@functools.lru_cache(maxsize=16384)
def offers(kind: Kind, text: str) -> bool:
    """Whether ``text`` holds an answer of the ``kind`` (the module doc lists
    what each kind looks for)."""
    return _OFFERS[kind].search(text) is not None

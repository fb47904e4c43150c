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
where-question, it names a place 4.8 and 2.3 times as often
(``bench/answer_types.py``). So the ranking lifts a
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
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["LIFT", "Kind", "Marks", "asked", "days", "kinds", "marks", "offers"]

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
_PART: Final = r"(?:morning|afternoon|evening|night|summer|winter|spring|autumn|fall)"

# Every ASCII character but letters, digits and the apostrophe ends a word.
_SPACES: Final = str.maketrans(
    dict.fromkeys(
        (chr(c) for c in range(128) if not (chr(c).isalnum() or chr(c) == "'")), " "
    )
)


def _words(text: str) -> set[str]:
    """``text``'s lower-case words, with and without their apostrophes' parts
    ("o'clock" and "morning's", "morning")."""
    found = set(text.lower().translate(_SPACES).split())
    for word in [w for w in found if "'" in w]:
        found.update(part for part in word.split("'") if part)
    return found


def _vocabulary(words: str, *endings: str) -> frozenset[str]:
    """The words of ``words`` (space-separated), each also with each ending."""
    return frozenset(w + e for w in words.split() for e in ("", *endings))


_MONTHS: Final = {
    name: n
    for n, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sept", "sep"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
# Time. Most of it is single words, looked up in a set; the phrases (a number and a
# unit, "last summer", "in May", dates and clock times with digits) are matched only
# in a text that holds one of their cue words or a digit (one alternation of them
# all, tried at every character, was far dearer). "May" and "March" are months only
# beside a number or a word that dates them ("may" is mostly the verb, "march" often
# the noun).
_MONTHS_ONLY: Final = frozenset(_MONTHS) - {"may", "march", "mar"}
_WEEKDAYS: Final = _vocabulary(
    "monday tuesday wednesday thursday friday saturday sunday", "s"
)
_TIME_WORDS: Final = (
    _vocabulary(
        "yesterday today tonight tomorrow overnight noon midnight o'clock dawn dusk "
        "weekend morning afternoon evening night century decade",
        "s",
    )
    | _vocabulary(
        "centuries ago later soon recently lately earlier someday nowadays anymore "
        "eventually finally afterwards beforehand meanwhile until till since during"
    )
    | _MONTHS_ONLY
    | _WEEKDAYS
)
_UNITS: Final = _vocabulary(
    "second minute hour day week month year semester season", "s"
)
_PHRASE_CUES: Final = _UNITS | _vocabulary(
    "may march summer winter spring autumn fall time"
)
_TIME_PHRASES: Final = re.compile(
    "|".join(
        [
            r"\b(?:may|march)\s+\d",
            r"\b(?:in|early|late|mid|last|next|this)\s+(?:may|march)\b",
            rf"\b{_NUMBER}\s+{_UNIT}\s+(?:before|after|from\s+now|back)\b",
            rf"\b(?:in|for|within|after)\s+(?:about\s+|like\s+|around\s+)?"
            rf"{_NUMBER}\s+{_UNIT}\b",
            r"\b(?:last|next|this|past|coming|previous|following|same|that|every"
            rf"|each)\s+(?:{_UNIT}|{_PART}|time)\b",
        ]
    ),
    re.IGNORECASE,
)
# Dates and clock times with digits, matched where a run of digits starts: a year,
# "the 1990s", "5:30", "5 pm", "8/5/2023", "8 May"; and "'90s".
_DIGITS: Final = re.compile(r"\d+")
_AT_DIGITS: Final = re.compile(
    r"(?:1\d{3}|20\d{2})s?\b|\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.)"
    r"|\d{1,2}:\d{2}\b|\d{1,2}/\d{1,2}/\d{2,4}\b"
    r"|\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:may|march)\b",
    re.IGNORECASE,
)
_DECADE: Final = re.compile(r"\d0s\b")


def _digits_say_when(text: str) -> bool:
    for run in _DIGITS.finditer(text):
        start = run.start()
        before = text[start - 1] if start else " "
        if before.isalnum() or before == "_":  # inside a word: no \b before it
            continue
        if before == "'" and _DECADE.match(text, start) and run.end() - start == 2:
            return True
        if _AT_DIGITS.match(text, start) is not None:
            return True
    return False


def _says_when(text: str, words: set[str]) -> bool:
    if not words.isdisjoint(_TIME_WORDS):
        return True
    if _digits_say_when(text):
        return True
    return not words.isdisjoint(_PHRASE_CUES) and (
        _TIME_PHRASES.search(text) is not None
    )


_PLACE_NOUNS: Final = _vocabulary(
    "apartment house home room office restaurant street hospital city town country "
    "building store shop bar cafe coffeehouse park school university college church "
    "museum hotel airport station kitchen bedroom bathroom hallway balcony roof "
    "lobby stage theater theatre club gym beach island river lake mountain state "
    "province region capital village county district coast border bay bridge road "
    "avenue square hall library lab laboratory court prison camp base port harbor "
    "harbour field stadium arena continent valley desert forest ocean sea temple "
    "palace castle farm factory market mall garden yard garage",
    "s",
)
_PLACE_PREPOSITIONS: Final = (
    "at|in|on|into|to|from|near|inside|outside|behind|across|around|toward|towards"
    "|through|under|within"
)
_PREPOSITION: Final = rf"\b(?:{_PLACE_PREPOSITIONS})\s+"
_DETERMINER: Final = r"(?:(?:the|a|an|this|that|his|her|their|my|your|our)\s+)?"
# Place: a preposition of place before a name or a place noun. Case matters here:
# a name is capitalised, and "In" opening a sentence is seldom a place.
_BEFORE_NAME: Final = re.compile(rf"{_PREPOSITION}{_DETERMINER}[A-Z][\w'-]+")
_BEFORE_NOUN: Final = re.compile(
    rf"{_PREPOSITION}{_DETERMINER}(?:[\w'-]+\s+)?"
    rf"(?:{'|'.join(sorted(_PLACE_NOUNS, key=len, reverse=True))})\b"
)


def _names_a_place(text: str, words: set[str]) -> bool:
    if _BEFORE_NAME.search(text) is not None:
        return True
    return not words.isdisjoint(_PLACE_NOUNS) and (
        _BEFORE_NOUN.search(text) is not None
    )


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
    what each kind looks for): what a read asks of a card that kept no kinds."""
    return kind in kinds(text)


def kinds(text: str) -> tuple[Kind, ...]:
    """The kinds of answer ``text`` offers: what its card keeps, so that a read
    need not match a candidate's text again."""
    found: list[Kind] = []
    words = _words(text)
    if _names_a_place(text, words):
        found.append("place")
    if _says_when(text, words):
        found.append("time")
    return tuple(found)


class Marks(NamedTuple):
    """What a belief's card says for answer types: the :func:`kinds` of its text
    (None: a card written before they were kept, so a read matches the text), and
    the day it was first said (``YYYY-MM-DD``, "" unknown)."""

    offers: tuple[str, ...] | None
    said: str


_MONTH_NAME: Final = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ORDINAL: Final = r"(\d{1,2})(?:st|nd|rd|th)?"
# The dates a question names, most precise first: (pattern, what it spans).
_DATES: Final = (
    (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"), "ymd"),
    (
        re.compile(
            rf"\b{_ORDINAL}\s+(?:of\s+)?({_MONTH_NAME})\.?,?(?:\s+(\d{{4}}))?\b",
            re.IGNORECASE,
        ),
        "dmy",
    ),
    (
        re.compile(
            rf"\b({_MONTH_NAME})\.?\s+{_ORDINAL},?(?:\s+(\d{{4}}))?\b", re.IGNORECASE
        ),
        "mdy",
    ),
    (re.compile(rf"\b({_MONTH_NAME})\.?,?\s+(\d{{4}})\b", re.IGNORECASE), "my"),
    (re.compile(rf"\bin\s+({_MONTH_NAME})\b", re.IGNORECASE), "m"),
    (re.compile(r"\b(?:in|during|of)\s+(1[0-9]{3}|20[0-9]{2})\b"), "y"),
)
_RELATIVE: Final = re.compile(
    r"\b(?:(today|tonight|this\s+morning)|(yesterday|last\s+night)"
    r"|(?:(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten)\s+"
    r"(day|week|month|year)s?\s+ago)|(?:(last|this)\s+(week|month|year|weekend)))\b",
    re.IGNORECASE,
)
_RELATIVE_CUES: Final = _vocabulary("today tonight yesterday ago last this")
_SMALL: Final = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
}


def days(query: str, at: datetime | None = None) -> tuple[date, date] | None:
    """The days a question names (first and last, inclusive), or None: a date
    ("2023-05-08", "8 May 2023", "May 8th", "May 2023", "in May", "in 2023"), or,
    given the clock ``at``, a day relative to it ("yesterday", "three days ago",
    "last week", "this month"). A date without its year is in ``at``'s year."""
    return _days(query, at.date() if at is not None else None)


@functools.lru_cache(maxsize=1024)
def _days(query: str, today: date | None) -> tuple[date, date] | None:
    words = _words(query)
    digits = _DIGITS.search(query) is not None
    if digits or not words.isdisjoint(_MONTHS):  # a date's patterns need either
        for pattern, shape in _DATES:
            found = pattern.search(query)
            if found is None:
                continue
            span = _span(shape, found.groups(), today)
            if span is not None:
                return span
    if today is None or words.isdisjoint(_RELATIVE_CUES):
        return None
    found = _RELATIVE.search(query)
    if found is None:
        return None
    now, yesterday, count, unit, which, period = found.groups()
    if now:
        return today, today
    if yesterday:
        return today - timedelta(days=1), today - timedelta(days=1)
    if count:
        n = _SMALL.get(count.lower()) or int(count)
        unit = unit.lower()
        if unit == "day":
            day = today - timedelta(days=n)
            return day, day
        if unit == "week":
            day = today - timedelta(weeks=n)
            return day - timedelta(days=3), day + timedelta(days=3)
        if unit == "month":
            first = _month_start(today, -n)
            return first, _month_start(first, 1) - timedelta(days=1)
        return date(today.year - n, 1, 1), date(today.year - n, 12, 31)
    period = period.lower()
    back = which.lower() == "last"
    if period in ("week", "weekend"):
        monday = today - timedelta(days=today.weekday()) - timedelta(weeks=back)
        if period == "weekend":
            return monday + timedelta(days=5), monday + timedelta(days=6)
        return monday, min(monday + timedelta(days=6), today)
    if period == "month":
        first = _month_start(today, -back)
        return first, min(_month_start(first, 1) - timedelta(days=1), today)
    year = today.year - back
    return date(year, 1, 1), min(date(year, 12, 31), today)


def _month_start(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _span(
    shape: str, groups: tuple[str | None, ...], today: date | None
) -> tuple[date, date] | None:
    """The days one matched date spans (None: not a date, or its year unknown)."""
    try:
        if shape == "ymd":
            day = date(int(groups[0] or 0), int(groups[1] or 0), int(groups[2] or 0))
            return day, day
        if shape in ("dmy", "mdy"):
            d, m, y = groups if shape == "dmy" else (groups[1], groups[0], groups[2])
            year = int(y) if y else today.year if today else None
            if year is None:
                return None
            day = date(year, _MONTHS[(m or "").lower()], int(d or 0))
            return day, day
        if shape in ("my", "m"):
            year = int(groups[1]) if shape == "my" and groups[1] else None
            year = year or (today.year if today else None)
            if year is None:
                return None
            first = date(year, _MONTHS[(groups[0] or "").lower()], 1)
            return first, _month_start(first, 1) - timedelta(days=1)
        year = int(groups[0] or 0)
        return date(year, 1, 1), date(year, 12, 31)
    except ValueError:  # "31 February"
        return None


def marks(query: str, at: datetime | None, cards: Iterable[Any]) -> dict[str, Marks]:
    """What ``cards`` (the candidates, :class:`~.index.Card` or its ranking
    view) say for answer types, by text; nothing when ``query`` asks no kind of
    answer and names no day (the ranking then reads none)."""
    if asked(query) is None and days(query, at) is None:
        return {}
    return {c.belief.text: Marks(c.offers, c.said) for c in cards}

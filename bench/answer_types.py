"""How often a dev question's gold answer offers the kind of answer the question
asks for, against a sentence of the set at random (issue 27, docs/benchmarks.md
"Answer types and the time a statement was made").

The kinds the ranking lifts (``time``, ``place``) are read with the projector's own
:mod:`worldline.actors.projector.answer_type`; three more were tried and left out,
and are read here with the patterns they were tried with: ``number`` ("how many",
"how much", "how old"; a numeral or a number word), ``reason`` ("why"; "because",
"so that", "due to") and ``person`` ("who", "whom", "whose"; a capitalised word).
FriendsQA's utterances are read without their speakers' names (``Name: ``), so a
speaker does not count as a place or a person.

    python bench/answer_types.py                  # both dev sets
    python bench/answer_types.py --corpus squad   # one

The data: ``bench/data/squad/`` and ``bench/data/friendsqa/`` (built as their
READMEs say).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from worldline.actors.projector import answer_type

DATA = Path(__file__).resolve().parent / "data"
CORPORA = ("friendsqa", "squad")

_LEAD = r"^\W*(?:(?:and|so|but|then)\s+)?"
ASKS_NUMBER = re.compile(
    _LEAD + r"(?:how\s+(?:many|much|old|far|big|large|tall|high|deep|wide|heavy)\b"
    r"|what\s+(?:percentage|percent|number|amount|proportion|fraction|size)\b)",
    re.IGNORECASE,
)
ASKS_REASON = re.compile(
    _LEAD + r"(?:why\b|for\s+what\s+reason\b|what\s+(?:reason|caused)\b)",
    re.IGNORECASE,
)
ASKS_PERSON = re.compile(
    _LEAD + r"(?:who\b|whom\b|whose\b|which\s+(?:person|people|man|woman)\b)",
    re.IGNORECASE,
)
NUMBER = re.compile(
    r"\b\d[\d,.]*\b|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven"
    r"|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen"
    r"|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand"
    r"|million|billion|dozen|half|once|twice|percent)\b",
    re.IGNORECASE,
)
REASON = re.compile(
    r"\b(?:because|cause|'cause|cuz|since|so\s+that|due\s+to|in\s+order\s+to"
    r"|reason|therefore|thus|so)\b",
    re.IGNORECASE,
)
PERSON = re.compile(r"\b[A-Z][a-z]+\b")

Asks = Callable[[str], bool]
Offers = Callable[[str], bool]
KINDS: tuple[tuple[str, bool, Asks, Offers], ...] = (
    (
        "time",
        True,
        lambda q: answer_type.asked(q) == "time",
        lambda t: answer_type.offers("time", t),
    ),
    (
        "place",
        True,
        lambda q: answer_type.asked(q) == "place",
        lambda t: answer_type.offers("place", t),
    ),
    (
        "number",
        False,
        lambda q: bool(ASKS_NUMBER.match(q)),
        lambda t: bool(NUMBER.search(t)),
    ),
    (
        "reason",
        False,
        lambda q: bool(ASKS_REASON.match(q)),
        lambda t: bool(REASON.search(t)),
    ),
    (
        "person",
        False,
        lambda q: bool(ASKS_PERSON.match(q)),
        lambda t: bool(PERSON.search(t)),
    ),
)


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def rates(data: Path) -> list[tuple[str, bool, int, float, float]]:
    """Per kind: lifted by the ranking, questions asking it, the share of them
    with a gold sentence offering it, and the share of all sentences offering it."""
    sentences = {}
    for row in _jsonl(data / "dev-sentences.jsonl.gz"):
        text = row["text"]
        head, colon, rest = text.partition(": ")
        if colon and data.name == "friendsqa" and len(head) <= 60:
            text = rest  # the speakers' names
        sentences[row["id"]] = text
    questions = list(_jsonl(data / "dev-questions.jsonl.gz"))
    found = []
    for kind, lifted, asks, offers in KINDS:
        asking = [q for q in questions if asks(q["question"])]
        gold = sum(
            any(offers(sentences[a]) for a in q["answers"] if a in sentences)
            for q in asking
        )
        anywhere = sum(offers(t) for t in sentences.values())
        found.append(
            (
                kind,
                lifted,
                len(asking),
                gold / len(asking) if asking else 0.0,
                anywhere / len(sentences),
            )
        )
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", choices=CORPORA, nargs="*", default=list(CORPORA))
    args = parser.parse_args(argv)
    print(f"{'dev set':<10} {'kind':<7} {'lifted':<6} {'questions':>9} "
          f"{'gold offers':>11} {'any sentence':>12} {'ratio':>6}")  # fmt: skip
    for corpus in args.corpus:
        for kind, lifted, n, gold, anywhere in rates(DATA / corpus):
            ratio = gold / anywhere if anywhere else float("nan")
            print(f"{corpus:<10} {kind:<7} {'yes' if lifted else 'no':<6} {n:>9,} "
                  f"{gold:>11.3f} {anywhere:>12.3f} {ratio:>6.2f}")  # fmt: skip


if __name__ == "__main__":
    main()

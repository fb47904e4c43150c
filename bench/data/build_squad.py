"""Build the relevance dev set in ``bench/data/squad/`` from SQuAD v1.1.

Run, from a clone (or bare git directory) of the rajpurkar/SQuAD-explorer repository::

    python bench/data/build_squad.py --explorer GIT_DIR [--train TRAIN_JSON]
    python bench/data/build_squad.py --dev DEV_JSON [--train TRAIN_JSON]

``--dev`` / ``--train`` read the official ``dataset/dev-v1.1.json`` and
``dataset/train-v1.1.json`` (answers located by their ``answer_start`` offsets).
``--explorer`` reads the dev set from the explorer's pages instead, branch
``gh-pages``, ``explore/1.1/dev/*.html`` (article order from its ``index.html``): the
same 48 articles, 2,067 paragraphs and 10,570 questions with their ids, but answer
texts without offsets, so an answer is located by searching its text in the paragraph
(see ``locate_by_text``). The snapshot this folder was built from lacks the two json
files (they are over the snapshot's 4 MiB file limit), so ``--explorer`` built it.

Writes, deterministically (same input -> same bytes), into ``--out``
(default ``bench/data/squad``):

- ``dev-sentences.jsonl.gz``: every sentence of every dev paragraph,
  ``{"id": "d<article>-p<paragraph>-s<sentence>", "article": title, "text": sentence}``;
- ``dev-questions.jsonl.gz``: every dev question, ``{"id", "question", "answers"}``
  where ``answers`` lists the ids of the sentences holding a gold answer's start;
- ``train-sentences.txt.xz`` (only with ``--train``): the first 100,000 distinct train
  sentences, file order;
- ``LICENSE.md`` and ``README.md`` (counts and the command).

Sentences are split with one regular expression (``. ! ?``, optional closing quote or
bracket, whitespace, then a capital, digit, quote or bracket), except after a short
list of abbreviations, single capitals (initials) and dotted ones (``U.S.``, ``e.g.``).
"""

from __future__ import annotations

import argparse
import gzip
import html
import io
import json
import lzma
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any

__all__ = [
    "build_dev",
    "build_train",
    "load_explorer",
    "locate_by_text",
    "split_sentences",
]

TRAIN_SENTENCES = 100_000
_BOUNDARY = re.compile(
    r"[.!?][\"'\u201d\u2019)\]]*(\s+)(?=[\"'\u201c\u2018(\[]?[A-Z0-9])"
)
_ABBREVIATIONS = frozenset(
    (
        "Mr",
        "Mrs",
        "Ms",
        "Dr",
        "St",
        "Jr",
        "Sr",
        "Prof",
        "Gen",
        "Col",
        "Lt",
        "Sgt",
        "Capt",
        "Rev",
        "Gov",
        "Sen",
        "Rep",
        "No",
        "Nos",
        "Mt",
        "Ft",
        "Inc",
        "Co",
        "Corp",
        "Ltd",
        "Bros",
        "Jan",
        "Feb",
        "Mar",
        "Apr",
        "Jun",
        "Jul",
        "Aug",
        "Sep",
        "Sept",
        "Oct",
        "Nov",
        "Dec",
        "Fig",
        "Vol",
        "Ave",
        "vs",
        "v",
        "c",
        "ca",
        "approx",
        "cf",
        "al",
        "op",
        "ed",
        "eds",
        "est",
        "fl",
    )
)
_LAST_TOKEN = re.compile(r"(?:^|[^A-Za-z.])([A-Za-z.]*[A-Za-z])$")


def _is_abbreviation(before: str) -> bool:
    """True if the text just before a full stop ends with an abbreviation: a listed
    one, a single capital (an initial) or a dotted one (``U.S``, ``e.g``, ``Ph.D``)."""
    match = _LAST_TOKEN.search(before)
    if match is None:
        return False
    token = match.group(1)
    if "." in token:
        return True
    return token in _ABBREVIATIONS or (len(token) == 1 and token.isupper())


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Spans ``(start, end)`` of the sentences of ``text``; each span runs up to the
    next sentence's start (trailing whitespace included), so every character offset
    of ``text`` falls in exactly one span. Strip a span's text to get the sentence."""
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        if text[match.start()] == "." and _is_abbreviation(text[start : match.start()]):
            continue
        end = match.end(1)
        if text[start:end].strip():
            spans.append((start, end))
            start = end
    if text[start:].strip():
        spans.append((start, len(text)))
    elif spans:
        spans[-1] = (spans[-1][0], len(text))
    return spans


def _jsonl_gz(rows: list[dict[str, Any]], path: Path) -> None:
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False).encode() + b"\n")
    path.write_bytes(raw.getvalue())


def _git_show(git_dir: Path, spec: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", spec],
        check=True,
        capture_output=True,
    ).stdout.decode("utf-8")


_PAGE_LINK = re.compile(r'href="/SQuAD-explorer/explore/1\.1/dev/([^"?]+)\.html"')
_PARAGRAPH = re.compile(r'<div class="para-wrap">')
_CONTEXT = re.compile(r"<pre>(.*?)</pre>", re.S)
_QA = re.compile(
    r'<div class="qa-wrap" data-id="([^"]+)">.*?<strong class="question">(.*?)</strong>'
    r"(.*?)</ul>",
    re.S,
)
_ANSWER = re.compile(r'<span class="answer">(.*?)</span>', re.S)


def load_explorer(git_dir: Path, ref: str = "gh-pages") -> dict[str, Any]:
    """The dev set as in ``dev-v1.1.json`` (answers without ``answer_start``), read
    from the explorer pages ``explore/1.1/dev/<title>.html`` of ``ref``."""
    index = _git_show(git_dir, f"{ref}:explore/1.1/dev/index.html")
    titles = list(dict.fromkeys(_PAGE_LINK.findall(index)))
    articles: list[dict[str, Any]] = []
    for title in titles:
        page = _git_show(git_dir, f"{ref}:explore/1.1/dev/{title}.html")
        paragraphs: list[dict[str, Any]] = []
        for chunk in _PARAGRAPH.split(page)[1:]:
            context = _CONTEXT.search(chunk)
            assert context is not None, title
            qas = [
                {
                    "id": qid,
                    "question": html.unescape(question),
                    "answers": [
                        {"text": html.unescape(a)} for a in _ANSWER.findall(answers)
                    ],
                }
                for qid, question, answers in _QA.findall(chunk)
            ]
            paragraphs.append({"context": html.unescape(context.group(1)), "qas": qas})
        articles.append({"title": title, "paragraphs": paragraphs})
    return {"data": articles}


def locate_by_text(
    context: str, spans: list[tuple[int, int]], answers: list[str]
) -> tuple[list[int], bool]:
    """Sentence indices for answers given as text only (no offsets), and whether the
    result is unambiguous. An answer text found at one place in the paragraph names
    the sentence holding its start; the union of those is the result. If every answer
    text occurs at several places (or none), all sentences holding a start of the
    longest answer are returned, flagged ambiguous."""
    found: list[int] = []
    candidates: dict[str, list[int]] = {}
    for text in dict.fromkeys(a for a in answers if a.strip()):
        starts = [m.start() for m in re.finditer(re.escape(text), context)]
        sentences = sorted({_sentence_at(spans, start) for start in starts})
        candidates[text] = sentences
        if len(starts) == 1:
            found.extend(s for s in sentences if s not in found)
    if found:
        return sorted(found), True
    longest = max(candidates, key=len, default="")
    return candidates.get(longest, []), False


def _sentence_at(spans: list[tuple[int, int]], offset: int) -> int:
    for index, (lo, hi) in enumerate(spans):
        if lo <= offset < hi:
            return index
    return len(spans) - 1


def build_dev(
    data: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """Sentence rows and question rows of the SQuAD dev set, and how many questions
    were located by text ambiguously (0 when the answers carry offsets)."""
    sentences: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    ambiguous = 0
    for a, article in enumerate(data["data"]):
        for p, paragraph in enumerate(article["paragraphs"]):
            context: str = paragraph["context"]
            spans = split_sentences(context)
            ids = [f"d{a}-p{p}-s{s}" for s in range(len(spans))]
            for sid, (lo, hi) in zip(ids, spans, strict=True):
                text = context[lo:hi].strip()
                sentences.append({"id": sid, "article": article["title"], "text": text})
            for qa in paragraph["qas"]:
                gold = qa["answers"]
                if all("answer_start" in answer for answer in gold):
                    found = sorted(
                        {_sentence_at(spans, int(g["answer_start"])) for g in gold}
                    )
                else:
                    found, sure = locate_by_text(
                        context, spans, [g["text"] for g in gold]
                    )
                    ambiguous += not sure
                questions.append(
                    {
                        "id": qa["id"],
                        "question": qa["question"],
                        "answers": [ids[s] for s in found],
                    }
                )
    return sentences, questions, ambiguous


def build_train(data: dict[str, Any], limit: int = TRAIN_SENTENCES) -> list[str]:
    """The first ``limit`` distinct train sentences (whitespace runs made one space)."""
    seen: dict[str, None] = {}
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            context: str = paragraph["context"]
            for lo, hi in split_sentences(context):
                text = " ".join(context[lo:hi].split())
                if text:
                    seen.setdefault(text, None)
                if len(seen) >= limit:
                    return list(seen)
    return list(seen)


LICENSE = """\
# License and provenance

The files in this folder are derived from SQuAD v1.1, the Stanford Question Answering
Dataset: Pranav Rajpurkar, Jian Zhang, Konstantin Lopyrev and Percy Liang, "SQuAD:
100,000+ Questions for Machine Comprehension of Text", EMNLP 2016. SQuAD is
distributed under the Creative Commons Attribution-ShareAlike 4.0 International
license (CC BY-SA 4.0, https://creativecommons.org/licenses/by-sa/4.0/).

Source: GitHub repository rajpurkar/SQuAD-explorer, {source}.

Changes made: each paragraph (context) was split into sentences with a regular
expression (`bench/data/build_squad.py`); each dev question is labelled with the
sentence(s) holding the start of a gold answer ({located}); the answer texts and the
paragraph structure were dropped.{train_change}

These derived files are licensed under the same CC BY-SA 4.0 license, with the
attribution above. The builder script itself is part of worldline (Apache-2.0).
"""

README = """\
# SQuAD v1.1 relevance set

Derived from SQuAD v1.1 (CC BY-SA 4.0, see `LICENSE.md`) for retrieval benchmarks
(`bench/embedders.py`, `bench/relevance.py`).

- `dev-sentences.jsonl.gz`: {n_sentences} sentences, every sentence of every paragraph
  ({n_paragraphs}) of the {n_articles} dev articles, one JSON object a line:
  `{{"id": "d<article>-p<paragraph>-s<sentence>", "article": "<title>", "text": "..."}}`
  (indices 0-based, in the dev set's order).
- `dev-questions.jsonl.gz`: {n_questions} dev questions, one JSON object a line:
  `{{"id": "<squad question id>", "question": "...",
  "answers": ["<sentence id>", ...]}}`;
  `answers` are the sentences holding the start of any gold answer, deduplicated
  ({n_multi} questions have more than one, {n_none} none).
{train_line}
Sentences are split by a regular expression on `. ! ?` followed by whitespace and a
capital, digit, quote or bracket, except after listed abbreviations, single capitals
(initials) and dotted ones (`U.S.`, `e.g.`); see `bench/data/build_squad.py`.
{located_note}
Rebuild (byte for byte):

```sh
{command}
```
"""

EXPLORER_NOTE = """
The dev set was read from the explorer's pages (`--explorer`), which give each
answer's text but not its offset: an answer text found at one place in its paragraph
names the sentence holding it; {ambiguous} questions whose every answer text occurs at
several places are labelled with every sentence holding the longest answer.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--explorer", type=Path, help="SQuAD-explorer git directory")
    source.add_argument("--dev", type=Path, help="dataset/dev-v1.1.json")
    parser.add_argument("--train", type=Path, help="dataset/train-v1.1.json")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "squad")
    parser.add_argument("--commit", default="", help="source commit, for LICENSE.md")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    commit: str = args.commit
    if args.explorer is not None:
        dev = load_explorer(args.explorer)
        ref = "gh-pages"
        commit = subprocess.run(
            ["git", f"--git-dir={args.explorer}", "rev-parse", ref],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        source_text = (
            f"branch `{ref}` at commit `{commit}`, pages `explore/1.1/dev/*.html` "
            "(the explorer's rendering of `dataset/dev-v1.1.json`)"
        )
        command = "python bench/data/build_squad.py --explorer SQuAD-explorer/.git"
    else:
        dev = json.loads(args.dev.read_text(encoding="utf-8"))
        source_text = f"file `dataset/dev-v1.1.json` at commit `{commit}`"
        command = (
            f"python bench/data/build_squad.py --dev dev-v1.1.json --commit {commit}"
        )
    sentences, questions, ambiguous = build_dev(dev)
    _jsonl_gz(sentences, out / "dev-sentences.jsonl.gz")
    _jsonl_gz(questions, out / "dev-questions.jsonl.gz")
    train_line = train_change = ""
    if args.train is not None:
        train = build_train(json.loads(args.train.read_text(encoding="utf-8")))
        text = "".join(line + "\n" for line in train).encode()
        (out / "train-sentences.txt.xz").write_bytes(lzma.compress(text, preset=9))
        train_line = (
            f"- `train-sentences.txt.xz`: {len(train)} distinct sentences of "
            "train-v1.1 contexts, one a line, file order (real text for latency "
            "runs at 100k beliefs).\n"
        )
        train_change = (
            " The train file keeps only the first 100,000 distinct train sentences, "
            "whitespace runs collapsed."
        )
        source_text += ", and `dataset/train-v1.1.json`"
        command += f" --train {args.train.name}"
    counts = {
        "n_sentences": len(sentences),
        "n_paragraphs": sum(len(a["paragraphs"]) for a in dev["data"]),
        "n_articles": len(dev["data"]),
        "n_questions": len(questions),
        "n_multi": sum(len(q["answers"]) > 1 for q in questions),
        "n_none": sum(not q["answers"] for q in questions),
        "ambiguous": ambiguous,
    }
    located = (
        "located by searching the answer text in its paragraph, the explorer pages "
        "having no offsets"
        if args.explorer is not None
        else "located by the answer's `answer_start` offset"
    )
    license_text = LICENSE.format(
        source=source_text, located=located, train_change=train_change
    )
    (out / "LICENSE.md").write_text(
        "\n\n".join(
            textwrap.fill(block, width=86) if not block.startswith("#") else block
            for block in license_text.strip().split("\n\n")
        )
        + "\n"
    )
    note = EXPLORER_NOTE.format(ambiguous=ambiguous) if args.explorer else ""
    (out / "README.md").write_text(
        README.format(
            **counts, train_line=train_line, located_note=note, command=command
        )
    )
    print(json.dumps(counts))


if __name__ == "__main__":
    main()

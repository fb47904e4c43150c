"""Build the multi-hop relevance dev set in ``bench/data/hotpotqa/`` from HotpotQA
(CC BY-SA 4.0) dev questions in the distractor setting: each question comes with ten
Wikipedia paragraphs, two of them gold (the two hops), eight retrieved as
distractors.

Source: the 500-question dev sample IRCoT (Trivedi et al., ACL 2023) keeps as
``processed_data/hotpotqa/dev_subsampled.jsonl`` (one JSON object a line:
``question_id`` (HotpotQA's ``_id``), ``question_text``, ``contexts``: the ten
paragraphs, each ``title``, ``paragraph_text`` (HotpotQA's sentences joined with a
space, each after the first starting with one: a double space between sentences)
and ``is_supporting``). Run, from a clone (or bare git directory) of a repository
that holds that file::

    python bench/data/hotpotqa/build_hotpotqa.py --git-dir GIT_DIR
    python bench/data/hotpotqa/build_hotpotqa.py --file dev_subsampled.jsonl \
        [--source "REPO at COMMIT"]

Writes, deterministically (same input -> same bytes), into ``--out`` (default: this
folder; the two data files are git-ignored there, built rather than committed), in
the format of ``bench/data/squad/`` that ``bench/relevance.py`` reads:

- ``dev-sentences.jsonl.gz``: every paragraph of every question once (by title,
  in order of first use, so a leading slice holds the leading questions' worlds
  whole), one line per sentence: ``{"id": "p<paragraph>-s<sentence>", "article":
  "<title>", "text": "..."}``;
- ``dev-questions.jsonl.gz``: ``{"id", "question", "answers": [<sentence ids>],
  "facts": [[<sentence ids>], [<sentence ids>]]}``: ``facts`` one list per gold
  paragraph (its sentences), ``answers`` all of them. The sample keeps HotpotQA's
  support by paragraph, not by sentence: a question's two hops are its two gold
  paragraphs, and a retrieval reaches a hop when it shows any sentence of it;
- ``LICENSE.md`` and ``README.md`` (counts, hashes and the command).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["build", "main", "sentences_of"]

FILE = "processed_data/hotpotqa/dev_subsampled.jsonl"


def sentences_of(paragraph: str) -> list[str]:
    """HotpotQA's sentences of a paragraph IRCoT joined: split at the double space
    between them (a sentence that held a double space itself splits there too)."""
    return [s.strip() for s in paragraph.split("  ") if s.strip()]


def build(
    rows: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Sentence rows and question rows of IRCoT's HotpotQA sample ``rows``."""
    sentences: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    paragraphs: dict[str, tuple[str, list[str]]] = {}  # title -> (text, ids)
    seen: set[str] = set()
    for row in rows:
        if row["question_id"] in seen:
            raise ValueError(f"question {row['question_id']} twice")
        seen.add(row["question_id"])
        facts: list[list[str]] = []
        for context in row["contexts"]:
            title, text = context["title"], context["paragraph_text"]
            if title not in paragraphs:
                n = len(paragraphs)
                ids = []
                for s, sentence in enumerate(sentences_of(text)):
                    ids.append(f"p{n}-s{s}")
                    sentences.append(
                        {"id": ids[-1], "article": title, "text": sentence}
                    )
                paragraphs[title] = (text, ids)
            elif paragraphs[title][0] != text:
                raise ValueError(f"paragraph {title!r} with two texts")
            if context["is_supporting"]:
                facts.append(paragraphs[title][1])
        questions.append(
            {
                "id": row["question_id"],
                "question": row["question_text"],
                "answers": [i for fact in facts for i in fact],
                "facts": facts,
            }
        )
    return sentences, questions


def _jsonl_gz(rows: list[dict[str, Any]], path: Path) -> None:
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False).encode() + b"\n")
    path.write_bytes(raw.getvalue())


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True
    ).stdout.decode("utf-8")


LICENSE = """\
# License and provenance

The files `dev-sentences.jsonl.gz` and `dev-questions.jsonl.gz` in this folder are
derived from HotpotQA (Zhilin Yang, Peng Qi, Saizheng Zhang, Yoshua Bengio, William
W. Cohen, Ruslan Salakhutdinov and Christopher D. Manning, "HotpotQA: A Dataset for
Diverse, Explainable Multi-hop Question Answering", EMNLP 2018), distributed under
the Creative Commons Attribution-ShareAlike 4.0 International License (CC BY-SA 4.0,
https://creativecommons.org/licenses/by-sa/4.0/). Its paragraphs are from English
Wikipedia (CC BY-SA).

They were built from the 500-question sample of the HotpotQA dev set (distractor
setting) that IRCoT keeps as `processed_data/hotpotqa/dev_subsampled.jsonl`
(Harsh Trivedi, Niranjan Balasubramanian, Tushar Khot and Ashish Sabharwal,
"Interleaving Retrieval with Chain-of-Thought Reasoning for Knowledge-Intensive
Multi-Step Questions", ACL 2023; code Apache-2.0), read from {source}.

Changes made (`build_hotpotqa.py`): every paragraph was kept once by title and
split back into its sentences at the double spaces between them; each question
keeps its text and the ids of the sentences of its two gold paragraphs (answers,
question types and levels were dropped).

The derived files are distributed under the same CC BY-SA 4.0 license, with the
attribution above. The builder script is part of worldline (Apache-2.0).
"""

README = """\
# HotpotQA relevance set (multi-hop)

Derived from HotpotQA (CC BY-SA 4.0, see `LICENSE.md`): dev questions of the
distractor setting, each asked over ten Wikipedia paragraphs of which two are gold
(the two hops: "What government position was held by the woman who portrayed Corliss
Archer in the film Kiss and Tell?" needs the film's paragraph, which names Shirley
Temple, and Shirley Temple's, which names the position). The multi-hop dev set of
the retrieval benchmark (`bench/relevance.py --corpus hotpotqa`), in the format of
`bench/data/squad/`.

**The data files are built, not committed** (like `bench/data/friendsqa/`'s): build
them once from a clone of a public repository that holds IRCoT's HotpotQA sample
(below), or point the benchmark at a folder that holds them (`--data DIR`).

- `dev-sentences.jsonl.gz`: {n_sentences} sentences of {n_articles} paragraphs (every
  paragraph of the {n_questions} questions once, in order of first use), one JSON
  object a line: `{{"id": "p<paragraph>-s<sentence>", "article": "<title>", "text":
  "..."}}`. All questions' paragraphs are one pool, so a question is asked over
  every other question's paragraphs too (`--sentences N` keeps the leading
  paragraphs, and the questions they hold whole).
- `dev-questions.jsonl.gz`: {n_questions} questions, one JSON object a line:
  `{{"id": "<hotpotqa _id>", "question": "...", "answers": [<sentence ids>],
  "facts": [[<sentence ids>], [<sentence ids>]]}}`: `facts` holds one list per gold
  paragraph, its sentences; `answers` all of them. The sample keeps HotpotQA's
  support by paragraph only, so a retrieval reaches a hop when it shows any sentence
  of that paragraph; the benchmark counts a question whose every hop is reached
  (both) and one with any hop reached (any).

IRCoT joined each paragraph's sentences with a space; each sentence after the first
begins with one, so a double space separates them, and the builder splits there (a
sentence that held a double space itself is split there too: 37 of the first 100
questions' 992 paragraphs split otherwise than HotpotQA's own sentences).

Source: {source_line}

Build (byte for byte the files the figures in `docs/benchmarks.md` were measured on):

```sh
{clone}{command}
```

SHA-256 of the source file and of the built files:

```text
{digests}
```
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git-dir", type=Path, help="a git directory holding " + FILE)
    parser.add_argument("--file", type=Path, help="dev_subsampled.jsonl")
    parser.add_argument("--source", default="", help="where --file came from")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = parser.parse_args()
    if (args.git_dir is None) == (args.file is None):
        parser.error("give --git-dir or --file")
    if args.git_dir is not None:
        text = _git(args.git_dir, "show", f"HEAD:{FILE}")
        commit = _git(args.git_dir, "rev-parse", "HEAD").strip()
        source = f"`{FILE}` at commit `{commit}` of the GitHub repository "
        source += "xindili-cmu/anlp-project-multihop (a copy of IRCoT's)"
        clone = (
            "git clone https://github.com/xindili-cmu/anlp-project-multihop\n"
            f"git -C anlp-project-multihop checkout {commit}\n"
        )
        command = (
            "python bench/data/hotpotqa/build_hotpotqa.py "
            "--git-dir anlp-project-multihop/.git"
        )
    else:
        text = args.file.read_text(encoding="utf-8")
        source = args.source or f"`{args.file.name}`"
        clone = ""
        command = f"python bench/data/hotpotqa/build_hotpotqa.py --file {args.file}"
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    sentences, questions = build(rows)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    names = ("dev-sentences.jsonl.gz", "dev-questions.jsonl.gz")
    _jsonl_gz(sentences, out / names[0])
    _jsonl_gz(questions, out / names[1])
    counts = {
        "n_sentences": len(sentences),
        "n_articles": len({row["article"] for row in sentences}),
        "n_questions": len(questions),
    }
    digests = [f"{hashlib.sha256(text.encode()).hexdigest()}  {FILE}"]
    digests += [
        f"{hashlib.sha256((out / name).read_bytes()).hexdigest()}  {name}"
        for name in names
    ]
    (out / "LICENSE.md").write_text(LICENSE.format(source=source))
    (out / "README.md").write_text(
        README.format(
            **counts,
            source_line=source + ".",
            clone=clone,
            command=command,
            digests="\n".join(digests),
        )
    )
    print(json.dumps(counts))


if __name__ == "__main__":
    main()

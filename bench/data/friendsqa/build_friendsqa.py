"""Build the conversational relevance dev set in ``bench/data/friendsqa/`` from
FriendsQA (Emory NLP, Apache-2.0): multiparty dialogue scenes of the TV show Friends
with questions whose answers are labelled by utterance.

Run, from a clone (or bare git directory) of the emorynlp/FriendsQA repository::

    python bench/data/friendsqa/build_friendsqa.py --git-dir GIT_DIR
    python bench/data/friendsqa/build_friendsqa.py --dev DEV_JSON --tst TST_JSON \
        [--commit SHA]

``--git-dir`` reads ``dat/friendsqa_dev.json`` and ``dat/friendsqa_tst.json`` at
``HEAD`` (and names that commit); ``--dev`` / ``--tst`` read the two files from paths.
Both files are used: neither is a held-out set for worldline, so both are our dev
data (the train file is not used).

Writes, deterministically (same input -> same bytes), into ``--out`` (default: this
folder; the two data files are git-ignored there, built rather than committed), in
the format of ``bench/data/squad/`` that ``bench/relevance.py`` and
``bench/embedders.py`` read:

- ``dev-sentences.jsonl.gz``: one line per utterance, scenes sorted by id,
  utterances in order: ``{"id": "<scene>-u<uid>", "article": "<scene>",
  "text": "<speakers>: <utterance>"}`` (speakers joined by ``", "``; a stage
  direction, speaker ``#NOTE#``, has no prefix; ``#ALL#`` is written ``All``);
- ``dev-questions.jsonl.gz``: every question, in scene order,
  ``{"id", "question", "answers": [<utterance ids>]}``, the distinct utterances
  holding a gold answer (an answer that is a speaker names the utterance spoken);
- ``LICENSE.md`` and ``README.md`` (counts and the command).

The data is tokenised (``You 're gon na kill me !``); utterances and questions are
detokenised by the few rules of ``detokenise`` (``You're gonna kill me!``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import re
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["build", "detokenise", "main", "speaker_prefix"]

FILES = ("dat/friendsqa_dev.json", "dat/friendsqa_tst.json")
UTTERANCES = "utterances:"  # the key really ends with a colon
NOTE, ALL = "#NOTE#", "#ALL#"

# Clitics the tokeniser split off: "do n't", "it 's", "we 're", "I 'm", ...
_CLITIC = re.compile(r"(?<=\w) (n't|'s|'re|'m|'ll|'ve|'d)\b", re.I)
# Words split in two: "gon na", "wan na", "got ta".
_SPLIT = re.compile(r"\b(gon|wan|got) (na|ta)\b", re.I)
_BEFORE = re.compile(r" +(?=[.,!?;:)\]}])")  # a space before closing punctuation
_AFTER = re.compile(r"(?<=[(\[{]) +")  # a space after an opening bracket


def detokenise(text: str) -> str:
    """``text`` with whitespace runs made one space and the tokeniser's spaces taken
    out: before ``n't`` and ``'s 're 'm 'll 've 'd``, inside ``gon na`` / ``wan na``
    / ``got ta``, before ``. , ! ? ; : ) ] }`` and after ``( [ {``. Quotes and
    dashes are left as they are."""
    text = " ".join(text.split())
    text = _CLITIC.sub(r"\1", text)
    text = _SPLIT.sub(r"\1\2", text)
    text = _BEFORE.sub("", text)
    return _AFTER.sub("", text)


def speaker_prefix(speakers: list[str]) -> str:
    """``"Name, Name: "`` for an utterance's speakers; ``""`` for a stage direction
    (``#NOTE#``); ``#ALL#`` (everyone at once) is written ``All``."""
    names = [ALL.strip("#").title() if s == ALL else s for s in speakers if s != NOTE]
    names = [" ".join(name.split()) for name in names]
    return f"{', '.join(names)}: " if names else ""


def _scene_key(scene: str) -> tuple[int | str, ...]:
    """``s01_e23_c06`` -> (1, 23, 6): season, episode, scene, in that order."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[a-z_]+", scene))


def build(
    files: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Utterance rows and question rows of the scenes of ``files`` (FriendsQA json
    documents), scenes sorted by id."""
    scenes: dict[str, dict[str, Any]] = {}
    for document in files:
        for scene in document["data"]:
            if scene["title"] in scenes:
                raise ValueError(f"scene {scene['title']} twice")
            scenes[scene["title"]] = scene
    sentences: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    seen: set[str] = set()
    for title in sorted(scenes, key=_scene_key):
        for paragraph in scenes[title]["paragraphs"]:
            ids: dict[int, str] = {}
            for u in paragraph[UTTERANCES]:
                ids[u["uid"]] = f"{title}-u{u['uid']}"
                text = speaker_prefix(u["speakers"]) + detokenise(u["utterance"])
                sentences.append({"id": ids[u["uid"]], "article": title, "text": text})
            for qa in paragraph["qas"]:
                if qa["id"] in seen:
                    raise ValueError(f"question {qa['id']} twice")
                seen.add(qa["id"])
                uids = sorted({a["utterance_id"] for a in qa["answers"]})
                questions.append(
                    {
                        "id": qa["id"],
                        "question": detokenise(qa["question"]),
                        "answers": [ids[uid] for uid in uids],
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
        ["git", f"--git-dir={git_dir}", *args],
        check=True,
        capture_output=True,
    ).stdout.decode("utf-8")


LICENSE = """\
# License and provenance

The files `dev-sentences.jsonl.gz` and `dev-questions.jsonl.gz` in this folder are
derived from FriendsQA, Copyright 2019, 2020 Emory University (Emory NLP, the
Character Mining project), licensed under the Apache License, Version 2.0
(https://www.apache.org/licenses/LICENSE-2.0); a copy of the license is at that
address.

FriendsQA is described in:

- Zhengzhe Yang and Jinho D. Choi. "FriendsQA: Open-Domain Question Answering on TV
  Show Transcripts". In Proceedings of the Annual Conference of the ACL Special
  Interest Group on Discourse and Dialogue (SIGDIAL), 2019.
- Changmao Li and Jinho D. Choi. "Transformers to Learn Hierarchical Contexts in
  Multiparty Dialogue for Span-based Question Answering". In Proceedings of the
  Annual Conference of the Association for Computational Linguistics (ACL), 2020.

Source: GitHub repository emorynlp/FriendsQA, files `dat/friendsqa_dev.json` and
`dat/friendsqa_tst.json` (dataset version 2.0) at
{source}.
The upstream `LICENSE.txt` reads: "Copyright 2019, 2020 Emory University. Licensed
under the Apache License, Version 2.0".

Changes made (`build_friendsqa.py`): the scenes of both files were merged and sorted
by scene id; each utterance became one line with its speakers' names in front
(`#NOTE#` stage directions without a name, `#ALL#` written `All`); utterances and
questions were detokenised (spaces the tokeniser put before punctuation and
clitics, and inside `gon na`, `wan na`, `got ta`, removed) and their whitespace
normalised; each question keeps only the ids of the utterances holding its gold
answers (the answer texts and token offsets were dropped).

The derived files are distributed under the same Apache License, Version 2.0, with
the attribution above. The builder script is part of worldline (Apache-2.0).
"""

README = """\
# FriendsQA relevance set (conversational)

Derived from FriendsQA v2.0 (Emory NLP, Apache-2.0, see `LICENSE.md`): scenes of
multiparty dialogue from the TV show Friends, with questions whose answers are
labelled by utterance. A second, conversational dev set for the retrieval benchmarks
(`bench/relevance.py --corpus friendsqa`, `bench/embedders.py --corpus friendsqa`),
in the same format as `bench/data/squad/`.

**The data files are built, not committed** (like `bench/data/squad/`'s): the
repository holds the builder and this description; build the two files once from a
clone of the public FriendsQA repository (below), or point the benchmarks at a folder
that holds them (`--data DIR`).

Both public FriendsQA evaluation files are used: `friendsqa_dev.json`
({n_dev_scenes} scenes, {n_dev_questions} questions) and `friendsqa_tst.json`
({n_tst_scenes} scenes, {n_tst_questions} questions). Worldline trains nothing on them
and its held-out judge is another data set, so both are dev data here. The train
file is not used.

- `dev-sentences.jsonl.gz`: {n_sentences} utterances of {n_articles} scenes, one
  JSON object a line, scenes sorted by id (season, episode, scene), utterances in order:
  `{{"id": "<scene>-u<uid>", "article": "<scene>", "text": "<speakers>: <utterance>"}}`,
  e.g. `{example}`.
  Speakers are joined by `, `; a stage direction (speaker `#NOTE#`, {n_notes} of
  them) has no prefix; `#ALL#` is written `All`.
- `dev-questions.jsonl.gz`: {n_questions} questions, one JSON object a line:
  `{{"id": "<friendsqa question id>", "question": "...",
  "answers": ["<utterance id>", ...]}}`;
  `answers` are the distinct utterances holding a gold answer ({n_multi} questions
  have more than one, {n_none} none; an answer that is a speaker's name labels the
  utterance that speaker said).

The source text is tokenised (`You 're gon na kill me !`); utterances and questions
are detokenised by a few rules (`You're gonna kill me!`): the spaces before
`n't 's 're 'm 'll 've 'd` and `. , ! ? ; : ) ] }}`, after `( [ {{` and inside
`gon na`, `wan na`, `got ta` are removed, whitespace runs made one space. Quotes and
dashes are left as they are.

Source: GitHub repository emorynlp/FriendsQA at commit
`{commit}`.

Build (byte for byte the files the figures quoted from them were measured on):

```sh
{clone}{command}
```

SHA-256 of the built files:

```text
{digests}
```
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git-dir", type=Path, help="FriendsQA git directory")
    parser.add_argument("--dev", type=Path, help="dat/friendsqa_dev.json")
    parser.add_argument("--tst", type=Path, help="dat/friendsqa_tst.json")
    parser.add_argument("--commit", default="", help="source commit (with --dev)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = parser.parse_args()
    if (args.git_dir is None) == (args.dev is None or args.tst is None):
        parser.error("give --git-dir, or both --dev and --tst")
    commit: str = args.commit
    if args.git_dir is not None:
        texts = [_git(args.git_dir, "show", f"HEAD:{name}") for name in FILES]
        commit = _git(args.git_dir, "rev-parse", "HEAD").strip()
        command = (
            "python bench/data/friendsqa/build_friendsqa.py --git-dir FriendsQA/.git"
        )
        source = f"commit `{commit}`"
        clone = (
            "git clone https://github.com/emorynlp/FriendsQA\n"
            f"git -C FriendsQA checkout {commit}\n"
        )
    else:
        texts = [path.read_text(encoding="utf-8") for path in (args.dev, args.tst)]
        command = (
            "python bench/data/friendsqa/build_friendsqa.py --dev friendsqa_dev.json "
            f"--tst friendsqa_tst.json --commit {commit or 'SHA'}"
        )
        source = f"commit `{commit or 'unknown'}`"
        clone = ""
    documents = [json.loads(text) for text in texts]
    sentences, questions = build(documents)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    _jsonl_gz(sentences, out / "dev-sentences.jsonl.gz")
    _jsonl_gz(questions, out / "dev-questions.jsonl.gz")

    def count(document: dict[str, Any], key: str) -> int:
        return sum(
            len(p[key]) for scene in document["data"] for p in scene["paragraphs"]
        )

    counts = {
        "n_sentences": len(sentences),
        "n_articles": len({row["article"] for row in sentences}),
        "n_questions": len(questions),
        "n_multi": sum(len(q["answers"]) > 1 for q in questions),
        "n_none": sum(not q["answers"] for q in questions),
        "n_notes": sum(
            u["speakers"] == [NOTE]
            for document in documents
            for scene in document["data"]
            for p in scene["paragraphs"]
            for u in p[UTTERANCES]
        ),
        "n_dev_scenes": len(documents[0]["data"]),
        "n_dev_questions": count(documents[0], "qas"),
        "n_tst_scenes": len(documents[1]["data"]),
        "n_tst_questions": count(documents[1], "qas"),
    }
    example = json.dumps(
        next(s for s in sentences if s["text"][0] not in "[(" and len(s["text"]) < 60),
        ensure_ascii=False,
    )
    digests = "\n".join(
        f"{hashlib.sha256((out / name).read_bytes()).hexdigest()}  {name}"
        for name in ("dev-sentences.jsonl.gz", "dev-questions.jsonl.gz")
    )
    (out / "LICENSE.md").write_text(LICENSE.format(source=source))
    (out / "README.md").write_text(
        README.format(
            **counts,
            example=example,
            commit=commit,
            clone=clone,
            command=command,
            digests=digests,
        )
    )
    print(json.dumps({**counts, "commit": commit}))


if __name__ == "__main__":
    main()

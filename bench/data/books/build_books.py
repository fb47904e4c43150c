"""Build ``sentences.txt.xz``: one English sentence a line from public-domain books.

Each argument is the git directory of a GITenberg snapshot of one Project Gutenberg
book (a bare repository, read with ``git show HEAD:<file>``). For each book the text
file is ``<n>-0.txt`` (UTF-8), else ``<n>.txt``, else ``<n>-8.txt`` (UTF-8 if it
decodes, else Latin-1); its rights (the ``pg<n>.rdf``'s ``dcterms:rights``, else
``metadata.yaml``'s ``rights``) must read "Public domain in the USA.".

Only the text between the ``*** START OF`` line and the first of ``*** END OF`` /
``End of (the) Project Gutenberg`` is kept; paragraphs (blank-line separated) naming
Project Gutenberg, a producer, a transcriber or a web address are dropped, so none of
Project Gutenberg's header, footer, license or trademark text remains. Paragraphs with
no lower-case letter (headings) and bracketed ones (``[Illustration]``) are dropped;
``_`` (italics) is removed and whitespace is collapsed. Sentences are split with the
SQuAD builder's rule (``bench/data/build_squad.py``'s ``split_sentences``: ``. ! ?``
then whitespace and a capital, digit, quote or bracket, except after abbreviations
and initials). A sentence is kept if it has 6 to 60 words, starts with a capital or
an opening quote, ends with ``.`` or ``!`` (with any closing quotes; questions are
left out) and was not seen before (exact text). Books are interleaved one sentence
at a time, in argument order, until ``--limit`` sentences.

Run: ``python bench/data/books/build_books.py GIT_DIR... [--out PATH] [--limit N]``
(see ``bench/data/books/README.md`` for the books and the exact command). The
output is byte for byte the same for the same snapshots.
"""

from __future__ import annotations

import argparse
import io
import lzma
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from build_squad import split_sentences

__all__ = ["Book", "book_sentences", "build", "clean_paragraphs", "main", "read_book"]

LIMIT = 100_000
MIN_WORDS = 6
MAX_WORDS = 60
PUBLIC_DOMAIN = "Public domain in the USA."
OUT = Path(__file__).resolve().parent / "sentences.txt.xz"

_TEXT_FILE = re.compile(r"^(\d+)(-0|-8)?\.txt$")
_START = re.compile(r"^\*\*\* ?START OF (THIS|THE) PROJECT GUTENBERG", re.M)
_END = re.compile(
    r"^(\*\*\* ?END OF (THIS|THE) PROJECT GUTENBERG|End of (the )?Project Gutenberg)",
    re.M | re.I,
)
_BOILERPLATE = re.compile(
    r"gutenberg|produced by|transcriber|http:|https:|www\.|e-?text|ebook", re.I
)
_SENTENCE_START = re.compile(r"^[\"'\u201c\u2018(]*[A-Z]")
_SENTENCE_END = re.compile(r"[.!][\"'\u201d\u2019)]*$")
_RDF = {
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "dcterms": "http://purl.org/dc/terms/",
    "pgterms": "http://www.gutenberg.org/2009/pgterms/",
    "marcrel": "http://id.loc.gov/vocabulary/relators/",
}


@dataclass
class Book:
    """One snapshot: where it is, what it is, and what it gave."""

    git_dir: Path
    repo: str
    commit: str
    file: str
    title: str
    authors: list[str]
    rights: str
    sentences: list[str] = field(default_factory=list)
    kept: int = 0  # sentences of this book in the output


def _git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True
    ).stdout


def _decode(raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return text.lstrip("\ufeff").replace("\r\n", "\n")


def _metadata(git_dir: Path, files: list[str]) -> tuple[str, list[str], str]:
    """Title, creators (authors then translators) and rights."""
    rdf = [name for name in files if re.fullmatch(r"pg\d+\.rdf", name)]
    if rdf:
        root = ET.fromstring(_git(git_dir, "show", f"HEAD:{rdf[0]}"))
        ebook = root.find("pgterms:ebook", _RDF)
        if ebook is not None:
            title = ebook.findtext("dcterms:title", "", _RDF)
            names = [
                agent.findtext("pgterms:name", "", _RDF)
                for role in ("dcterms:creator", "marcrel:trl")
                for agent in ebook.findall(f"{role}/pgterms:agent", _RDF)
            ]
            rights = ebook.findtext("dcterms:rights", "", _RDF)
            return " ".join(title.split()), names, rights.strip()
    meta = _decode(_git(git_dir, "show", "HEAD:metadata.yaml"))
    found_title = re.search(r"^title: ['\"]?(.*?)['\"]?$", meta, re.M)
    found_rights = re.search(r"^rights: (.*)$", meta, re.M)
    names = re.findall(r"^\s+agent_name: ['\"]?(.*?)['\"]?$", meta, re.M)
    return (
        found_title.group(1) if found_title else "",
        names,
        found_rights.group(1).strip() if found_rights else "",
    )


def read_book(git_dir: Path) -> tuple[Book, str]:
    """The book's facts and its text between Project Gutenberg's markers."""
    commit = _git(git_dir, "rev-parse", "HEAD").decode().strip()
    files = _git(git_dir, "ls-tree", "--name-only", "HEAD").decode().split("\n")
    order = {"-0": 0, None: 1, "-8": 2}  # UTF-8, then ASCII, then Latin-1
    found = [(m, name) for name in files if (m := _TEXT_FILE.match(name))]
    texts = [name for m, name in sorted(found, key=lambda f: order[f[0].group(2)])]
    if not texts:
        raise SystemExit(f"{git_dir}: no <n>.txt, <n>-0.txt or <n>-8.txt")
    title, authors, rights = _metadata(git_dir, files)
    if rights != PUBLIC_DOMAIN:
        raise SystemExit(f"{git_dir}: rights {rights!r}, not {PUBLIC_DOMAIN!r}")
    text = _decode(_git(git_dir, "show", f"HEAD:{texts[0]}"))
    start = _START.search(text)
    if start is None:
        raise SystemExit(f"{git_dir}: no '*** START OF' line in {texts[0]}")
    body = text[text.index("\n", start.end()) + 1 :]
    end = _END.search(body)
    if end is None:
        raise SystemExit(f"{git_dir}: no '*** END OF' line in {texts[0]}")
    repo = git_dir.resolve().parent.name.replace("+", "/", 1)
    return Book(git_dir, repo, commit, texts[0], title, authors, rights), body[
        : end.start()
    ]


def clean_paragraphs(body: str) -> list[str]:
    """The prose paragraphs of a book's body, each on one line."""
    kept = []
    for block in re.split(r"\n\s*\n", body):
        paragraph = " ".join(block.replace("_", "").split())
        if (
            not paragraph
            or paragraph.startswith("[")
            or not re.search(r"[a-z]", paragraph)
            or _BOILERPLATE.search(paragraph)
        ):
            continue
        kept.append(paragraph)
    return kept


def book_sentences(body: str) -> list[str]:
    """The sentences of a book's body that pass the filters, in order."""
    sentences = []
    for paragraph in clean_paragraphs(body):
        for start, end in split_sentences(paragraph):
            sentence = paragraph[start:end].strip()
            if (
                MIN_WORDS <= len(sentence.split()) <= MAX_WORDS
                and _SENTENCE_START.match(sentence)
                and _SENTENCE_END.search(sentence)
            ):
                sentences.append(sentence)
    return sentences


def build(git_dirs: list[Path], limit: int) -> tuple[list[Book], list[str]]:
    """Read every book, then interleave their sentences (deduplicated) up to
    ``limit``."""
    books = []
    for git_dir in git_dirs:
        book, body = read_book(git_dir)
        book.sentences = book_sentences(body)
        books.append(book)
    out: list[str] = []
    seen: set[str] = set()
    positions = [0] * len(books)
    while len(out) < limit and any(
        pos < len(book.sentences) for pos, book in zip(positions, books, strict=True)
    ):
        for index, book in enumerate(books):
            if len(out) >= limit:
                break
            while positions[index] < len(book.sentences):
                sentence = book.sentences[positions[index]]
                positions[index] += 1
                if sentence not in seen:
                    seen.add(sentence)
                    out.append(sentence)
                    book.kept += 1
                    break
    return books, out


def _write_xz(lines: list[str], path: Path) -> None:
    raw = io.BytesIO()
    with lzma.open(raw, "wb", preset=9 | lzma.PRESET_EXTREME) as xz:
        xz.write("".join(line + "\n" for line in lines).encode("utf-8"))
    path.write_bytes(raw.getvalue())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("git_dirs", type=Path, nargs="+", help="GITenberg git dirs")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--limit", type=int, default=LIMIT)
    args = parser.parse_args(argv)
    books, lines = build(args.git_dirs, args.limit)
    _write_xz(lines, args.out)
    words = sum(len(line.split()) for line in lines)
    print("| book | author(s) | repository | commit | file | usable | kept |")
    print("| --- | --- | --- | --- | --- | ---: | ---: |")
    for book in books:
        print(
            f"| {book.title} | {'; '.join(book.authors)} | `{book.repo}` | "
            f"`{book.commit}` | `{book.file}` | {len(book.sentences):,} | "
            f"{book.kept:,} |"
        )
    print(
        f"\n{len(lines):,} sentences, {words:,} words, "
        f"{args.out.stat().st_size:,} bytes -> {args.out}"
    )


if __name__ == "__main__":
    main()

"""Build the judgment set in ``bench/data/population/`` from the city-population
truth-discovery data (Pasternack and Roth, COLING 2010), as a public repository has it.

Run, from a clone (or bare git directory) of the daz45/population---truth-discovery
repository::

    python bench/data/population/build_population.py --repo GIT_DIR [--commit SHA]

It reads, at ``--commit`` (default the one the figures were measured on),
``data/population/population-new.txt`` (one claim a line: ``city_year``, contributor,
population, year; tab-separated) and ``data/population/population-gd.txt`` (the gold:
``city, state, year, population``), and writes, deterministically (same input -> same
bytes), into ``--out`` (default this folder):

- ``claims.tsv.gz``: ``question<TAB>answer<TAB>source`` a line, the question being
  ``city_year``, the answer the population as written, the source the contributor;
  every claim of the input in its order (bytes that are not UTF-8 are replaced);
- ``gold.tsv``: ``question<TAB>answer`` for every gold line.
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
from pathlib import Path

__all__ = ["build"]

COMMIT = "35deffb890b23dd1c29404e87fbde5894a1ed694"
CLAIMS = "data/population/population-new.txt"
GOLD = "data/population/population-gd.txt"


def _show(repo: Path, commit: str, path: str) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={repo}", "show", f"{commit}:{path}"],
        check=True,
        capture_output=True,
    ).stdout


def build(repo: Path, commit: str, out: Path) -> tuple[int, int]:
    """Write the two files; return (claims, gold questions)."""
    lines: list[str] = []
    for raw in _show(repo, commit, CLAIMS).splitlines():
        fields = raw.decode("utf-8", "replace").split("\t")
        if len(fields) != 4:
            raise ValueError(f"not a claim line: {raw[:80]!r}")
        question, source, answer, _year = (f.strip() for f in fields)
        lines.append(f"{question}\t{answer}\t{source}\n")
    gold: list[str] = []
    for text in _show(repo, commit, GOLD).decode("utf-8").splitlines():
        parts = [p.strip() for p in text.split(",")]
        if len(parts) < 4:
            continue
        gold.append(f"{', '.join(parts[:-2])}_{parts[-2]}\t{parts[-1]}\n")
    out.mkdir(parents=True, exist_ok=True)
    with (
        (out / "claims.tsv.gz").open("wb") as f,
        gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as z,
    ):
        z.write("".join(lines).encode("utf-8"))
    (out / "gold.tsv").write_text("".join(gold), encoding="utf-8")
    return len(lines), len(gold)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="git dir of the clone")
    parser.add_argument("--commit", default=COMMIT)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    repo = args.repo / ".git" if (args.repo / ".git").is_dir() else args.repo
    claims, gold = build(repo, args.commit, args.out)
    print(f"{claims} claims, {gold} gold questions -> {args.out}")


if __name__ == "__main__":
    main()

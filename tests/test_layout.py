"""Contract checks on the tree itself: subjects are written in one place only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBJECTS = ROOT / "protocols" / "subjects.py"
# A subject literal: it starts with the worldline or KV prefix, or it is the constant
# part of an f-string that builds one (".ops." between two placeholders).
SUBJECT_LITERAL = re.compile(r"^(wl|\$KV)\.|^\.(obs|ops|derived|state|inbox|dlq|rpc)\.")


def _python_files() -> list[Path]:
    folders = ("protocols", "actors", "worldline", "tests", "bench")
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def _subject_literals(path: Path) -> list[str]:
    return [
        f"{path.name}:{node.lineno}: {node.value!r}"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and SUBJECT_LITERAL.search(node.value)
        and " " not in node.value
    ]


def test_subject_strings_live_only_in_protocols_subjects() -> None:
    offenders = [
        hit
        for path in _python_files()
        if path != SUBJECTS
        for hit in _subject_literals(path)
    ]
    assert offenders == []


def test_the_checker_finds_a_subject_literal(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'A = "wl.crew.ops.ada"\nB = f"{P}.{w}.ops.{a}"\nT = "state.inbox.v1"\n'
    )
    assert len(_subject_literals(sample)) == 2
    assert len(_subject_literals(SUBJECTS)) > 0


def test_every_package_declares_all() -> None:
    missing = [
        str(p.relative_to(ROOT))
        for folder in ("protocols", "actors", "worldline")
        for p in (ROOT / folder).rglob("*.py")
        if "__all__" not in p.read_text()
    ]
    assert missing == []

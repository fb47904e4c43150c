"""Contract checks on the tree itself: subjects are written in one place only, no actor
imports another, and every module stays small enough to hold in one's head."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "worldline"  # the one installed top-level package
SUBJECTS = PACKAGE / "protocols" / "subjects.py"
# A subject literal: it starts with the worldline or KV prefix, or it is the constant
# part of an f-string that builds one (".ops." between two placeholders).
SUBJECT_LITERAL = re.compile(r"^(wl|\$KV)\.|^\.(obs|ops|derived|state|inbox|dlq|rpc)\.")


def _python_files() -> list[Path]:
    folders = ("worldline", "tests", "bench")
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
        for p in PACKAGE.rglob("*.py")
        if "__all__" not in p.read_text()
    ]
    assert missing == []


# What an actor package may import of the others: its own modules, the runtime shell
# and the belief model every actor shares. An actor importing another actor would
# make a change to one silently change the other.
SHARED_PACKAGES = ("runtime", "belief_model")


def _actor_packages() -> list[str]:
    return sorted(
        p.name
        for p in (PACKAGE / "actors").iterdir()
        if p.is_dir() and (p / "__init__.py").exists() and p.name not in SHARED_PACKAGES
    )


def _imported_packages(path: Path) -> set[str]:
    """The ``worldline.actors.<package>`` names ``path`` imports (at any depth of the
    file)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "worldline.actors":
                names = [f"worldline.actors.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if len(parts) >= 3 and parts[:2] == ["worldline", "actors"]:
                found.add(parts[2])
    return found


def _cross_imports(folder: Path, own: str) -> list[str]:
    allowed = {own, *SHARED_PACKAGES}
    return [
        f"{path.relative_to(folder.parent)} imports worldline.actors.{package}"
        for path in sorted(folder.rglob("*.py"))
        for package in sorted(_imported_packages(path) - allowed)
    ]


def test_no_actor_imports_another_actor() -> None:
    actors = _actor_packages()
    assert {"extractor", "fusion", "materializer", "projector", "simulator"} <= set(
        actors
    )
    offenders = [
        hit
        for name in actors
        for hit in _cross_imports(PACKAGE / "actors" / name, name)
    ]
    # The shared packages import no actor either.
    offenders += [
        hit
        for name in SHARED_PACKAGES
        for hit in _cross_imports(PACKAGE / "actors" / name, name)
        if not hit.endswith(f"worldline.actors.{name}")
    ]
    assert offenders == []


def test_the_import_checker_finds_a_cross_import(tmp_path: Path) -> None:
    package = tmp_path / "projector"
    package.mkdir()
    (package / "core.py").write_text(
        "from worldline.actors.fusion import core\n"
        "from worldline.actors import extractor\n"
        "import worldline.actors.simulator.index\n"
        "from worldline.actors.runtime.spec import Step\n"
        "from worldline.actors.belief_model import posterior\n"
        "from worldline.actors.projector import index\n"
        "def f():\n    from worldline.actors.materializer.core import handle\n"
    )
    assert _imported_packages(package / "core.py") == {
        "fusion",
        "extractor",
        "simulator",
        "runtime",
        "belief_model",
        "projector",
        "materializer",
    }
    assert len(_cross_imports(package, "projector")) == 4


# A module of ``actors/`` or ``protocols/`` longer than this needs a reason written at
# the top of its docstring, in a sentence starting with LONG_REASON (``worldline/`` has
# no exceptions: tests/test_audiences.py::test_modules_are_small).
MAX_LINES = 500
LONG_REASON = "Longer than 500 lines because"


def _unexplained_length(path: Path) -> int | None:
    """The module's line count if it is over MAX_LINES and its docstring does not say
    why, else None."""
    text = path.read_text()
    lines = len(text.splitlines())
    if lines <= MAX_LINES:
        return None
    docstring = ast.get_docstring(ast.parse(text, str(path))) or ""
    return None if LONG_REASON in " ".join(docstring.split()) else lines


def test_modules_are_small_or_say_why() -> None:
    long = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for folder in ("actors", "protocols")
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        if (lines := _unexplained_length(path)) is not None
    ]
    assert long == []


def test_the_size_checker_wants_a_reason(tmp_path: Path) -> None:
    body = "X = 1\n" * MAX_LINES
    bare = tmp_path / "bare.py"
    bare.write_text(f'"""A module."""\n{body}')
    reasoned = tmp_path / "reasoned.py"
    reasoned.write_text(f'"""A module.\n\n{LONG_REASON} it is one idea."""\n{body}')
    short = tmp_path / "short.py"
    short.write_text('"""A module."""\nX = 1\n')
    assert _unexplained_length(bare) == MAX_LINES + 1
    assert _unexplained_length(reasoned) is None
    assert _unexplained_length(short) is None


def test_worldline_is_the_only_installed_top_level_name() -> None:
    """``actors`` and ``protocols`` live inside the ``worldline`` package, so an
    install never claims those generic names (a distribution called ``protocols``
    exists on the package index): nothing imports them bare, and the build installs
    only ``worldline``."""
    bare = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _python_files()
        for name in _imported_top_levels(path)
        if name in ("actors", "protocols")
    ]
    assert bare == []
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'include = ["worldline*"]' in pyproject


def _imported_top_levels(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
    return found

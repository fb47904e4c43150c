"""``docs/cli.md`` is generated from the CLI's parser and must match it."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from worldline.cli import parser
from worldline.cli_reference import COMMAND, FROM_ENVIRONMENT, reference, render

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI_MD = ROOT / "docs" / "cli.md"


def _commands(root: argparse.ArgumentParser, path: str) -> list[str]:
    """Every command path the parser accepts, found independently of the generator."""
    found = [path]
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, f"{path} {name}")
    return found


def test_docs_cli_md_is_up_to_date() -> None:
    expected = reference()
    current = CLI_MD.read_text() if CLI_MD.exists() else ""
    assert current == expected, (
        f"docs/cli.md is out of date with the CLI; regenerate it from the repository "
        f"root with:\n    {COMMAND}"
    )


def test_every_verb_and_sub_verb_has_a_section() -> None:
    text = reference()
    commands = _commands(parser(), "worldline")
    assert {"worldline world load", "worldline sim session", "worldline add"} <= set(
        commands
    )
    missing = [c for c in commands[1:] if f"`{c}`\n" not in text]
    assert missing == []


def test_the_module_prints_the_reference() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "worldline.cli_reference"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == reference()


def test_the_reference_does_not_depend_on_who_runs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = reference()
    monkeypatch.setenv("HOME", "/somewhere/else")
    monkeypatch.setenv("USER", "someone-else")
    monkeypatch.setenv("LOGNAME", "someone-else")
    monkeypatch.setenv("WORLDLINE_AGENT", "spock")
    monkeypatch.setenv("WORLDLINE_WORLD", "enterprise")
    monkeypatch.setenv("WORLDLINE_DATA", "/srv/worldline")
    assert reference() == before
    assert os.environ["WORLDLINE_AGENT"] == "spock"  # the environment is restored
    assert "spock" not in before
    assert "/srv/worldline" not in before
    assert "`~/.local/share/worldline`" in before
    assert f"| `--agent AGENT` | {FROM_ENVIRONMENT} |" in before


def _sample() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tool", description="A sample tool.")
    verbs = root.add_subparsers(dest="verb", required=True, metavar="VERB")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default="nats://x", help="where | to connect")
    for name in ("one", "two", "three"):
        verbs.add_parser(name, parents=[common], help=f"the {name} verb")
    group = verbs.add_parser("group", help="a verb with verbs")
    inner = group.add_subparsers(dest="inner", required=True)
    leaf = inner.add_parser("leaf", help="deepest")
    leaf.add_argument("files", nargs="+", help="inputs")
    leaf.add_argument("--mode", choices=["a", "b"], required=True)
    leaf.add_argument("--secret", help=argparse.SUPPRESS)
    leaf.add_argument("--ratio", type=float, default=0.5)
    return root


def test_render_shows_nesting_choices_required_and_shared_options() -> None:
    text = render(_sample())
    assert "## `tool group`" in text
    assert "### `tool group leaf`" in text
    assert "tool group leaf --mode MODE [options] FILES [FILES ...]" in text
    assert "| `--mode MODE` |  | one of `a`, `b`; required |" in text
    assert "| `--ratio RATIO` | `0.5` |  |" in text
    assert "--secret" not in text
    # Taken by three verbs alike: listed once, then named in each verb.
    assert text.count("| `--url URL` | `nats://x` | where \\| to connect |") == 1
    assert "Also takes the shared options `--url`." in text


def test_a_verb_added_to_the_cli_changes_the_reference() -> None:
    def grown() -> argparse.ArgumentParser:
        root = parser()
        for action in root._actions:
            if isinstance(action, argparse._SubParsersAction):
                extra = action.add_parser("frobnicate", help="a verb nobody wrote")
                extra.add_argument("--level", type=int, default=3, help="how much")
        return root

    text = reference(grown)
    assert text != reference()
    assert "## `worldline frobnicate`" in text
    assert "| `--level LEVEL` | `3` | how much |" in text

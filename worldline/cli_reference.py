"""The CLI reference (``docs/cli.md``), generated from the CLI's own argument parser.

Regenerate it with::

    python -m worldline.cli_reference > docs/cli.md

Every verb and sub-verb of :func:`worldline.cli.parser` gets a section: its one-line
help, its description, a usage line and a table of its arguments (name, default,
choices, help). The output does not depend on who runs it or where: the parser is built
twice under two made-up environments, and a default that differs between them (the
agent name taken from the login name, say) is shown as "from the environment" instead
of whatever this machine would give. Usage lines are written here, not by argparse, so
they do not change with the Python version either.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["COMMAND", "main", "reference", "render"]

COMMAND = "python -m worldline.cli_reference > docs/cli.md"

# Two environments that differ in everything a default could be read from. HOME is the
# same in both, so a default under it is shown as ``~/...`` rather than "from the
# environment".
_HOME = "/nonexistent-home"
_ENVIRONMENTS = (
    {"HOME": _HOME, "USER": "ada", "LOGNAME": "ada", "COLUMNS": "88"},
    {"HOME": _HOME, "USER": "bob", "LOGNAME": "bob", "COLUMNS": "88"},
)
FROM_ENVIRONMENT = "from the environment"


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """Run with exactly ``env`` (plus PATH) as the process environment."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({"PATH": saved.get("PATH", ""), **env})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _build_in(env: dict[str, str], build: Callable[[], argparse.ArgumentParser]) -> Any:
    with _environment(env):
        return build()


def reference(build: Callable[[], argparse.ArgumentParser] | None = None) -> str:
    """The markdown reference of the parser ``build`` returns (default: the CLI's
    ``parser``), with the CLI's exit codes."""
    if build is None:
        from worldline.cli import parser

        build = parser
    first, second = (_build_in(env, build) for env in _ENVIRONMENTS)
    return render(first, varying=_varying_defaults(first, second), notes=_exit_codes())


def _exit_codes() -> str:
    """The CLI module docstring after its first line: what each exit code means."""
    from worldline import cli

    body = (cli.__doc__ or "").strip().split("\n\n", 1)[1:]
    text = " ".join(" ".join(body).split())
    return f"## Exit codes\n\n{text}" if text else ""


def _varying_defaults(
    a: argparse.ArgumentParser, b: argparse.ArgumentParser
) -> set[tuple[str, str]]:
    """(command path, dest) of every default that differs between two builds."""
    other = {path: parser for path, _, parser in _walk(b, b.prog)}
    varying: set[tuple[str, str]] = set()
    for path, _, parser in _walk(a, a.prog):
        twin = other.get(path)
        if twin is None:
            continue
        theirs = {action.dest: action.default for action in twin._actions}
        for action in parser._actions:
            if theirs.get(action.dest, action.default) != action.default:
                varying.add((path, action.dest))
    return varying


def _subcommands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each sub-verb, aliases folded into one."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        seen: set[int] = set()
        for name, sub in action.choices.items():
            if id(sub) in seen:
                continue
            seen.add(id(sub))
            yield name, helps.get(name, ""), sub


def _walk(
    parser: argparse.ArgumentParser, path: str, summary: str = ""
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Every command, depth first: (``worldline world load``, help, parser)."""
    yield path, summary, parser
    for name, help_text, sub in _subcommands(parser):
        yield from _walk(sub, f"{path} {name}", help_text)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _value(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, Path):
        value = str(value)
        if value.startswith(_HOME + "/"):
            value = "~" + value[len(_HOME) :]
    return f"`{value}`"


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{_metavar(action)}`"
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{names}`"
    return f"`{names} {_metavar(action)}`"


def _metavar(action: argparse.Action) -> str:
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    match action.nargs:
        case "?":
            return f"[{metavar}]"
        case "*":
            return f"[{metavar} ...]"
        case "+":
            return f"{metavar} [{metavar} ...]"
    return metavar


def _default(action: argparse.Action, varying: bool) -> str:
    if varying:
        return FROM_ENVIRONMENT
    default = action.default
    if action.required or action.nargs == 0 or default in (None, "", [], ()):
        return ""
    if default is argparse.SUPPRESS:
        return ""
    return _value(default)


def _what(action: argparse.Action) -> str:
    parts = [_cell(action.help)] if action.help else []
    if action.choices is not None:
        parts.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
    if action.required and action.option_strings:
        parts.append("required")
    return "; ".join(parts)


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        action
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
        and action.help is not argparse.SUPPRESS
    ]


def _usage(path: str, parser: argparse.ArgumentParser) -> str:
    arguments = _arguments(parser)
    words = [path]
    words += [
        f"{a.option_strings[-1]} {_metavar(a)}"
        for a in arguments
        if a.option_strings and a.required
    ]
    if any(a.option_strings and not a.required for a in arguments):
        words.append("[options]")
    words += [_metavar(a) for a in arguments if not a.option_strings]
    if any(True for _ in _subcommands(parser)):
        words.append("VERB ...")
    return " ".join(words)


Signature = tuple[tuple[str, ...], str, str, str]


def _signature(
    path: str, action: argparse.Action, varying: set[tuple[str, str]]
) -> Signature:
    return (
        tuple(action.option_strings),
        _default(action, (path, action.dest) in varying),
        _what(action),
        _metavar(action),
    )


def _shared(
    commands: list[tuple[str, str, argparse.ArgumentParser]],
    varying: set[tuple[str, str]],
) -> list[tuple[Signature, argparse.Action, str]]:
    """Options that at least three commands take identically (the client options),
    in the order they first appear: (signature, action, its command path)."""
    counts: dict[Signature, int] = {}
    first: dict[Signature, tuple[argparse.Action, str]] = {}
    for path, _, parser in commands:
        for action in _arguments(parser):
            if action.option_strings:
                key = _signature(path, action, varying)
                counts[key] = counts.get(key, 0) + 1
                first.setdefault(key, (action, path))
    return [(key, *first[key]) for key in first if counts[key] >= 3]


def _table(
    rows: list[tuple[str, argparse.Action]], varying: set[tuple[str, str]]
) -> list[str]:
    """One row per (command path, argument)."""
    if not rows:
        return []
    lines = ["| argument | default | what it is |", "| --- | --- | --- |"]
    lines += [
        f"| {_name(a)} | {_default(a, (path, a.dest) in varying)} | {_what(a)} |"
        for path, a in rows
    ]
    return [*lines, ""]


def _section(
    path: str,
    summary: str,
    parser: argparse.ArgumentParser,
    varying: set[tuple[str, str]],
    shared: set[Signature],
) -> list[str]:
    depth = path.count(" ")
    lines = [f"{'#' * min(depth + 1, 6)} `{path}`", ""] if depth else []
    if summary:
        lines += [_cell(summary[:1].upper() + summary[1:]) + ".", ""]
    if parser.description and parser.description.rstrip(".").lower() != summary.lower():
        lines += [parser.description.strip(), ""]
    lines += ["```", _usage(path, parser), "```", ""]
    subs = list(_subcommands(parser))
    if subs:
        lines += ["| verb | what it does |", "| --- | --- |"]
        lines += [f"| `{name}` | {_cell(text)} |" for name, text, _ in subs]
        lines.append("")
    own: list[tuple[str, argparse.Action]] = []
    common: list[argparse.Action] = []
    for action in _arguments(parser):
        if action.option_strings and _signature(path, action, varying) in shared:
            common.append(action)
        else:
            own.append((path, action))
    lines += _table(own, varying)
    if common:
        names = ", ".join(f"`{a.option_strings[-1]}`" for a in common)
        lines += [f"Also takes the shared options {names}.", ""]
    return lines


def render(
    parser: argparse.ArgumentParser,
    *,
    varying: set[tuple[str, str]] | None = None,
    notes: str = "",
) -> str:
    """Markdown for ``parser`` and every sub-verb under it.

    Args:
        parser: the root parser.
        varying: (command path, dest) pairs whose default is shown as "from the
            environment".
        notes: text put after the root command (for example, the exit codes).
    """
    varying = varying or set()
    commands = list(_walk(parser, parser.prog))
    shared = _shared(commands[1:], varying)
    lines = [
        f"# `{parser.prog}` command reference",
        "",
        f"Generated from the CLI's parser by `{COMMAND}`;",
        "do not edit it by hand (a test fails when this page and the CLI disagree).",
        "Every command also answers `--help`.",
        "",
    ]
    path, summary, root = commands[0]
    lines += _section(path, summary, root, varying, set())
    if notes.strip():
        lines += [notes.strip(), ""]
    if shared:
        lines += ["## Shared options", ""]
        lines += ["Options several verbs take, with the same meaning everywhere.", ""]
        lines += _table([(where, action) for _, action, where in shared], varying)
    keys = {key for key, _, _ in shared}
    for path, summary, sub in commands[1:]:
        lines += _section(path, summary, sub, varying, keys)
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    """Print the reference of the ``worldline`` CLI."""
    sys.stdout.write(reference())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

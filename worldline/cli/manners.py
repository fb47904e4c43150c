"""What every verb gets the same way: global options before or after the verb,
``--json`` errors as JSON objects, a description for every verb, and the meaning of
each exit code (:mod:`worldline.cli`'s docstring has the long form)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, NoReturn

import msgspec

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = [
    "MEANINGS",
    "Parser",
    "describe",
    "fail",
    "hoist",
    "leaves",
    "subcommands",
]

MEANINGS = {
    0: "success",
    1: "a failure on worldline's own side (a store, a declaration drift, a replay "
    "that does not match)",
    2: "bad usage or input, something that does not exist, or credentials the server "
    "refuses for what the verb needs",
    3: "the world rejected the request",
    4: "the bus cannot be reached, holds no worldline streams, refused the request, "
    "or nothing applied the request in time",
    130: "interrupted",
}

# Options every client verb takes, given before the verb or after it (those with a
# value, then the flags). `-v` stays where it is: the root and every verb take it.
VALUED = frozenset({"--nats", "--world", "--agent", "--creds", "--timeout"})
FLAGS = frozenset({"--json", "--require-declared"})
GROUPS = frozenset({"world", "sim"})  # verbs whose sub-verb follows them


def hoist(argv: Sequence[str]) -> list[str]:
    """``argv`` with the global options given before the verb moved after it (and
    after a group's sub-verb), where the verb's parser reads them:
    ``--agent a add x`` -> ``add x --agent a``."""
    args = list(argv)
    moved: list[str] = []
    kept: list[str] = []
    path = 0  # verb words seen: 1 for a verb, 2 once a group's sub-verb is seen
    i = 0
    while i < len(args):
        token = args[i]
        name = token.split("=", 1)[0]
        if token == "--":
            break
        if name in VALUED and "=" not in token and i + 1 < len(args):
            moved += args[i : i + 2]
            i += 2
            continue
        if name in VALUED or token in FLAGS:
            moved.append(token)
            i += 1
            continue
        if token.startswith("-"):
            kept.append(token)
            i += 1
            continue
        kept.append(token)
        path += 1
        i += 1
        if path == 2 or token not in GROUPS:
            break
    return [*kept, *moved, *args[i:]] if moved else args


def wants_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for ``--json`` (before the verb or after)."""
    for token in argv:
        if token == "--":
            return False
        if token == "--json":
            return True
    return False


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors follow ``--json`` (:func:`fail`)."""

    json_errors = False  # set by ``main`` from the command line

    def error(self, message: str) -> NoReturn:
        """One line: the error and where the usage is (not the whole usage block)."""
        if Parser.json_errors:
            fail(2, f"{self.prog}: {message}", json_errors=True)
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def fail(code: int, message: str, *, json_errors: bool) -> NoReturn:
    """Print the error on stderr (one line, or with ``--json`` one JSON object
    ``{"error", "code", "meaning"}``) and exit with ``code``."""
    if json_errors:
        record = {"error": message, "code": code, "meaning": MEANINGS.get(code, "")}
        sys.stderr.write(msgspec.json.encode(record).decode() + "\n")
    else:
        sys.stderr.write(f"worldline: {message}\n")
    raise SystemExit(code)


def subcommands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Each sub-verb of ``parser``: its name, its help line and its parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every verb path with its parser, parents before their sub-verbs."""
    yield path, parser
    for name, _, sub in subcommands(parser):
        yield from leaves(sub, (*path, name))


def describe(parser: argparse.ArgumentParser) -> None:
    """Give every verb that has none a description (its help line, as a sentence),
    and every verb ``-v/--verbose`` as the root has it."""
    for _, help_line, sub in subcommands(parser):
        if not sub.description and help_line:
            sub.description = help_line[0].upper() + help_line[1:] + "."
        leaf = not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
        if leaf and "--verbose" not in sub._option_string_actions:
            sub.add_argument(
                "-v",
                "--verbose",
                action="store_true",
                default=argparse.SUPPRESS,
                help="log more",
            )
        describe(sub)

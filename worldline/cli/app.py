"""``main``: parse the command line, run the verb, and map each error to its exit code
(the codes are described in :mod:`worldline.cli`'s docstring, which ``docs/cli.md``
quotes)."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import nats.errors

from worldline.actors.runtime.auth import CREDS_ENV, load_credentials
from worldline.actors.runtime.errors import ActorError
from worldline.actors.runtime.errors import BusUnavailable as RuntimeBusUnavailable
from worldline.actors.runtime.logs import setup_logging
from worldline.cli import (
    beliefs,
    calibration,
    contradictions,
    crew,
    operate,
    sim,
    sources,
)
from worldline.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    default_url,
    with_world,
)
from worldline.cli.manners import Parser, fail, hoist, wants_json
from worldline.cli.parsing import parser
from worldline.sdk.errors import (
    BadRequest,
    NotApplied,
    PermissionDenied,
    Rejected,
    ServerError,
    SimulationError,
    WorldlineError,
    bus_errors,
)

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

    from worldline.sdk.client import World


__all__ = ["main", "parser"]

CLIENT_VERBS: dict[str, Callable[[argparse.Namespace], Callable[[World], Any]]] = {
    **beliefs.VERBS,
    **crew.VERBS,
    **operate.VERBS,
    **sim.VERBS,
    **sources.VERBS,
    **contradictions.VERBS,
    **calibration.VERBS,
}


def _use_creds(args: argparse.Namespace) -> None:
    """``--creds FILE`` holds for every connection this process makes (the runtime
    reads it from the environment); a bad file fails here, before any work."""
    creds = getattr(args, "creds", None)
    if creds:
        load_credentials(creds)
        os.environ[CREDS_ENV] = str(creds)


def _fail(code: int, message: str) -> NoReturn:
    """One line on stderr, or under ``--json`` one JSON object with the exit code
    and its meaning; then exit with ``code``."""
    fail(code, message, json_errors=Parser.json_errors)


def _run(args: argparse.Namespace, verb_name: str) -> int:
    """Run the verb; an error raised inside a task group comes out unwrapped, so it
    maps to its exit code instead of a traceback."""
    try:
        _use_creds(args)
        if verb_name in CLIENT_VERBS:
            if not args.verbose:  # the SDK names what it hears (one line, below)
                logging.getLogger("worldline.bus").setLevel(logging.ERROR)
            verb = CLIENT_VERBS[verb_name](args)
            anyio.run(with_world, args, verb, backend="asyncio")
            return EXIT_OK
        code: int = args.run(args)
        return code
    except BaseExceptionGroup as group:
        raise _leaf(group) from group


def _bus_error(exc: nats.errors.Error, args: argparse.Namespace, verb: str) -> str:
    """One line for a nats-py error that reached ``main``: the cause and the fix."""
    url = getattr(args, "nats", None) or default_url()
    try:
        with bus_errors(url, f"`worldline {verb}`"):
            raise exc
    except WorldlineError as mapped:
        return str(mapped)
    except nats.errors.Error:
        pass
    return (
        f"NATS at {url} failed `worldline {verb}`: {exc or type(exc).__name__}; "
        "check the server and `worldline status`, then retry"
    )


def _leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first error in a (nested) exception group that is not itself a group."""
    first: BaseException = group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``worldline`` console script."""
    words = sys.argv[1:] if argv is None else list(argv)
    Parser.json_errors = wants_json(words)
    # Client options go before the verb or after it: moved where the verb reads them.
    args = parser().parse_args(hoist(words))
    try:  # `up` and `actor`: time, level and actor on each line (or JSON)
        setup_logging(
            verbose=args.verbose,
            fmt=getattr(args, "log_format", None),
            actors=args.verb in ("up", "actor")
            or (args.verb in ("mcp", "console") and getattr(args, "http", False)),
        )
    except ValueError as exc:  # a bad WORLDLINE_LOG_FORMAT
        _fail(EXIT_USAGE, str(exc))
    verb_name = args.verb
    if verb_name == "world":
        verb_name = f"world.{args.world_verb}"
    if verb_name == "sim":
        verb_name = f"sim.{args.sim_verb}"
    try:
        return _run(args, verb_name)
    except PermissionDenied as exc:  # before OSError's kin: it is a PermissionError
        _fail(EXIT_USAGE, str(exc))
    except BadRequest as exc:
        _fail(EXIT_USAGE, str(exc))
    except SimulationError as exc:
        _fail(EXIT_REJECTED, f"simulator refused: {exc}")
    except Rejected as exc:
        detail = ""
        if exc.current_version is not None:
            detail = (
                f" (current version {exc.current_version}, value {exc.current_value!r})"
            )
        _fail(EXIT_REJECTED, f"rejected: {exc.reason}{detail}")
    except (RuntimeBusUnavailable, NotApplied) as exc:  # the SDK's BusUnavailable too
        _fail(EXIT_UNREACHABLE, str(exc))
    except ServerError as exc:  # an actor failed answering: worldline's side
        _fail(EXIT_FAILED, str(exc))
    except ActorError as exc:  # the server, a store or a declaration: not the input
        _fail(EXIT_FAILED, str(exc))
    except nats.errors.Error as exc:  # one the SDK did not translate: still one line
        _fail(EXIT_UNREACHABLE, _bus_error(exc, args, verb_name))
    except ValueError as exc:
        _fail(EXIT_USAGE, str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`worldline list | head`): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK

"""The ``worldline`` command: run the actors, and talk to a world from a shell.

Exit codes: 0 success; 2 bad usage or bad input (one line on stderr); 3 the world
rejected the request (the reason is printed); 4 the bus cannot be reached.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import re
import signal
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import msgspec

from actors.registry import ACTORS, build
from actors.runtime.embedded import EmbeddedNats
from actors.runtime.errors import ActorError
from actors.runtime.supervise import run_actors
from protocols.messages import BELIEF_TYPES, Belief
from worldline.client import DEFAULT_URL, World, connect
from worldline.errors import BadRequest, BusUnavailable, NotApplied, Rejected

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Sequence

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REJECTED, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
URL_FILE = "nats.url"


def default_data() -> Path:
    """``$WORLDLINE_DATA``, else ``~/.local/share/worldline``."""
    env = os.environ.get("WORLDLINE_DATA")
    return Path(env) if env else Path.home() / ".local" / "share" / "worldline"


def default_url() -> str:
    """``$WORLDLINE_NATS``, else the URL a local ``worldline up`` wrote, else :4222."""
    env = os.environ.get("WORLDLINE_NATS")
    if env:
        return env
    try:
        return (default_data() / URL_FILE).read_text().strip() or DEFAULT_URL
    except OSError:
        return DEFAULT_URL


def default_agent() -> str:
    env = os.environ.get("WORLDLINE_AGENT")
    if env:
        return env
    try:
        user = re.sub(r"[^A-Za-z0-9_-]", "-", getpass.getuser())[:64]
    except (KeyError, OSError):
        user = ""
    return user or "cli"


class _Failure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# --- running actors -------------------------------------------------------------------


async def _serve_until_signal(
    start: Callable[..., Coroutine[Any, Any, None]], on_ready: Callable[[], None]
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:
            await tg.start(start)
            on_ready()
            async for _ in signals:
                break
            tg.cancel_scope.cancel()


def _up(args: argparse.Namespace) -> int:
    data: Path = args.data
    specs = [build(name) for name in ACTORS]
    server: EmbeddedNats | None = None
    url_file = data / URL_FILE
    try:
        if args.nats:
            url = args.nats
        else:
            server = EmbeddedNats(data / "nats", port=args.port or -1)
            url = server.start()
        print(f"nats: {url}", flush=True)

        def ready() -> None:
            if server is not None:
                url_file.write_text(url + "\n")
            print("ready", flush=True)

        anyio.run(
            _serve_until_signal,
            partial(run_actors, specs, url=url, data=data / "actors"),
            ready,
            backend="asyncio",
        )
    finally:
        if server is not None:
            url_file.unlink(missing_ok=True)
            server.stop()
    return EXIT_OK


def _actor(args: argparse.Namespace) -> int:
    spec = build(args.name, replica=args.replica)
    url = args.nats or default_url()

    def ready() -> None:
        print(f"{spec.instance}: consuming from {url}", flush=True)

    anyio.run(
        _serve_until_signal,
        partial(run_actors, [spec], url=url, data=args.data / "actors"),
        ready,
        backend="asyncio",
    )
    return EXIT_OK


# --- client verbs ---------------------------------------------------------------------


def _show(belief: Belief) -> str:
    if belief.confidence is None:
        reading = "no probability"
    else:
        reading = f"confidence {belief.confidence:.2f}"
        if belief.uncertainty is not None:
            reading += f" ±{belief.uncertainty:.2f}"
    flags = f"  [{', '.join(belief.flags)}]" if belief.flags else ""
    return (
        f"{belief.id}  {belief.type}  {reading}  weight {belief.evidence_weight:g}  "
        f"v{belief.version}{flags}\n  {belief.text}"
    )


def _emit(args: argparse.Namespace, value: Any, human: str) -> None:
    if args.json:
        sys.stdout.write(msgspec.json.encode(value).decode() + "\n")
    else:
        print(human)


async def _client(
    args: argparse.Namespace, verb: Callable[[World], Awaitable[None]]
) -> None:
    async with connect(
        args.nats or default_url(),
        world=args.world,
        agent=args.agent,
        request_timeout=args.timeout,
    ) as world:
        await verb(world)


def _add(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        belief = await world.add(
            args.text, confidence=args.confidence, type=args.type, id=args.id
        )
        _emit(args, belief, _show(belief))

    return run


def _get(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        belief = await world.get(args.id)
        if belief is None:
            raise BadRequest(f"no belief {args.id!r} in world {world.world!r}")
        _emit(args, belief, _show(belief))

    return run


def _list(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        beliefs = await world.list(type=args.type, limit=args.limit)
        human = (
            "\n".join(_show(b) for b in beliefs) or f"world {world.world!r} is empty"
        )
        _emit(args, beliefs, human)

    return run


def _observe(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(args.file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise BadRequest(f"cannot read {args.file}: {exc}") from exc
    source = args.source or ("stdin" if args.file == "-" else Path(args.file).name)

    async def run(world: World) -> None:
        obs_id = await world.observe(text, source=source)
        _emit(args, {"obs_id": obs_id}, f"observed {obs_id} (extraction is async)")

    return run


CLIENT_VERBS: dict[str, Callable[[argparse.Namespace], Callable[[World], Any]]] = {
    "add": _add,
    "get": _get,
    "list": _list,
    "observe": _observe,
}


# --- argument parsing -----------------------------------------------------------------


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is outside 0-1")
    return value


def parser() -> argparse.ArgumentParser:
    """The CLI's argument parser (also the source of the CLI reference)."""
    root = argparse.ArgumentParser(
        prog="worldline",
        description="A shared, evidence-kept world model for crews of AI agents.",
    )
    root.add_argument("-v", "--verbose", action="store_true", help="log more")
    verbs = root.add_subparsers(dest="verb", required=True, metavar="VERB")

    server = argparse.ArgumentParser(add_help=False)
    server.add_argument(
        "--data", type=Path, default=default_data(), help="state folder (LMDB, NATS)"
    )
    server.add_argument(
        "--nats", default=None, help="join this NATS instead of the embedded server"
    )

    up = verbs.add_parser(
        "up", parents=[server], help="embedded nats-server plus all five actors"
    )
    up.add_argument("--port", type=int, default=0, help="NATS port (default: free)")
    up.set_defaults(run=_up)

    actor = verbs.add_parser("actor", parents=[server], help="run one actor alone")
    actor.add_argument("name", choices=list(ACTORS))
    actor.add_argument("--replica", default="0", help="projector replica name")
    actor.set_defaults(run=_actor)

    client = argparse.ArgumentParser(add_help=False)
    client.add_argument("--nats", default=None, help="NATS URL (env WORLDLINE_NATS)")
    client.add_argument(
        "--world",
        default=os.environ.get("WORLDLINE_WORLD", "default"),
        help="world name (env WORLDLINE_WORLD)",
    )
    client.add_argument(
        "--agent", default=default_agent(), help="agent name (env WORLDLINE_AGENT)"
    )
    client.add_argument("--json", action="store_true", help="machine-readable output")
    client.add_argument("--timeout", type=float, default=10.0, help="seconds to wait")

    add = verbs.add_parser("add", parents=[client], help="seed a belief (weak prior)")
    add.add_argument("text")
    add.add_argument("--confidence", type=_confidence, default=None)
    add.add_argument("--type", choices=BELIEF_TYPES, default="claim")
    add.add_argument("--id", default=None, help="belief id (default: generated)")

    get = verbs.add_parser("get", parents=[client], help="one belief by id")
    get.add_argument("id")

    lst = verbs.add_parser("list", parents=[client], help="the active set of beliefs")
    lst.add_argument("--type", choices=BELIEF_TYPES, default=None)
    lst.add_argument("--limit", type=int, default=1000)

    observe = verbs.add_parser(
        "observe", parents=[client], help="hand an artifact to the extractor"
    )
    observe.add_argument("file", help="a text file, or - for standard input")
    observe.add_argument("--source", default="", help="where the artifact came from")
    return root


def _fail(code: int, message: str) -> NoReturn:
    sys.stderr.write(f"worldline: {message}\n")
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``worldline`` console script."""
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="worldline %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("nats").setLevel(logging.CRITICAL)
    try:
        if args.verb in CLIENT_VERBS:
            verb = CLIENT_VERBS[args.verb](args)
            anyio.run(_client, args, verb, backend="asyncio")
            return EXIT_OK
        code: int = args.run(args)
        return code
    except BadRequest as exc:
        _fail(EXIT_USAGE, str(exc))
    except Rejected as exc:
        _fail(EXIT_REJECTED, f"rejected: {exc.reason}")
    except (BusUnavailable, NotApplied) as exc:
        _fail(EXIT_UNREACHABLE, str(exc))
    except ActorError as exc:  # the server, a store or a declaration: not the input
        _fail(EXIT_FAILED, str(exc))
    except ValueError as exc:
        _fail(EXIT_USAGE, str(exc))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())

"""What every verb module of the CLI shares: the exit codes, where the defaults come
from (``$WORLDLINE_DATA``, ``$WORLDLINE_NATS``, the URL a local ``up`` wrote,
``$WORLDLINE_AGENT``), printing a result as text or ``--json``, and running an SDK verb
on one connection."""

from __future__ import annotations

import signal
import sys
import warnings
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from worldline.sdk.client import World, connect
from worldline.sdk.discovery import URL_FILE, bus_url, default_agent, default_data
from worldline.sdk.worlds import NewWorldWarning

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable


__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_REJECTED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "LOCK_FILE",
    "URL_FILE",
    "default_agent",
    "default_data",
    "default_url",
    "emit",
    "every_key",
    "until_interrupted",
    "with_world",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REJECTED, EXIT_UNREACHABLE = 0, 1, 2, 3, 4

LOCK_FILE = "worldline.lock"  # held by the `worldline up` that uses the data folder


def default_url() -> str:
    """``$WORLDLINE_NATS``, else the URL a local ``worldline up`` wrote, else :4222
    (the SDK's rule: :func:`worldline.sdk.discovery.bus_url`)."""
    return bus_url()


def every_key(value: Any) -> Any:
    """``value`` with each Struct, however deep, as a dict of every field (its tag
    first): the wire leaves out defaults (``omit_defaults``), but a reader of
    ``--json`` should find each key, empty lists and nulls included, as ``before``
    prints them. Only the CLI's rendering changes, never the messages' encoding."""
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        out: dict[str, Any] = {}
        if config.tag_field is not None:
            out[config.tag_field] = config.tag
        for name, key in zip(
            value.__struct_fields__, value.__struct_encode_fields__, strict=True
        ):
            out[key] = every_key(getattr(value, name))
        return out
    if isinstance(value, list | tuple):
        return [every_key(item) for item in value]
    if isinstance(value, dict):
        return {key: every_key(item) for key, item in value.items()}
    return value


def emit(args: argparse.Namespace, value: Any, human: str) -> None:
    """Print ``human``; with ``--json``, ``value`` with every key (``every_key``)."""
    if args.json:
        sys.stdout.write(msgspec.json.encode(every_key(value)).decode() + "\n")
    else:
        print(human)


async def until_interrupted(work: Callable[[], Awaitable[None]]) -> None:
    """Run ``work`` until it ends or SIGINT/SIGTERM arrives, then raise
    :class:`KeyboardInterrupt` (exit 130).

    The event loop's own Ctrl-C handling cancels the main task once; a library
    that swallows that one cancellation (asyncio.wait_for in nats-py's fetch
    returns the message that arrived as it was cancelled, which a loaded machine
    makes likely) keeps ``work`` running for good. An anyio cancel scope delivers
    the cancellation again at every await until ``work`` has left it."""
    heard = False
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                nonlocal heard
                async for _ in signals:
                    heard = True
                    break
                tg.cancel_scope.cancel()

            tg.start_soon(stop_on_signal)
            await work()
            tg.cancel_scope.cancel()
    if heard:
        raise KeyboardInterrupt


def _say(message: Warning | str, *_: object, **__: object) -> None:
    """A warning the SDK gives (a new world named like a known one): one line."""
    sys.stderr.write(f"worldline: warning: {message}\n")


async def with_world(
    args: argparse.Namespace, verb: Callable[[World], Awaitable[None]]
) -> None:
    with warnings.catch_warnings():  # restores showwarning after
        warnings.simplefilter("always", NewWorldWarning)
        warnings.showwarning = _say
        async with connect(
            args.nats or default_url(),
            world=args.world,
            agent=args.agent,
            request_timeout=args.timeout,
            require_declared=True if getattr(args, "require_declared", False) else None,
        ) as world:
            await verb(world)

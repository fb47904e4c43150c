"""The crew-world verbs: ``world load``/``world show``, ``write``, ``inbox``, ``view``,
``watch``, ``presence``. Each builds the coroutine
:func:`~worldline.cli.common.with_world` runs on the connection."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from worldline.cli.common import emit
from worldline.protocols.messages import (
    InboxMessage,
    Notification,
    Rejection,
    WorkAssigned,
)
from worldline.protocols.world import Value
from worldline.sdk.declaration import load_declaration
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable

    from worldline.sdk.client import World


__all__ = ["VERBS"]


def _watch(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        async for view in world.watch(args.of):
            if args.json:
                sys.stdout.write(msgspec.json.encode(view, order="sorted").decode())
                sys.stdout.write("\n")
            elif view.worldview is not None:
                sys.stdout.write(view.worldview.prompt + "\n")
            sys.stdout.flush()

    return run


def _world_load(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    declaration = load_declaration(Path(args.file))

    async def run(world: World) -> None:
        seq = await world.declare(declaration)
        emit(
            args,
            {"world": world.world, "seq": seq},
            f"world {world.world!r} declared from {args.file} (op {seq})",
        )

    return run


def _world_show(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        reply = await world.read_world(entity_type=args.type)
        if reply.declaration is None:
            raise BadRequest(
                f"world {world.world!r} is not declared; "
                "run `worldline world load FILE`"
            )
        lines = [f"world {reply.declaration.world.id}: {reply.declaration.world.kind}"]
        for entity in reply.entities:
            fields = ", ".join(
                f"{name}={state.value!r}@v{state.version}"
                for name, state in sorted(entity.fields.items())
            )
            lines.append(f"  {entity.id}  {fields}")
        lines += [f"  {e.source} -{e.type}-> {e.target}  ({e.id})" for e in reply.edges]
        emit(args, reply, "\n".join(lines))

    return run


def _value(text: str) -> Value:
    """JSON if it parses as a scalar, list of strings or null; else the text itself."""
    try:
        value: Value = msgspec.json.decode(text.encode(), type=Value)
        return value
    except msgspec.MsgspecError:
        return text


def _write(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    value = _value(args.value)

    async def run(world: World) -> None:
        version = await world.write(
            args.entity, args.field, value, expect_version=args.expect_version
        )
        emit(
            args,
            {"entity": args.entity, "field": args.field, "version": version},
            f"{args.entity}.{args.field} = {value!r} (version {version})",
        )

    return run


def _inbox(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        items = await world.inbox(wait=args.wait, limit=args.limit)
        try:
            human = "\n".join(_inbox_line(item.message) for item in items)
            emit(
                args,
                [item.message for item in items],
                human or f"{world.agent}'s inbox is empty",
            )
        finally:
            if args.ack:
                await world.ack(items)
            else:
                for item in items:
                    await item.release()

    return run


def _inbox_line(message: InboxMessage) -> str:
    match message:
        case Rejection():
            return f"rejected  {message.op_id}: {message.code}: {message.reason}"
        case WorkAssigned():
            due = f" due {message.due_at.isoformat()}" if message.due_at else ""
            return (
                f"work      {message.work} ({message.work_kind}, p{message.priority}"
                f"{due}) from {message.requested_by}: {message.goal}"
            )
        case Notification():
            return (
                f"changed   {message.entity}.{message.field} = {message.value!r} "
                f"(v{message.version}, {message.rule})"
            )
    return repr(message)


def _view(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        view = await world.view(args.of)
        if view is None:
            raise BadRequest(f"world {world.world!r} is not declared")
        encoded = msgspec.json.encode(view)
        emit(args, view, msgspec.json.format(encoded.decode(), indent=2))

    return run


def _presence(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        await world.set_presence(args.status, args.task)
        emit(args, {"agent": world.agent, "status": args.status}, "presence set")

    return run


VERBS: dict[str, Callable[[argparse.Namespace], Callable[[World], Any]]] = {
    "watch": _watch,
    "world.load": _world_load,
    "world.show": _world_show,
    "write": _write,
    "inbox": _inbox,
    "view": _view,
    "presence": _presence,
}

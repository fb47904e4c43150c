"""The crew-world verbs: ``world load``/``world show``, ``write``, ``inbox``, ``view``,
``watch``, ``presence``. Each builds the coroutine
:func:`~worldline.cli.common.with_world` runs on the connection."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from worldline.cli.common import emit, until_interrupted
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

    from worldline.protocols.rpc import AgentView
    from worldline.protocols.world import Entity
    from worldline.sdk.client import World


__all__ = ["VERBS"]


def _watch(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        await _declared_view(world, args.of, "watch")  # else it would wait forever

        async def follow() -> None:
            async for view in world.watch(args.of):
                if args.json:
                    encoded = msgspec.json.encode(view, order="sorted").decode()
                    sys.stdout.write(encoded + "\n")
                elif view.worldview is not None:
                    sys.stdout.write(view.worldview.prompt + "\n")
                sys.stdout.flush()

        await until_interrupted(follow)  # Ctrl-C stops it at once, however loaded

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


async def _declared_view(world: World, agent: str | None, verb: str) -> AgentView:
    """``agent``'s startup view, or a :class:`BadRequest` (exit 2) saying what is
    missing: views are kept for the declared agents of a declared world."""
    name = agent or world.agent
    view = await world.view(name)
    if view is None:
        raise BadRequest(
            f"world {world.world!r} is not declared, so it has no views to {verb}: "
            f"declare it (`worldline world load FILE --world {world.world}`; "
            "examples/crew.toml is one), or read the worldview before a move with "
            "`worldline before QUERY`"
        )
    if view.me is None:
        raise BadRequest(
            f"agent {name!r} is not declared in world {world.world!r}: add an "
            f'[[entities]] with id = "agent:{name}" to the world\'s '
            "declaration and load it again (`worldline world load FILE --world "
            f"{world.world}`)"
        )
    return view


def _fields(entity: Entity) -> str:
    return ", ".join(
        f"{name}={state.value!r}" for name, state in sorted(entity.fields.items())
    )


def view_text(view: AgentView) -> str:
    """A startup view for people: who, what it may write, goals, constraints, open
    work, related entities and edges, the inbox, then the standing worldview."""
    me = view.me
    lines = [f"{view.agent} in world {view.world}"]
    if me is not None:
        lines.append(f"  {me.id}  {_fields(me)}")
    lines.append(f"may write: {', '.join(view.may_write) or 'nothing'}")
    sections: list[tuple[str, list[str]]] = [
        ("principals", [f"{e.id}  {_fields(e)}" for e in view.principals]),
        ("goals", view.goals),
        ("constraints", view.constraints),
        ("open work", [f"{e.id}  {_fields(e)}" for e in view.work]),
        ("related", [f"{e.id}  {_fields(e)}" for e in view.related]),
        ("edges", [f"{e.source} -{e.type}-> {e.target}" for e in view.edges]),
    ]
    for title, items in sections:
        lines.append(f"{title} ({len(items)}):")
        lines += [f"  {item}" for item in items]
    lines.append(f"inbox: {view.inbox_pending} pending (`worldline inbox` reads them)")
    if view.inbox_recent:  # the last messages, read or not: said as such
        lines.append(f"latest messages, read or not ({len(view.inbox_recent)}):")
        lines += [f"  {line}" for line in view.inbox_recent]
    if view.worldview is not None:
        lines += ["", view.worldview.prompt.rstrip("\n")]
    return "\n".join(lines)


def _view(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        view = await _declared_view(world, args.of, "show")
        emit(args, view, view_text(view))

    return run


def _presence(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        await world.set_presence(args.status, args.task)
        task = f" ({args.task})" if args.task else ""
        emit(
            args,
            {"agent": world.agent, "status": args.status, "task": args.task},
            f"{world.agent} is {args.status}{task} in world {world.world!r} "
            "(expires in 2 minutes unless set again; `worldline who` lists it)",
        )

    return run


def _who(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        if args.agents:  # read by key: exact, and no listing of the bucket needed
            found = [await world.presence(name) for name in dict.fromkeys(args.agents)]
            present = sorted((p for p in found if p is not None), key=lambda p: p.agent)
        else:
            present = await world.who()
        lines = [
            f"{p.agent}  {p.status}"
            + (f"  ({p.task})" if p.task else "")
            + f"  since {p.at.isoformat(timespec='seconds')}"
            for p in present
        ]
        empty = f"no agent is present in world {world.world!r}"
        if args.agents:
            missing = sorted(set(args.agents) - {p.agent for p in present})
            empty = ""
            lines += [f"{name}  absent (no presence, or expired)" for name in missing]
        emit(args, present, "\n".join(lines) or empty)

    return run


VERBS: dict[str, Callable[[argparse.Namespace], Callable[[World], Any]]] = {
    "watch": _watch,
    "world.load": _world_load,
    "world.show": _world_show,
    "write": _write,
    "inbox": _inbox,
    "view": _view,
    "presence": _presence,
    "who": _who,
}

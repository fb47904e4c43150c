"""The belief verbs: ``add``, ``evidence``, ``retract``/``resolve``, ``relate``,
``trust``, ``observe``/``after``, ``get``, ``list``, ``read``, ``before``, ``trace``.
Each builds the coroutine :func:`~worldline.cli.common.with_world` runs on the
connection."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from worldline.cli.common import emit
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable

    from worldline.protocols.messages import (
        Belief,
    )
    from worldline.sdk.client import World


__all__ = ["VERBS"]


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


def _add(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        belief = await world.add(
            args.text, confidence=args.confidence, type=args.type, id=args.id
        )
        emit(args, belief, _show(belief))

    return run


def _evidence(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        belief = await world.evidence(
            args.id,
            direction=args.direction,
            kind=args.kind,
            source=args.source,
            text=args.text,
            observed_at=args.at,
        )
        emit(args, belief, _show(belief))

    return run


def _close(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        if args.verb == "resolve":
            belief = await world.resolve(args.id, args.reason)
        else:
            belief = await world.retract(args.id, args.reason)
        emit(args, belief, _show(belief))

    return run


def _relate(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        seq = await world.relate(
            args.source, args.target, type=args.type, confidence=args.confidence
        )
        emit(
            args,
            {"source": args.source, "target": args.target, "seq": seq},
            f"{args.source} -{args.type} ({args.confidence:g})-> {args.target}",
        )

    return run


def _trust(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        seq = await world.trust(args.source, args.value, lock=args.lock)
        emit(
            args,
            {"source": args.source, "trust": args.value, "seq": seq},
            f"trust {args.source} = {args.value:g}{' (locked)' if args.lock else ''}",
        )

    return run


def _trace(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        reply = await world.trace(args.id)
        assert reply.belief is not None
        lines = [_show(reply.belief)]
        for step in reply.steps:
            e = step.evidence
            moved = (
                "no probability"
                if step.after is None
                else f"{step.before:.2f} -> {step.after:.2f}"
            )
            where = f" [{e.artifact}]" if e.artifact else ""
            lines.append(
                f"  {e.observed_at.isoformat()}  {e.direction:<8} {e.kind:<15} "
                f"{e.source}{where} by {e.author}: {moved}"
                + (f"\n      {e.text}" if e.text else "")
            )
        lines += [
            f"  edge {e.id}: {e.source} -{e.type} ({e.confidence:g})-> {e.target}"
            for e in reply.edges
        ]
        emit(args, reply, "\n".join(lines))

    return run


def _read(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        reply = await world.read(at=args.at)
        lines = [f"beliefs ({len(reply.beliefs)}):"]
        lines += [_show(b) for b in reply.beliefs]
        lines.append(f"gaps ({len(reply.gaps)}):")
        lines += [_show(b) for b in reply.gaps]
        lines.append(f"goals ({len(reply.goals)}):")
        lines += [_show(b) for b in reply.goals]
        lines.append(f"contradictions ({len(reply.contradictions)}):")
        lines += [
            f"  {c.kind}: {' vs '.join(c.beliefs)} (strength {c.strength:.2f})"
            for c in reply.contradictions
        ]
        lines.append(f"edges ({len(reply.belief_edges)}):")
        lines += [
            f"  {e.source} -{e.type} ({e.confidence:g})-> {e.target}"
            for e in reply.belief_edges
        ]
        emit(args, reply, "\n".join(lines))

    return run


def _before(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        view = await world.before(args.query, at=args.at)
        if args.json:  # canonical: sorted keys, so equal views are equal bytes
            sys.stdout.write(msgspec.json.encode(view, order="sorted").decode() + "\n")
        else:
            sys.stdout.write(view.prompt)

    return run


def _get(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        belief = await world.get(args.id, at=args.at)
        if belief is None:
            raise BadRequest(f"no belief {args.id!r} in world {world.world!r}")
        emit(args, belief, _show(belief))

    return run


def _list(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        beliefs = await world.list(
            type=args.type,
            label=args.label,
            flag=args.flag,
            status=args.status,
            at=args.at,
            limit=args.limit,
        )
        human = (
            "\n".join(_show(b) for b in beliefs) or f"world {world.world!r} is empty"
        )
        emit(args, beliefs, human)

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
        if args.verb == "after":
            obs_id = await world.after(text)
        else:
            obs_id = await world.observe(text, source=source)
        emit(args, {"obs_id": obs_id}, f"observed {obs_id} (extraction is async)")

    return run


VERBS: dict[str, Callable[[argparse.Namespace], Callable[[World], Any]]] = {
    "add": _add,
    "get": _get,
    "list": _list,
    "observe": _observe,
    "after": _observe,
    "evidence": _evidence,
    "retract": _close,
    "resolve": _close,
    "relate": _relate,
    "trust": _trust,
    "trace": _trace,
    "read": _read,
    "before": _before,
}

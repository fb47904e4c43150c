"""Verbs about sources: how fusion weighs each one (``sources``), and learning it
from the world's rival answers (``assess``). docs/cli.md, docs/belief-math.md."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worldline.cli.common import emit

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable

    from worldline.protocols.messages import SourcesReply, SourceStanding
    from worldline.sdk.client import World

__all__ = ["VERBS", "add_parsers"]


def add_parsers(verbs: Any, client: argparse.ArgumentParser) -> None:
    """The ``sources`` and ``assess`` verbs."""
    listing = verbs.add_parser(
        "sources",
        parents=[client],
        help="how fusion weighs each source: trust, learned accuracy, copying",
        description="Each source with a declared trust or a learned reliability, "
        "least weighed first: its declared trust (and lock), the accuracy and "
        "independence the last `worldline assess` learned, and the weight its "
        "evidence gets (trust x learned).",
    )
    listing.add_argument("source", nargs="?", default="", help="only this source")
    listing.add_argument("--limit", type=int, default=100, help="rows at most (1-1000)")
    verbs.add_parser(
        "assess",
        parents=[client],
        help="learn which sources to believe from the world's rival answers",
        description="Runs the truth-discovery fixed point over the world's "
        "rival-answer slots (`add --slot`): each source's accuracy from how its "
        "answers agree with the others', and copying between sources; their evidence "
        "is weighed by it from then on. Prints the least weighed sources.",
    )


def _row(s: SourceStanding) -> str:
    parts = [f"{s.source}: weight {s.weight:.3g}"]
    if s.trust is not None:
        parts.append(f"trust {s.trust:g}{' (locked)' if s.locked else ''}")
    if s.accuracy is not None:
        parts.append(f"accuracy {s.accuracy:.2f} over {s.claims} questions")
        if s.independence < 0.99:
            parts.append(f"independence {s.independence:.2f} (copies another)")
    return ", ".join(parts)


def _fixed_point(reply: SourcesReply) -> list[str]:
    """How the last assessment's fixed point ended, if there was one."""
    if not reply.rounds:
        return []
    return [
        f"learned in {reply.rounds} rounds; largest change in the last round "
        f"{reply.change:.1e}"
    ]


def _sources(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        reply = await world.sources(args.source, limit=args.limit)
        lines = [_row(s) for s in reply.sources] or ["no source is weighed yet"]
        if reply.total > len(reply.sources):
            lines.append(f"... {reply.total - len(reply.sources)} more (--limit)")
        lines += _fixed_point(reply)
        emit(args, reply, "\n".join(lines))

    return run


def _assess(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        seq = await world.assess_sources()
        reply = await world.sources(limit=10)
        lines = [f"assessed (seq {seq}); least weighed sources:"]
        lines += [f"  {_row(s)}" for s in reply.sources]
        lines += _fixed_point(reply)
        emit(
            args,
            {
                "seq": seq,
                "sources": reply.sources,
                "rounds": reply.rounds,
                "change": reply.change,
            },
            "\n".join(lines),
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


VERBS: dict[str, Callable[[argparse.Namespace], Callable[[World], Any]]] = {
    "sources": _sources,
    "assess": _assess,
    "trust": _trust,
}

"""Verbs about contradictions: list them with their lifecycle (``contradictions``)
and settle one (``settle``). docs/cli.md, docs/belief-math.md ("Contradictions")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from worldline.cli.common import emit

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable
    from datetime import datetime

    from worldline.protocols.beliefs import Contradiction
    from worldline.sdk.client import World

__all__ = ["VERBS", "add_parsers", "line"]


def add_parsers(
    verbs: Any, client: argparse.ArgumentParser, instant: Callable[[str], datetime]
) -> None:
    """The ``contradictions`` and ``settle`` verbs (``instant`` parses a time)."""
    listing = verbs.add_parser(
        "contradictions",
        parents=[client],
        help="contradictions by id, with their status (open, resolved, dissolved)",
        description="Each contradiction the log has opened: a contradicts edge "
        "between two beliefs, or a belief whose own evidence is split. Open ones "
        "widen the uncertainty of their ends until settled (`worldline settle`) "
        "or dissolved (an end retracted, the edge removed).",
    )
    listing.add_argument(
        "--status",
        choices=["open", "resolved", "dissolved", "all"],
        default="open",
        help="which to show (default: open)",
    )
    listing.add_argument(
        "--at", type=instant, default=None, help="only those opened by this time"
    )
    listing.add_argument(
        "--as-of",
        type=instant,
        default=None,
        help="as the world had been told by this time",
    )
    listing.add_argument("--limit", type=int, default=1000, help="rows at most")
    settle = verbs.add_parser(
        "settle",
        parents=[client],
        help="resolve an open contradiction (it stops widening its ends)",
        description="Settle an open contradiction, naming the end judged right "
        "(--winner) or none. Its ends are read without it from then on.",
    )
    settle.add_argument("id", help="contradiction id (c-...)")
    settle.add_argument("--reason", required=True, help="why it is settled")
    settle.add_argument("--winner", default=None, help="the belief id judged right")


def line(c: Contradiction) -> str:
    """One contradiction as a line of text."""
    ends = " vs ".join(c.beliefs) if c.kind == "edge" else f"{c.beliefs[0]} (split)"
    text = f"{c.id} {c.status:<9} {c.kind:<5} {ends} strength {c.strength:.2f}"
    if c.opened_at is not None:
        text += f" opened {c.opened_at.isoformat()}"
    if c.resolved_at is not None:
        text += f" {c.status} {c.resolved_at.isoformat()}"
    if c.winner:
        text += f" winner {c.winner}"
    if c.reason:
        text += f" ({c.reason})"
    return text


def _contradictions(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        found = await world.contradictions(
            status=args.status, at=args.at, as_of=args.as_of, limit=args.limit
        )
        human = "\n".join(line(c) for c in found) or f"no {args.status} contradiction"
        # Every field, the defaults too (an open one's status included).
        rows = [msgspec.structs.asdict(c) for c in found]
        emit(args, rows, human.replace("no all ", "no "))

    return run


def _settle(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        seq = await world.resolve_contradiction(
            args.id, args.reason, winner=args.winner
        )
        emit(args, {"id": args.id, "seq": seq}, f"settled {args.id} (seq {seq})")

    return run


VERBS: dict[str, Callable[[argparse.Namespace], Callable[[World], Any]]] = {
    "contradictions": _contradictions,
    "settle": _settle,
}

"""The world's track record: ``resolve ID --true``/``--false`` (and
``--settle-slot``) put resolutions on record, ``calibration`` reports how well the
confidence matched them and draws the reliability diagram as SVG. docs/cli.md,
docs/belief-math.md ("Calibration")."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from xml.sax.saxutils import escape

from worldline.cli.common import emit
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable

    from worldline.protocols.messages import (
        CalibrationGroup,
        CalibrationReply,
    )
    from worldline.sdk.client import World

__all__ = ["VERBS", "add_parsers", "add_resolve_options", "diagram", "report_lines"]

SIZE: Final = 360  # the diagram's plot square, in SVG user units
MARGIN: Final = 48


def add_resolve_options(resolve: argparse.ArgumentParser) -> None:
    """``resolve``'s outcome options (a gap takes none; a claim one of them)."""
    outcome = resolve.add_mutually_exclusive_group()
    outcome.add_argument(
        "--true",
        dest="outcome",
        action="store_const",
        const=True,
        default=None,
        help="the claim turned out true (its confidence joins the calibration record)",
    )
    outcome.add_argument(
        "--false",
        dest="outcome",
        action="store_const",
        const=False,
        help="the claim turned out false",
    )
    resolve.add_argument(
        "--settle-slot",
        action="store_true",
        help="for a rival answer: resolve it true and every other answer of its "
        "question false (implies --true)",
    )


def add_parsers(verbs: Any, client: argparse.ArgumentParser) -> None:
    """The ``calibration`` verb."""
    cal = verbs.add_parser(
        "calibration",
        parents=[client],
        help="how well confidence matched what turned out true (Brier, ECE, curve)",
        description="The world's calibration record: every belief resolved true or "
        "false (`worldline resolve ID --true/--false`) with the confidence it had "
        "just before. Prints the Brier score, the expected calibration error (ECE) "
        "and the reliability curve for the world, then by source, evidence kind and "
        "agent, and which recalibration the worldview applies.",
    )
    cal.add_argument("--bins", type=int, default=10, help="curve bins (2..50)")
    cal.add_argument("--limit", type=int, default=10, help="groups per dimension")
    cal.add_argument(
        "--svg", type=Path, default=None, help="write the reliability diagram here"
    )


def _resolve(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    from worldline.cli.beliefs import show_closed

    async def run(world: World) -> None:
        if args.settle_slot:
            if args.outcome is False:
                raise BadRequest("--settle-slot resolves the answer true; drop --false")
            closed = await world.settle_slot(args.id, args.reason)
            human = "\n".join(show_closed(b) for b in closed)
            emit(args, closed, human)
            return
        belief = await world.resolve(args.id, args.reason, outcome=args.outcome)
        emit(args, belief, show_closed(belief))

    return run


def _calibration(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        reply = await world.calibration(bins=args.bins, limit=args.limit)
        lines = report_lines(reply)
        if args.svg is not None:
            try:
                args.svg.write_text(diagram(reply.world, title=f"world {world.world}"))
            except OSError as exc:
                raise BadRequest(
                    f"cannot write the diagram to {args.svg}: {exc.strerror or exc}; "
                    "give --svg a path in a folder you can write"
                ) from exc
            lines.append(f"reliability diagram: {args.svg}")
        emit(args, reply, "\n".join(lines))

    return run


def _row(group: CalibrationGroup, width: int) -> str:
    agreement = "" if group.agreement is None else f"  agrees {group.agreement:.2f}"
    return (
        f"  {group.name:<{width}} n={group.count:<5} brier {group.brier:.3f}  "
        f"ece {group.ece:.3f}  mean conf {group.mean_confidence:.2f}  "
        f"true {group.frequency:.2f}{agreement}"
    )


def report_lines(reply: CalibrationReply) -> list[str]:
    """The report as text: the world, its curve, then each dimension."""
    w = reply.world
    if w.count == 0:
        return [
            "no belief resolved true or false yet: resolve claims with "
            "`worldline resolve ID --true` or `--false` to build the record"
        ]
    lines = [
        f"resolved beliefs: {w.count}  brier {w.brier:.3f}  ece {w.ece:.3f}  "
        f"mean confidence {w.mean_confidence:.2f}  true {w.frequency:.2f}",
        "reliability curve (confidence bin: mean confidence -> share true, count):",
    ]
    lines += [
        f"  [{b.lo:.1f}, {b.hi:.1f}): {b.mean_confidence:.2f} -> {b.frequency:.2f}"
        f"  ({b.count})"
        for b in w.bins
    ]
    if reply.forecasts is not None:
        f = reply.forecasts
        lines.append(
            f"forecasts: {f.count} outcomes resolved  brier {f.brier:.3f}  "
            f"ece {f.ece:.3f}"
        )
    for title, groups in (
        ("by source", reply.by_source),
        ("by evidence kind", reply.by_kind),
        ("by agent", reply.by_agent),
    ):
        if groups:
            width = max(len(g.name) for g in groups)
            lines.append(f"{title}:")
            lines += [_row(g, width) for g in groups]
    if reply.method == "identity":
        lines.append(
            f"recalibration: off (the worldview shows raw confidence until "
            f"{reply.min_records} resolutions are on record)"
        )
    else:
        lines.append(
            f"recalibration: {reply.method}, fitted on {reply.fitted_on} resolutions "
            "(the worldview shows calibrated confidence)"
        )
    return lines


def diagram(group: CalibrationGroup, *, title: str) -> str:
    """The reliability diagram of ``group`` as a standalone SVG document: each bin's
    mean confidence against the share that was true (dot area by count), the
    diagonal of perfect calibration, and the Brier score and ECE."""
    total = MARGIN * 2 + SIZE

    def x(p: float) -> float:
        return MARGIN + p * SIZE

    def y(p: float) -> float:
        return MARGIN + (1.0 - p) * SIZE

    most = max((b.count for b in group.bins), default=1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total}" '
        f'height="{total}" viewBox="0 0 {total} {total}" font-family="sans-serif" '
        'font-size="12">',
        f"<title>{escape(title)}: reliability diagram</title>",
        f'<rect x="{MARGIN}" y="{MARGIN}" width="{SIZE}" height="{SIZE}" '
        'fill="white" stroke="#444"/>',
        f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(1)}" y2="{y(1)}" stroke="#999" '
        'stroke-dasharray="4 4"/>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(
            f'<text x="{x(tick)}" y="{y(0) + 16}" text-anchor="middle">{tick:g}</text>'
        )
        parts.append(
            f'<text x="{x(0) - 6}" y="{y(tick) + 4}" text-anchor="end">{tick:g}</text>'
        )
    points = " ".join(
        f"{x(b.mean_confidence):.1f},{y(b.frequency):.1f}" for b in group.bins
    )
    if points:
        parts.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4"/>')
    for b in group.bins:
        radius = 3 + 7 * (b.count / most) ** 0.5
        parts.append(
            f'<circle cx="{x(b.mean_confidence):.1f}" cy="{y(b.frequency):.1f}" '
            f'r="{radius:.1f}" fill="#1f77b4" fill-opacity="0.7">'
            f"<title>[{b.lo:.2f}, {b.hi:.2f}): {b.count} beliefs, mean confidence "
            f"{b.mean_confidence:.2f}, {b.frequency:.2f} true</title></circle>"
        )
    parts += [
        f'<text x="{total / 2}" y="{total - 10}" text-anchor="middle">'
        "confidence just before resolution</text>",
        f'<text x="14" y="{total / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {total / 2})">share resolved true</text>',
        f'<text x="{total / 2}" y="20" text-anchor="middle">{escape(title)}: '
        f"n={group.count}, Brier {group.brier:.3f}, ECE {group.ece:.3f}</text>",
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


VERBS: dict[str, Callable[[argparse.Namespace], Callable[[World], Any]]] = {
    "calibration": _calibration,
    "resolve": _resolve,
}

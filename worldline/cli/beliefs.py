"""The belief verbs: ``add``, ``evidence``, ``retract``/``resolve``,
``relate``/``unrelate``, ``trust``, ``observe``/``after``, ``get``, ``list``,
``search``, ``read``, ``before``, ``trace``.
Each builds the coroutine :func:`~worldline.cli.common.with_world` runs on the
connection."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from worldline.cli.common import emit, every_key
from worldline.cli.contradictions import line as contradiction_line
from worldline.cli.sim import forecast_lines
from worldline.sdk.errors import BadRequest
from worldline.sdk.paging import LIST_PAGE

if TYPE_CHECKING:
    import argparse
    from collections.abc import AsyncIterator, Awaitable, Callable
    from datetime import datetime

    from worldline.protocols.beliefs import BeliefEdge
    from worldline.protocols.messages import Belief, SearchHit, TraceReply
    from worldline.protocols.worldview import Leaf
    from worldline.sdk.client import World
    from worldline.sdk.sim import WorldviewForecasts


__all__ = ["VERBS"]

CHANNELS = ("lexical", "semantic", "prior")  # shown in this order, then any other
TRACE_SHOWN = 5  # trace entries a search hit shows (`worldline trace` has them all)


def _show(belief: Belief) -> str:
    """A belief for people: id, type, confidence (and the effective one when its
    dependencies move it), weight, version, label, status when closed, flags, text."""
    if belief.confidence is None:
        reading = "no probability"
    else:
        reading = f"confidence {belief.confidence:.2f}"
        if belief.uncertainty is not None:
            reading += f" ±{belief.uncertainty:.2f}"
    effective = belief.effective_confidence
    if effective is not None and (
        belief.confidence is None or abs(effective - belief.confidence) >= 0.005
    ):
        reading += f" (effective {effective:.2f})"
    label = f"  label {belief.label}" if belief.label else ""
    status = f"  {belief.status}" if belief.status != "active" else ""
    if belief.closed_reason:
        status += f" ({belief.closed_reason})"
    flags = f"  [{', '.join(belief.flags)}]" if belief.flags else ""
    return (
        f"{belief.id}  {belief.type}  {reading}  weight {belief.evidence_weight:g}  "
        f"v{belief.version}{label}{status}{flags}\n  {belief.text}"
    )


def _show_one(belief: Belief) -> str:
    """One belief read by itself (``get``): :func:`_show`, then what the summary
    line leaves out (the effective confidence and label always, the status)."""
    effective = belief.effective_confidence
    extra = [
        "effective confidence "
        + ("none" if effective is None else f"{effective:.2f}")
        + " (after what it depends on)",
        f"label: {belief.label or '-'}",
        f"status: {belief.status}",
    ]
    return _show(belief) + "\n" + "\n".join(f"  {line}" for line in extra)


def _add(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        belief = await world.add(
            args.text,
            confidence=args.confidence,
            type=args.type,
            id=args.id,
            slot=args.slot,
            label=args.label,
        )
        emit(args, belief, _show(belief))

    return run


def _show_edge(e: BeliefEdge) -> str:
    """One belief edge: its confidence, and with evidence of its own, the strength
    stated, the evidence count, the uncertainty and the flags."""
    line = f"  edge {e.id}: {e.source} -{e.type} ({e.confidence:.3g})-> {e.target}"
    if e.stated is not None:
        sd = "" if e.uncertainty is None else f" ±{e.uncertainty:.2f}"
        flags = f" [{', '.join(e.flags)}]" if e.flags else ""
        line += f"  posterior of stated {e.stated:g}{sd}, {e.evidence_count} evidence"
        line += flags
    return line + ("  (removed)" if e.removed else "")


def _evidence(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        if getattr(args, "edge", False):  # `evidence --edge`: the id names an edge
            edge = await world.edge_evidence(
                args.id,
                direction=args.direction,
                kind=args.kind,
                source=args.source,
                text=args.text,
                observed_at=args.at,
            )
            emit(args, edge, _show_edge(edge))
            return
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


def show_closed(belief: Belief) -> str:
    """A closed belief as text: its status (and outcome), why, then the belief."""
    why = f" ({belief.closed_reason})" if belief.closed_reason else ""
    outcome = "" if belief.outcome is None else f" {str(belief.outcome).lower()}"
    before = (
        ""
        if belief.closed_confidence is None
        else f", confidence just before {belief.closed_confidence:.2f}"
    )
    return f"{belief.id} is now {belief.status}{outcome}{why}{before}\n{_show(belief)}"


def _retract(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        belief = await world.retract(args.id, args.reason)
        emit(args, belief, show_closed(belief))

    return run


def _relate(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        edge_id = args.id or world.edge_id(args.source, args.target, type=args.type)
        seq = await world.relate(
            args.source,
            args.target,
            type=args.type,
            confidence=args.confidence,
            id=edge_id,
        )
        emit(
            args,
            {
                "id": edge_id,
                "type": args.type,
                "source": args.source,
                "target": args.target,
                "confidence": args.confidence,
                "seq": seq,
            },
            f"edge {edge_id}: "
            f"{args.source} -{args.type} ({args.confidence:g})-> {args.target}",
        )

    return run


def _unrelate(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        edge = await world.unrelate(args.edge_id)
        emit(
            args,
            edge,
            f"edge {edge.id} removed: "
            f"{edge.source} -{edge.type} ({edge.confidence:.3g})-> {edge.target}",
        )

    return run


def _trace(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        reply = await _trace_either(world, args.id, args.as_of)
        lines = [_show(reply.belief)] if reply.belief is not None else []
        for step in reply.steps:
            e = step.evidence
            moved = (
                "no probability"
                if step.after is None
                else f"{step.before:.2f} -> {step.after:.2f}"
            )
            where = f" [{e.artifact}]" if e.artifact else ""
            # A source its reporter may not report counts as the reporter's voice.
            voice = f" (counts as {e.voice})" if e.voice not in ("", e.source) else ""
            lines.append(
                f"  {e.observed_at.isoformat()}  {e.direction:<8} {e.kind:<15} "
                f"{e.source}{where} by {e.author}{voice}: {moved}"
                + (f"\n      {e.text}" if e.text else "")
            )
        lines += [_show_edge(e) for e in reply.edges]
        if reply.weights:
            weighed = ", ".join(
                f"{k} x{v:.3g}" for k, v in sorted(reply.weights.items())
            )
            lines.append(f"  weights: {weighed}")
        if reply.rivals:
            lines.append(
                f"  rival answers (their support counts against it): "
                f"{', '.join(reply.rivals)}"
            )
        emit(args, reply, "\n".join(lines))

    return run


async def _trace_either(
    world: World, some_id: str, as_of: datetime | None = None
) -> TraceReply:
    """The trace of the belief ``some_id``, or else of the belief edge."""
    try:
        return await world.trace(some_id, as_of=as_of)
    except BadRequest:
        try:
            return await world.trace_edge(some_id, as_of=as_of)
        except BadRequest:
            raise BadRequest(
                f"no belief or belief edge {some_id!r} in world {world.world!r}"
                f"{_as_of(as_of)} (`worldline list`, `worldline read` show the ids)"
            ) from None


def _read(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        reply = await world.read(at=args.at, as_of=args.as_of)
        lines = [f"beliefs ({len(reply.beliefs)}):"]
        lines += [_show(b) for b in reply.beliefs]
        lines.append(f"gaps ({len(reply.gaps)}):")
        lines += [_show(b) for b in reply.gaps]
        lines.append(f"goals ({len(reply.goals)}):")
        lines += [_show(b) for b in reply.goals]
        lines.append(f"contradictions ({len(reply.contradictions)}):")
        lines += [f"  {contradiction_line(c)}" for c in reply.contradictions]
        lines.append(f"edges ({len(reply.belief_edges)}):")
        lines += [_show_edge(e) for e in reply.belief_edges]
        lines.append(f"moves ({len(reply.moves)}, best first):")
        lines += [_show_move(n, move) for n, move in enumerate(reply.moves, 1)]
        emit(args, reply, "\n".join(lines))

    return run


def _show_move(rank: int, move: Leaf) -> str:
    """One ranked next move: its score, status and trace."""
    status = f"  {move.status}" if move.status else ""
    sure = "" if move.confidence is None else f"  confidence {move.confidence:.2f}"
    trace = f"\n     trace: {', '.join(move.trace)}" if move.trace else ""
    return f"{rank:>3}. {move.score:.3f}{status}{sure}  {move.text}{trace}"


def _before(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        if getattr(args, "forecast", False):
            annotated = await world.before_with_forecasts(
                args.query, at=args.at, as_of=args.as_of
            )
            if args.json:  # {"view": ..., "forecasts": [...]}, sorted keys
                text = msgspec.json.encode(annotated, order="sorted").decode()
                sys.stdout.write(text + "\n")
                return
            prompt = annotated.view.prompt.rstrip("\n")
            sys.stdout.write("\n".join([prompt, "", *_forecasts(annotated)]) + "\n")
            return
        view = await world.before(args.query, at=args.at, as_of=args.as_of)
        if args.json:  # canonical: sorted keys, so equal views are equal bytes
            sys.stdout.write(msgspec.json.encode(view, order="sorted").decode() + "\n")
        else:
            sys.stdout.write(view.prompt)

    return run


def _forecasts(annotated: WorldviewForecasts) -> list[str]:
    """The top moves, each with what really followed actions like it."""
    if not annotated.forecasts:
        return ["Forecasts: no moves to forecast."]
    lines = ["Forecasts for the top moves (real outcomes from the simulator's index):"]
    for n, item in enumerate(annotated.forecasts, start=1):
        lines.append(f"{n}. {item.move.text}")
        lines += forecast_lines(item.forecast, "   ")
    return lines


def _get(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        belief = await world.get(args.id, at=args.at, as_of=args.as_of)
        if belief is None:
            raise BadRequest(
                f"no belief {args.id!r} in world {world.world!r}{_as_of(args.as_of)}"
            )
        emit(args, belief, _show_one(belief))

    return run


def _as_of(as_of: datetime | None) -> str:
    """How a "not found" names the recorded time it was asked about."""
    if as_of is None:
        return ""
    return (
        f" as of {as_of.isoformat()} (not recorded by then: try a later --as-of, "
        "or none)"
    )


def _more(verb: str, shown: str, cursor: str) -> None:
    """Say on stderr (stdout holds only the answer) how to read the next page."""
    sys.stderr.write(
        f"worldline {verb}: {shown}; more follow: pass --cursor {cursor} for the "
        "next page, or --all for every one\n"
    )


async def _stream(
    args: argparse.Namespace,
    items: AsyncIterator[Any],
    human: Callable[[int, Any], str],
    empty: str,
) -> None:
    """Print every item as it arrives (``--json``: one array, written item by item),
    holding none of them."""
    count = 0
    out = sys.stdout
    async for item in items:
        count += 1
        if args.json:
            out.write("[" if count == 1 else ",")
            out.write(msgspec.json.encode(every_key(item)).decode())
        else:
            out.write(human(count, item) + "\n")
        if count % 100 == 0:
            out.flush()
    if args.json:
        out.write("[]\n" if count == 0 else "]\n")
    elif count == 0:
        out.write(empty + "\n")


def _list(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        where: dict[str, Any] = {
            "type": args.type,
            "label": args.label,
            "flag": args.flag,
            "status": args.status,
            "at": args.at,
            "as_of": args.as_of,
        }
        if args.cursor:
            empty = "no more beliefs"
        elif args.type or args.label or args.flag or args.status != "active":
            empty = "no belief matches"
        else:
            empty = f"world {world.world!r} is empty"
        if args.all:
            page_size = min(args.limit, LIST_PAGE)
            beliefs = world.iter_list(**where, page=page_size, cursor=args.cursor)
            await _stream(args, beliefs, lambda _, b: _show(b), empty)
            return
        page = await world.list_page(**where, limit=args.limit, cursor=args.cursor)
        emit(args, page.beliefs, "\n".join(_show(b) for b in page.beliefs) or empty)
        if page.next_cursor:
            shown = f"{len(page.beliefs)} shown of {page.total}"
            _more("list", shown, page.next_cursor)

    return run


def _trim(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _show_hit(rank: int, hit: SearchHit) -> str:
    """One search hit for people: rank, fused score, each channel's, confidence,
    id, type, text (trimmed) and the trace."""
    belief = hit.belief
    names = [n for n in CHANNELS if n in hit.channels]
    names += sorted(set(hit.channels) - set(CHANNELS))
    channels = "  ".join(f"{n} {hit.channels[n]:.3f}" for n in names)
    sure = (
        "no probability"
        if belief.confidence is None
        else f"confidence {belief.confidence:.2f}"
    )
    trace = ", ".join(hit.trace[:TRACE_SHOWN]) or "no evidence"
    if len(hit.trace) > TRACE_SHOWN:
        trace += f" (+{len(hit.trace) - TRACE_SHOWN} more: worldline trace {belief.id})"
    return (
        f"{rank:>3}. {hit.score:.4f}  {channels}  {sure}  {belief.id}  {belief.type}\n"
        f"     {_trim(belief.text)}\n"
        f"     trace: {trace}"
    )


def _search(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        empty = (
            "no more hits"
            if args.cursor
            else f"no active belief in world {world.world!r} matches {args.query!r}"
        )
        if args.all:
            hits = world.iter_search(
                args.query,
                type=args.type,
                at=args.at,
                page=args.limit,
                cursor=args.cursor,
                as_of=args.as_of,
            )
            await _stream(args, hits, _show_hit, empty)
            return
        page = await world.search(
            args.query,
            limit=args.limit,
            type=args.type,
            at=args.at,
            cursor=args.cursor,
            as_of=args.as_of,
        )
        shown = "\n".join(_show_hit(i, h) for i, h in enumerate(page.hits, 1))
        data = {
            "hits": page.hits,
            "embedder": page.embedder,
            "next_cursor": page.next_cursor,
        }
        emit(args, data, shown or empty)
        if page.next_cursor and not args.json:
            count = len(page.hits)
            shown = f"{count} hit{'' if count == 1 else 's'} shown"
            _more("search", shown, page.next_cursor)

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
            obs_id = await world.observe(
                text,
                source=source,
                context=args.context,
                observed_at=args.observed_at,
            )
        emit(args, {"obs_id": obs_id}, f"observed {obs_id} (extraction is async)")

    return run


VERBS: dict[str, Callable[[argparse.Namespace], Callable[[World], Any]]] = {
    "add": _add,
    "get": _get,
    "list": _list,
    "search": _search,
    "observe": _observe,
    "after": _observe,
    "evidence": _evidence,
    "retract": _retract,  # resolve: worldline.cli.calibration
    "relate": _relate,
    "unrelate": _unrelate,
    "trace": _trace,
    "read": _read,
    "before": _before,
}

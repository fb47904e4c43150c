"""The simulator verbs: ``sim index`` (pair transitions from traces into an index),
``sim run`` (an evaluation plan), ``sim session`` (a session on the bus, assistant
messages on stdin: one per line, plain text, or a JSON object such as ``{"role":
"assistant", "tool_calls": [...]}``; each reply message is printed, a tool result as
``tool[<call id>]: ...``) and ``forecast`` (the real outcomes after actions like a
move, each with its support, lineages and similarity, or "no grounding")."""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any

import msgspec

from worldline.cli.common import EXIT_OK, emit, every_key
from worldline.cli.progress import Progress
from worldline.sdk.errors import BadRequest, SimulationError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from worldline.actors.simulator.track import TrackRecord
    from worldline.protocols.messages import SimForecastReply
    from worldline.sdk.client import World


__all__ = ["VERBS", "forecast_lines", "run_evaluation", "run_index"]


def run_index(args: argparse.Namespace) -> int:
    """Read traces, pair their transitions, and write a read-only index artifact.

    Streamed: each file is read a conversation at a time (JSONL a line at a time),
    each transition handed to the builder and forgotten, and the index written
    file by file, so memory does not grow with a file's size."""
    from worldline.actors.extractor.traces import TraceReader
    from worldline.actors.simulator.builder import IndexBuilder

    try:
        builder = IndexBuilder(held_out=args.held_out)
    except ValueError as exc:
        raise BadRequest(str(exc)) from exc
    issues = []
    names = []
    progress = Progress("sim index", total=len(args.traces))  # on a terminal only
    try:
        for path in args.traces:
            before = builder.pairs
            try:
                with path.open("rb") as f:
                    reader = TraceReader(path.name, f)
                    for t in reader:
                        builder.add(t, reader.groups[t.lineage])
            except OSError as exc:
                raise BadRequest(f"cannot read {path}: {exc}") from exc
            except ValueError as exc:  # UnknownTraceFormat, or a refused transition
                raise BadRequest(f"{path}: {exc}") from exc
            issues += reader.issues
            names.append(path.name)
            note = (
                f"{path.name}: {reader.format}, {builder.pairs - before} transitions, "
                f"{len(reader.issues)} issues"
            )
            progress.advance(note=note)
            if not progress.shown:  # a pipe or a log: one plain line per file, no bar
                sys.stderr.write(f"indexed {note}\n")
        progress.close()
        try:
            manifest = builder.write(args.out, sources=names, issues=issues)
        except OSError as exc:
            raise BadRequest(f"cannot write the index to {args.out}: {exc}") from exc
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
    finally:
        builder.close()
    record = _track_record(args.out)
    report = {
        **msgspec.to_builtins(manifest),
        "transition_count": manifest.transitions,  # distinct
        "pair_count": builder.pairs,  # every pair read, repeats included
        "track": msgspec.to_builtins(record.keys),
    }
    lines = [
        f"index {manifest.id[:12]} at {args.out}: {manifest.transitions} transitions "
        f"({builder.pairs} pairs read) from {len(names)} traces, "
        f"{len(manifest.issues)} issues recorded",
        f"track record ({record.sample} of its transitions forecast, each with its "
        "group left out; hits: the real outcome among the forecast's):",
        *(
            f"  {k.key}: {k.hits} hits of {k.grounded} grounded ({k.asked} asked)"
            + ("" if k.supported() else ", forecasts held back by before --forecast")
            for k in record.keys
        ),
    ]
    emit(args, report, "\n".join(lines))
    return EXIT_OK


def _track_record(out: Path) -> TrackRecord:
    """Measure the new index's own track record and keep it beside it."""
    from worldline.actors.simulator import track
    from worldline.actors.simulator.index import load

    record = track.evaluate(load(out))
    track.save(record, out)
    return record


def _assistant(line: str) -> str | dict[str, Any]:
    """One stdin line as a step: a JSON object is an OpenAI-shaped assistant message
    (with ``tool_calls`` or without); anything else is assistant text."""
    text = line.rstrip("\n")
    if text.lstrip().startswith("{"):
        with contextlib.suppress(msgspec.DecodeError):
            message = msgspec.json.decode(text)
            if isinstance(message, dict) and "role" in message:
                return message
    return text


def _shown(message: dict[str, str]) -> str:
    if message.get("role") == "tool":
        return f"tool[{message.get('tool_call_id', '')}]: {message.get('content', '')}"
    return f"{message.get('role', 'user')}: {message.get('content', '')}"


def _sim_session(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        started = await world.sim_start(
            args.task, context=args.context, exclude_lineages=args.exclude
        )
        sys.stderr.write(f"session {started.session_id} (index {started.index[:12]})\n")
        try:
            for line in sys.stdin:
                if not line.strip():
                    continue
                reply = await world.sim_step(
                    started.session_id, _assistant(line), best_guess=args.best_guess
                )
                if args.json:  # every key: grounded true too
                    sys.stdout.write(msgspec.json.encode(every_key(reply)).decode())
                    sys.stdout.write("\n")
                else:
                    for message in reply.messages or [reply.message]:
                        print(_shown(message))
                    if not reply.grounded:  # a best guess, said so
                        sys.stderr.write(f"best guess, {reply.note}\n")
                sys.stdout.flush()
                if reply.terminal:
                    return
        finally:
            with contextlib.suppress(SimulationError):  # ended by a terminal step
                await world.sim_end(started.session_id)

    return run


def run_evaluation(args: argparse.Namespace) -> int:
    """Run (or resume) an evaluation plan: one immutable rollout per task."""
    from worldline.actors.runtime.consume import utcnow
    from worldline.actors.simulator.evaluate import run_plan
    from worldline.actors.simulator.plan import PlanError

    try:
        report = run_plan(args.plan, now=utcnow)
    except PlanError as exc:
        raise BadRequest(str(exc)) from exc
    emit(
        args,
        {"summary": report.summary(), "rollouts": [str(p) for p in report.rollouts]},
        report.summary(),
    )
    return EXIT_OK


def forecast_lines(reply: SimForecastReply, indent: str = "") -> list[str]:
    """A forecast for people: each outcome with its support, similarity and
    lineages, best first; or the "no grounding" note."""
    if not reply.grounded:
        return [f"{indent}{reply.note}"]
    lines = []
    for outcome in reply.outcomes:
        lines.append(f"{indent}{outcome.support}x  {outcome.observation}")
        lines.append(
            f"{indent}    similarity {outcome.similarity:.3f}, lineages: "
            + ", ".join(outcome.lineages)
        )
    lines.append(f"{indent}({reply.note}; index {reply.index[:12]})")
    return lines


def _forecast(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        reply = await world.forecast(
            args.move, context=args.context, k=args.k, exclude_lineages=args.exclude
        )
        kind = "tool call" if reply.move_kind == "tool" else "message"
        head = f"forecast for the {kind} {reply.move!r}:"
        lines = [head, *forecast_lines(reply, "  ")]
        if not (args.record and reply.grounded):
            emit(args, reply, "\n".join(lines))
            return
        recorded = await world.record_forecast(reply)
        lines.append("on record (settle the one that comes true):")
        lines += [f"  {b.id} ({b.confidence or 0:.2f}) {b.text}" for b in recorded]
        emit(args, {"forecast": reply, "recorded": recorded}, "\n".join(lines))

    return run


VERBS: dict[str, Callable[[argparse.Namespace], Callable[[World], Any]]] = {
    "sim.session": _sim_session,
    "forecast": _forecast,
}

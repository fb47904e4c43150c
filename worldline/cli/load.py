"""``worldline load FILE|-``: many adds and evidence items from JSON lines, through the
SDK's batch write (:meth:`worldline.sdk.batch.LoadMixin.load`).

Each line is one object,
``{"add": {"text", "confidence"?, "type"?, "id"?, "slot"?}}`` or
``{"evidence": {"belief_id", "direction", "kind", "source", "text"?}}``; blank lines
are skipped. Every line is checked before anything is published: a bad line refuses
the whole file (exit 2, naming the first bad line), so no file is half-applied
silently. Then the items go in chunks; the summary counts what was applied and names
each refused line with fusion's reason (``--json``: one record per line). Exit 3 if
any item was refused, 4 if any was not answered in time, else 0.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from worldline.cli.common import (
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_UNREACHABLE,
    with_world,
)
from worldline.cli.progress import Progress
from worldline.sdk.batch import AddItem, EvidenceItem, Loaded, build_op
from worldline.sdk.crew import utc_now
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    import argparse

    from worldline.sdk.client import World

__all__ = ["parse_lines", "run"]


class _Line(msgspec.Struct, forbid_unknown_fields=True):
    add: AddItem | None = None
    evidence: EvidenceItem | None = None


_DECODER = msgspec.json.Decoder(_Line)


def parse_lines(
    text: str, name: str, *, world: str, agent: str
) -> list[tuple[int, AddItem | EvidenceItem]]:
    """Every item of ``text`` with its line number (from 1), each checked as the op
    ``agent`` would record in ``world``.

    Raises:
        BadRequest: the first line that is not one add or one evidence object,
            named by its number, with what is wrong.
    """
    items: list[tuple[int, AddItem | EvidenceItem]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            parsed = _DECODER.decode(line)
        except msgspec.DecodeError as exc:
            raise BadRequest(
                f"{name} line {number}: {exc}; nothing was loaded (each line is "
                '{"add": {"text": ...}} or {"evidence": {"belief_id": ..., '
                '"direction": ..., "kind": ..., "source": ...}})'
            ) from exc
        chosen = [x for x in (parsed.add, parsed.evidence) if x is not None]
        if len(chosen) != 1:
            raise BadRequest(
                f"{name} line {number}: holds {len(chosen)} items; give exactly one "
                'of "add" or "evidence"; nothing was loaded'
            )
        item = chosen[0]
        try:
            build_op(item, world=world, agent=agent)
        except BadRequest as exc:
            raise BadRequest(
                f"{name} line {number}: {exc}; nothing was loaded"
            ) from exc
        items.append((number, item))
    return items


def _read(file: str) -> tuple[str, str]:
    if file == "-":
        return sys.stdin.read(), "stdin"
    try:
        return Path(file).read_text(encoding="utf-8"), file
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(f"cannot read {file}: {exc}") from exc


def _record(number: int, done: Loaded) -> dict[str, Any]:
    record: dict[str, Any] = {
        "line": number,
        "outcome": done.outcome,
        "belief_id": done.belief_id,
        "seq": done.seq,
    }
    if done.code or done.reason:
        record["code"], record["reason"] = done.code, done.reason
    if done.belief is not None and done.belief.confidence is not None:
        record["confidence"] = done.belief.confidence
    return record


def run(args: argparse.Namespace) -> int:
    """Check the whole file, load it, print the summary; return the exit code."""
    text, name = _read(args.file)
    # Every line is checked before anything is published: a bad one raises here.
    numbered = parse_lines(text, name, world=args.world, agent=args.agent)
    if not args.verbose:
        logging.getLogger("worldline.bus").setLevel(logging.ERROR)
    results: list[Loaded] = []

    items = [i for _, i in numbered]
    progress = Progress(f"load {name}", total=len(items))  # on a terminal only
    # On a terminal, several chunks per call, so the bar moves; else one call.
    step = args.chunk * 8 if progress.shown else max(1, len(items))

    async def verb(world: World) -> None:
        at = utc_now()  # the whole file is one instant, however many calls load it
        for start in range(0, len(items), step):
            part = items[start : start + step]
            done = await world.load(part, chunk=args.chunk, at=at)
            results.extend(done)
            progress.advance(len(done))
        progress.close()

    anyio.run(with_world, args, verb, backend="asyncio")
    lines = [number for number, _ in numbered]
    if args.json:
        for number, done in zip(lines, results, strict=True):
            sys.stdout.write(msgspec.json.encode(_record(number, done)).decode() + "\n")
    else:
        applied = sum(1 for done in results if done.ok)
        print(f"loaded {name}: {applied} of {len(results)} applied")
        for number, done in zip(lines, results, strict=True):
            if not done.ok:
                what = done.code or done.outcome
                print(f"  line {number}: {what}: {done.reason}")
    if any(done.outcome == "rejected" for done in results):
        return EXIT_REJECTED
    if any(done.outcome == "not_applied" for done in results):
        return EXIT_UNREACHABLE
    return EXIT_OK

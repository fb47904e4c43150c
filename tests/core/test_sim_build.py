"""Building an index from real trajectories at real size: several trials of one task
declared as one lineage build (an exchange they share is one transition with a
support count, used by forecasts and shown in session replies), the same id over
different content is refused naming both sources, and the build streams within a
file (a trace is read a conversation at a time; rows, vectors and context texts
wait on disk, not in memory)."""

from __future__ import annotations

import argparse
import json
import random
import tracemalloc
from typing import TYPE_CHECKING, Any, Final

import pytest

from worldline.actors.extractor.traces import TraceReader, parse_trace
from worldline.actors.simulator.builder import IndexBuilder
from worldline.actors.simulator.forecast import forecast
from worldline.actors.simulator.index import build, load
from worldline.actors.simulator.provider import LocalProvider
from worldline.actors.simulator.service import SessionService
from worldline.cli.parsing import parser
from worldline.cli.sim import run_index
from worldline.protocols.messages import (
    SimStart,
    SimStarted,
    SimStep,
    SimStepReply,
    Transition,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

ASK: Final = "Where is order 4471?"
CALL: Final = 'get_order({"id": 4471})'
SHIPPED: Final = '{"order": 4471, "status": "shipped tuesday"}'


def _trial(ending: list[dict[str, Any]]) -> dict[str, Any]:
    """One trial of task 7: the same first exchange (a call and its result), then
    its own ending."""
    return {
        "lineage": "task-7",
        "messages": [
            {"role": "user", "content": ASK},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_order", "arguments": '{"id": 4471}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": SHIPPED},
            *ending,
        ],
    }


TRIALS: Final = [
    _trial(
        [
            {"role": "assistant", "content": "It shipped on Tuesday."},
            {"role": "user", "content": "Thanks!"},
        ]
    ),
    _trial(
        [
            {"role": "assistant", "content": "Anything else I can do?"},
            {"role": "user", "content": "No, bye."},
        ]
    ),
]


def _jsonl(records: list[dict[str, Any]]) -> bytes:
    return "\n".join(json.dumps(r) for r in records).encode()


def _shared_index() -> Any:
    parsed = parse_trace("task7.jsonl", _jsonl(TRIALS))
    assert len(parsed.transitions) == 4  # two per trial, the first one identical
    return build(parsed.transitions, held_out=0.0, groups=parsed.groups)


# --- several trials of one lineage ---------------------------------------------------


def test_trials_of_one_lineage_sharing_a_first_exchange_build_with_support() -> None:
    index = _shared_index()
    assert index.manifest.transitions == 3  # distinct
    support = {t.action: t.support for t in index.transitions}
    assert support == {
        CALL: 2,
        "It shipped on Tuesday.": 1,
        "Anything else I can do?": 1,
    }
    shared = next(t for t in index.transitions if t.action == CALL)
    assert shared.source == "task7.jsonl:0#1"  # the first place it was seen
    assert not shared.final
    assert sum(t.support for t in index.transitions) == 4  # every pair read


def test_sim_index_json_counts_distinct_transitions_and_every_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "task7.jsonl"
    trace.write_bytes(_jsonl(TRIALS))
    args = argparse.Namespace(
        traces=[trace], out=tmp_path / "index", held_out=0.0, json=True
    )
    assert run_index(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["transition_count"] == report["transitions"] == 3
    assert report["pair_count"] == 4
    stored = load(tmp_path / "index")
    assert sorted(t.support for t in stored.transitions) == [1, 1, 2]


def test_a_forecast_counts_a_transition_recorded_twice_as_support_two() -> None:
    reply = forecast(_shared_index(), CALL, context=f"user: {ASK}")
    assert reply.grounded
    (outcome,) = reply.outcomes
    assert outcome.observation == SHIPPED
    assert outcome.support == 2  # one transition, seen in both trials
    assert len(outcome.transitions) == 1
    assert outcome.lineages == ("task-7",)


def test_a_session_reply_shows_the_support_of_its_grounding() -> None:
    service = SessionService(_shared_index(), rng=random.Random(3))
    assert service.index is not None
    service.provider = LocalProvider(service.index, k=1)
    started = service.serve(None, SimStart(task=ASK, context=f"user: {ASK}"), "w")  # type: ignore[arg-type]
    assert isinstance(started, SimStarted)
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_order", "arguments": '{"id": 4471}'},
    }
    step = SimStep(
        session_id=started.session_id,
        message={"role": "assistant", "content": None, "tool_calls": [call]},
    )
    reply = service.serve(None, step, "w")  # type: ignore[arg-type]
    assert isinstance(reply, SimStepReply)
    assert reply.messages[0]["content"] == SHIPPED
    assert reply.support == [2]
    assert len(reply.grounding) == 1


def test_the_same_id_over_different_content_is_refused_naming_both_sources() -> None:
    one = Transition(
        id="tr-x", lineage="l", action="a", observation="one", source="a.jsonl:0#2"
    )
    two = Transition(
        id="tr-x", lineage="l", action="a", observation="two", source="b.jsonl:3#2"
    )
    with pytest.raises(ValueError, match="names two different pairs") as info:
        build([one, two])
    assert "a.jsonl:0#2" in str(info.value)
    assert "b.jsonl:3#2" in str(info.value)


def test_held_out_help_says_the_split_is_by_group(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["sim", "index", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "share of lineages" not in text
    assert "lineage groups held out (split by group" in text


# --- streaming -----------------------------------------------------------------------

FILLER: Final = "order history line {n}: shipped, boxed, weighed, scanned. "


def _conversation(n: int, size: int) -> dict[str, Any]:
    result = "".join(FILLER.format(n=f"{n}-{i}") for i in range(size // 50))[:size]
    return {
        "messages": [
            {"role": "user", "content": f"task {n}: where is order {n}?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "history", "arguments": f'{{"n": {n}}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{n}", "content": result},
            {"role": "assistant", "content": f"Order {n} shipped."},
            {"role": "user", "content": f"thanks about {n}"},
        ]
    }


class Counted:
    """The lines of a generated JSONL file, made one at a time and counted."""

    def __init__(self, lines: int, size: int) -> None:
        self.lines, self.size = lines, size
        self.read = 0  # lines handed out so far
        self.bytes = 0

    def __iter__(self) -> Iterator[bytes]:
        for n in range(self.lines):
            self.read += 1
            line = (json.dumps(_conversation(n, self.size)) + "\n").encode()
            self.bytes += len(line)
            yield line


def test_a_jsonl_trace_is_read_a_line_at_a_time() -> None:
    lines = Counted(200, 2_000)
    reader = TraceReader("big.jsonl", lines)
    seen = 0
    for t in reader:
        line = int(t.source.split(":")[1].split("#")[0])
        assert lines.read <= line + 2  # never more than a line ahead
        seen += 1
    assert seen == 400
    assert lines.read == 200
    assert reader.format == "openai"


def test_the_build_holds_far_less_than_the_file(tmp_path: Path) -> None:
    lines = Counted(300, 60_000)  # about 18 MB of JSONL
    tracemalloc.start()
    try:
        builder = IndexBuilder(held_out=0.0)
        reader = TraceReader("big.jsonl", lines)
        for t in reader:
            builder.add(t, reader.groups[t.lineage])
        manifest = builder.write(tmp_path / "index", sources=["big.jsonl"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert manifest.transitions == 600
    assert lines.bytes > 17_000_000
    # Holding the rows (as the builder did) is over 18 MB of results alone, twice
    # that with the contexts; streamed, the peak is the batches in flight.
    assert peak < lines.bytes / 3, (peak, lines.bytes)
    stored = load(tmp_path / "index")
    assert stored.manifest == manifest
    assert len(stored.transitions[0].observation) > 0

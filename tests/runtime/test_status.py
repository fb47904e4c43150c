"""``worldline status``: heartbeats in wl-status joined with JetStream's numbers.

Pure tests pin the joining rules (stale, stopped, missing, DLQ counts, lag); the
integration tests run every actor against a real nats-server, write ops, one
observation and one undecodable op, and read the report through the CLI.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec
import nats
import pytest

import worldline
from tests.support import all_actors, unique_world
from worldline.actors.registry import build
from worldline.actors.runtime.metrics import Registry
from worldline.actors.runtime.supervise import run_actors
from worldline.cli import main
from worldline.cli.common import EXIT_UNREACHABLE
from worldline.ops.status import (
    ConsumerState,
    StreamRow,
    build_report,
    expected,
    gather,
)
from worldline.ops.status_table import HEADER, render
from worldline.protocols.messages import encode
from worldline.protocols.status import HEARTBEAT_VALUE, Heartbeat, InputStatus
from worldline.protocols.subjects import STATUS, ops, status_key

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from worldline.actors.runtime.spec import ActorSpec

T0: Final = datetime(2024, 5, 17, 9, 30, 0, tzinfo=UTC)
GOLDEN: Final = Path(__file__).resolve().parent.parent / "golden"
HEARTBEAT: Final = Heartbeat(
    actor="projector",
    instance="projector-1",
    host="node-a",
    pid=4242,
    started_at=T0,
    at=T0 + timedelta(seconds=90),
    interval=5.0,
    store_bytes=1 << 20,
    inputs=(
        InputStatus(
            durable="projector-1",
            stream="WL_STATE",
            applied=120,
            dead_lettered=1,
            batches=7,
            rate=2.5,
            last_batch_seconds=0.004,
        ),
    ),
)
BEAT_INTERVAL: Final = 0.3  # seconds, so integration tests see fresh numbers quickly


# --- the heartbeat record on the wire --------------------------------------------


def test_heartbeat_matches_its_golden_bytes() -> None:
    path = GOLDEN / "status.heartbeat.v1.msgpack"
    if os.environ.get("WORLDLINE_REGEN_GOLDEN") == "1":
        path.write_bytes(encode(HEARTBEAT))
        pytest.skip(f"regenerated {path.name}")
    assert encode(HEARTBEAT) == path.read_bytes()
    assert HEARTBEAT_VALUE.decode(path.read_bytes()) == HEARTBEAT


def test_heartbeat_ignores_fields_it_does_not_know() -> None:
    raw = msgspec.msgpack.decode(encode(HEARTBEAT))
    raw["added_later"] = [1, 2]
    raw["inputs"][0]["added_later"] = {"x": 1}
    assert HEARTBEAT_VALUE.decode(msgspec.msgpack.encode(raw)) == HEARTBEAT


def test_status_keys_separate_replicas_and_processes() -> None:
    keys = {
        status_key("projector-0", "node.a", 1),
        status_key("projector-1", "node.a", 1),
        status_key("projector-0", "node.b", 1),
        status_key("projector-0", "node.a", 2),
    }
    assert len(keys) == 4
    assert status_key("fusion-0of2", "h.example", 7) == "fusion-0of2.h_example-7"
    with pytest.raises(ValueError, match="invalid instance name"):
        status_key("bad.name", "h", 1)


# --- joining the numbers (pure) ----------------------------------------------------


def _report(
    beats: list[Heartbeat],
    *,
    now: datetime,
    consumers: dict[tuple[str, str], ConsumerState] | None = None,
    dlq_counts: dict[str, int] | None = None,
) -> Any:
    return build_report(
        url="nats://example:4222",
        now=now,
        heartbeats=beats,
        consumers=consumers or {},
        dlq_counts=dlq_counts or {},
        streams=[StreamRow(name="WL_OPS", messages=3, bytes=300, consumers=2)],
        expected={name: expected(name) for name in ("fusion", "projector")},
    )


def test_a_fresh_heartbeat_is_ok_an_old_one_stale_a_last_one_stopped() -> None:
    beat = HEARTBEAT
    stopped = msgspec.structs.replace(beat, instance="projector-2", pid=1, stopped=True)
    report = _report([beat, stopped], now=beat.at + timedelta(seconds=14))
    states = {r.instance: r.state for r in report.instances}
    assert states["projector-1"] == "ok"
    assert states["projector-2"] == "stopped"
    later = _report([beat], now=beat.at + timedelta(seconds=16))  # > 3 intervals
    assert {r.instance: r.state for r in later.instances}["projector-1"] == "stale"
    row = next(r for r in report.instances if r.instance == "projector-1")
    assert row.uptime_seconds == 90.0
    assert row.heartbeat_age_seconds == 14.0
    assert (row.host, row.pid, row.store_bytes) == ("node-a", 4242, 1 << 20)


def test_lag_is_pending_plus_ack_pending_and_counts_come_from_the_process() -> None:
    report = _report(
        [HEARTBEAT],
        now=HEARTBEAT.at,
        consumers={
            ("WL_STATE", "projector-1"): ConsumerState(
                pending=5, ack_pending=2, redelivered=1
            )
        },
    )
    row = next(r for r in report.instances if r.instance == "projector-1")
    (inp,) = row.inputs
    assert (inp.lag, inp.pending, inp.ack_pending, inp.redelivered) == (7, 5, 2, 1)
    assert (inp.applied, inp.dead_lettered, inp.batches) == (120, 1, 7)
    assert inp.rate == 2.5


def test_an_actor_reporting_nowhere_is_missing_with_its_durables() -> None:
    report = _report(
        [HEARTBEAT],
        now=HEARTBEAT.at,
        consumers={
            ("WL_OPS", "fusion"): ConsumerState(pending=9, ack_pending=0, redelivered=0)
        },
        dlq_counts={"fusion": 2, "fusion-1of2": 1, "projector-1": 3},
    )
    rows = {r.instance: r for r in report.instances}
    # projector runs (as projector-1): not missing; fusion reports nowhere.
    assert set(rows) == {"fusion", "fusion-1of2", "projector-1"}
    assert rows["fusion"].state == "missing"
    assert rows["fusion"].inputs[0].lag == 9
    assert rows["fusion"].inputs[0].applied is None
    assert rows["fusion"].dlq == 2
    # A gone shard's dead letters are still shown.
    assert (rows["fusion-1of2"].state, rows["fusion-1of2"].dlq) == ("missing", 1)
    assert rows["projector-1"].dlq == 3
    assert [r.instance for r in report.instances] == [
        "fusion",
        "projector-1",
        "fusion-1of2",
    ]


def test_the_table_lines_up_and_names_every_instance() -> None:
    report = _report([HEARTBEAT], now=HEARTBEAT.at, dlq_counts={"fusion": 2})
    text = render(report)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("INSTANCE"))
    assert header.split() == list(HEADER)
    assert "1 ok, 0 stale, 0 stopped, 1 missing" in lines[0]
    row = next(line for line in lines if line.startswith("projector-1"))
    # Columns line up: each value ends where its right-aligned header ends.
    assert row.index("node-a/4242") == header.index("HOST/PID")
    assert row[: header.index("LAG") + 3].rstrip().endswith("-")  # lag unknown
    assert "1.0 MiB" in row
    assert any(line.startswith("WL_OPS") and "3" in line for line in lines)


# --- against a real nats-server ------------------------------------------------------


async def _status_json(*argv: str) -> dict[str, Any]:
    """``worldline status --json`` in-process (its own event loop, in a thread)."""
    out = await anyio.to_thread.run_sync(_run_cli, ["status", "--json", *argv])
    parsed: dict[str, Any] = json.loads(out)
    return parsed


def _run_cli(argv: list[str]) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(argv)
    assert code == 0
    return buffer.getvalue()


def _instances(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["instance"]: row for row in report["instances"]}


@asynccontextmanager
async def _running(
    specs: Sequence[ActorSpec], url: str, data: Path, registry: Registry
) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        await tg.start(partial(run_actors, specs, url=url, data=data, metrics=registry))
        yield
        tg.cancel_scope.cancel()


async def _settled(url: str, done: Any, *, within: float = 20.0) -> Any:
    """Poll the report until ``done(report)``; return it (or the last one)."""
    report = None
    with anyio.move_on_after(within):
        while True:
            report = await gather(url, now=datetime.now(UTC))
            if done(report):
                return report
            await anyio.sleep(0.2)
    return report


@pytest.mark.nats
async def test_status_shows_every_instance_counts_and_dead_letters(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    registry = Registry(heartbeat_interval=BEAT_INTERVAL)
    async with (
        _running(all_actors(), nats_url, tmp_path, registry),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        for n in range(3):
            await ada.add(f"Claim number {n}", confidence=0.6)
        await ada.observe("- The cache is cold after every deploy.", source="notes")
        nc = await nats.connect(nats_url)
        try:  # an op no actor can decode: 0xc1 is never valid msgpack
            await nc.jetstream().publish(ops(world, "mallory"), b"\xc1 not msgpack")
        finally:
            await nc.close()

        def settled(report: Any) -> bool:
            rows = {r.instance: r for r in report.instances}
            return (
                rows["fusion"].dlq == 1
                and rows["materializer"].dlq == 1
                and all(i.lag == 0 for r in rows.values() for i in r.inputs)
                and all(
                    (i.applied or 0) > 0
                    for name in ("extractor", "fusion", "projector-0")
                    for i in rows[name].inputs
                )
                and rows["fusion"].inputs[0].dead_lettered == 1
                # the holder advertises what it sent at its next renewal (0.5 s)
                and any(x.published.get("WL_OPS", 0) > 0 for x in report.leases)
            )

        await _settled(nats_url, settled)
        report = await _status_json("--nats", nats_url)
        human = await anyio.to_thread.run_sync(_run_cli, ["status", "--nats", nats_url])

    rows = _instances(report)
    assert set(rows) == {b.instance for b in all_actors()}
    assert {r["state"] for r in rows.values()} == {"ok"}
    # The undecodable op is dead-lettered by both readers of WL_OPS, by nobody else.
    assert {name: r["dlq"] for name, r in rows.items()} == {
        "extractor": 0,
        "fusion": 1,
        "materializer": 1,
        "projector-0": 0,
        "simulator": 0,
    }
    streams = {s["name"]: s for s in report["streams"]}
    # One fusion and one materializer read the whole OPS record since they started:
    # every op is applied or dead-lettered, once (three adds, the extractor's
    # statements, the garbage).
    ops_total = streams["WL_OPS"]["messages"]
    assert ops_total >= 5
    fusion = rows["fusion"]["inputs"][0]
    assert fusion["durable"] == "fusion"
    assert fusion["dead_lettered"] == 1
    assert fusion["applied"] + fusion["dead_lettered"] == ops_total
    assert 1 <= fusion["batches"] <= ops_total
    (mat_ops,) = [i for i in rows["materializer"]["inputs"] if i["stream"] == "WL_OPS"]
    assert mat_ops["applied"] + mat_ops["dead_lettered"] == ops_total
    assert rows["extractor"]["inputs"][0]["applied"] == 1
    assert rows["projector-0"]["inputs"][0]["applied"] > 0
    for name, row in rows.items():
        assert row["store_bytes"] > 0, name
        assert row["pid"] == os.getpid()
        assert row["uptime_seconds"] >= 0
        for inp in row["inputs"]:
            assert inp["lag"] == 0, (name, inp)
            assert inp["redelivered"] == 0, (name, inp)
    assert streams["WL_DLQ"]["messages"] == 2
    assert streams["WL_OBS"]["messages"] == 0  # a work queue, consumed
    # The operator's table: header, every instance, the streams.
    assert human.splitlines()[2].split() == list(HEADER)
    for name in rows:
        assert any(line.startswith(name) for line in human.splitlines())
    assert any(line.startswith("WL_DLQ") for line in human.splitlines())
    # The materializer holds its partition's lease, and says how far it has sent.
    (lease,) = report["leases"]
    assert lease["partition"] == "materializer.p0of1"
    assert lease["holder"] == "materializer"
    assert lease["term"] == 1
    assert lease["published"]["WL_OPS"] >= 1
    assert any(line.split()[:3] == ["materializer.p0of1", "materializer", "1"]
               for line in human.splitlines())  # fmt: skip


@pytest.mark.nats
async def test_stopped_stale_and_missing_instances_do_not_break_status(
    nats_url: str, tmp_path: Path
) -> None:
    registry = Registry(heartbeat_interval=BEAT_INTERVAL)
    async with _running([build("projector")], nats_url, tmp_path, registry):
        running = await _settled(
            nats_url,
            lambda r: any(
                i.instance == "projector-0" and i.state == "ok" for i in r.instances
            ),
        )
        # A process that died without a word: its last heartbeat just ages.
        nc = await nats.connect(nats_url)
        try:
            kv = await nc.jetstream().key_value(STATUS.bucket)
            ghost = msgspec.structs.replace(
                HEARTBEAT,
                at=datetime.now(UTC) - timedelta(seconds=60),
                started_at=datetime.now(UTC) - timedelta(hours=1),
            )
            await kv.put(status_key("projector-1", "node-a", 4242), encode(ghost))
            await kv.put(status_key("junk", "node-a", 1), b"\xc1 not a heartbeat")
        finally:
            await nc.close()
        live = _instances(await _status_json("--nats", nats_url))
    assert {i.instance: i.state for i in running.instances}["projector-0"] == "ok"
    assert live["projector-0"]["state"] == "ok"
    assert live["projector-1"]["state"] == "stale"
    assert live["projector-1"]["heartbeat_age_seconds"] >= 60
    for name in ("extractor", "fusion", "materializer", "simulator"):
        assert live[name]["state"] == "missing"
        assert live[name]["host"] is None
    # Stopped cleanly: the last heartbeat says so.
    after = _instances(await _status_json("--nats", nats_url))
    assert after["projector-0"]["state"] == "stopped"


def test_status_without_a_server_exits_4_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["status", "--nats", "nats://127.0.0.1:1"])
    assert stopped.value.code == EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cannot reach NATS at nats://127.0.0.1:1" in err


@pytest.mark.nats
async def test_a_server_no_actor_ever_used_reports_all_missing(nats_url: str) -> None:
    report = await _status_json("--nats", nats_url)
    rows = _instances(report)
    assert {r["state"] for r in rows.values()} == {"missing"}
    assert {r["actor"] for r in rows.values()} == {
        "extractor",
        "fusion",
        "materializer",
        "projector",
        "simulator",
    }
    for row in rows.values():
        assert row["dlq"] == 0
        assert all(i["lag"] is None for i in row["inputs"])  # no durable yet
    assert {s["messages"] for s in report["streams"]} == {None}

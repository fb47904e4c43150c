"""``worldline status`` grades an instance whose batch keeps failing as ``stalled``
(pure: the heartbeat record in, the report and table out)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import msgspec

from worldline.ops.status import StatusReport, build_report, expected
from worldline.ops.status_table import render
from worldline.protocols.status import HEARTBEAT_VALUE, Heartbeat, InputStatus

T0: Final = datetime(2024, 5, 17, 9, 30, 0, tzinfo=UTC)
GOLDEN: Final = Path(__file__).resolve().parent.parent / "golden"
ERROR: Final = "fusion: no room to write the LMDB store at /d/fusion (DiskError)"
BEAT: Final = Heartbeat(
    actor="fusion",
    instance="fusion",
    host="node-a",
    pid=7,
    started_at=T0,
    at=T0 + timedelta(seconds=60),
    interval=5.0,
    inputs=(
        InputStatus(
            durable="fusion",
            stream="WL_OPS",
            applied=10,
            stalled_since=T0 + timedelta(seconds=30),
            error=ERROR,
        ),
    ),
)


def _report(beat: Heartbeat, now: datetime) -> StatusReport:
    return build_report(
        url="nats://example:4222",
        now=now,
        heartbeats=[beat],
        consumers={},
        dlq_counts={},
        streams=[],
        expected={"fusion": expected("fusion")},
    )


def test_a_live_instance_with_a_failing_batch_is_stalled() -> None:
    report = _report(BEAT, BEAT.at)
    (row,) = report.instances
    assert row.state == "stalled"
    (inp,) = row.inputs
    assert inp.stalled_since == T0 + timedelta(seconds=30)
    assert inp.error == ERROR
    text = render(report)
    assert "0 ok, 0 stale, 0 stopped, 0 missing, 1 stalled" in text.splitlines()[0]
    assert any(line.split()[:2] == ["fusion", "stalled"] for line in text.splitlines())
    assert f"stalled: fusion fusion since 2024-05-17T09:30:30+00:00: {ERROR}" in text
    as_json = msgspec.json.decode(msgspec.json.encode(report))
    assert as_json["instances"][0]["inputs"][0]["error"] == ERROR


def test_a_stale_or_stopped_heartbeat_is_not_called_stalled() -> None:
    assert _report(BEAT, BEAT.at + timedelta(seconds=20)).instances[0].state == "stale"
    stopped = msgspec.structs.replace(BEAT, stopped=True)
    assert _report(stopped, BEAT.at).instances[0].state == "stopped"


def test_a_healthy_input_reports_no_stall_and_old_heartbeats_still_decode() -> None:
    healthy = msgspec.structs.replace(
        BEAT, inputs=(InputStatus(durable="fusion", stream="WL_OPS"),)
    )
    (row,) = _report(healthy, BEAT.at).instances
    assert row.state == "ok"
    assert (row.inputs[0].stalled_since, row.inputs[0].error) == (None, None)
    # A heartbeat written before these fields existed decodes as not stalled.
    old = HEARTBEAT_VALUE.decode((GOLDEN / "status.heartbeat.v1.msgpack").read_bytes())
    assert all(i.stalled_since is None and i.error == "" for i in old.inputs)

"""The calibration record end to end (issue 25): claims resolved true or false keep
their confidence just before, ``calibration`` reports Brier, ECE and the curve by
world, source, kind and agent, a question settles all its answers at once, and the
CLI draws the reliability diagram. The five actors on a real nats-server.

Before this change a claim could only be retracted: there was no outcome, no record
and no ``calibration`` verb."""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.actors.belief_model import calibration as math
from worldline.sdk.errors import Rejected

if TYPE_CHECKING:
    from worldline.protocols.beliefs import Direction

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).with_name("worldline"))
SVG = "{http://www.w3.org/2000/svg}"


async def test_resolutions_build_the_record_the_report_reads(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        gap = await ada.add("Which region hosts the cache?", type="gap", id="g1")
        with pytest.raises(Rejected, match="true or false"):
            await ada.resolve("g1", "answered", outcome=True)
        assert (await ada.resolve(gap.id, "answered")).status == "resolved"
        await ada.add("The cache is warm.", id="c0")
        with pytest.raises(Rejected, match="--true"):
            await ada.resolve("c0", "done")  # a claim needs an outcome
        raw = await ada.before("is the cache warm?")
        assert raw.calibration == ""
        assert "Confidence: calibrated" not in raw.prompt
        expected: list[math.Record] = []
        for i in range(MIN := math.MIN_RECORDS + 2):
            bid = f"c{i + 1}"
            await ada.add(f"Deployment {i} finished without errors.", id=bid)
            direction: Direction = "supports" if i % 3 else "refutes"
            await ada.evidence(
                bid, direction=direction, kind="measurement", source="ci"
            )
            closed = await ada.resolve(bid, "checked", outcome=i % 4 != 0)
            assert closed.status == "resolved"
            assert closed.outcome is (i % 4 != 0)
            assert closed.closed_confidence is not None
            expected.append(
                math.Record(confidence=closed.closed_confidence, outcome=i % 4 != 0)
            )
        reply = await ada.calibration(bins=5)
        assert reply.world.count == MIN
        assert reply.world.brier == pytest.approx(math.brier(expected))
        assert reply.world.ece == pytest.approx(math.ece(expected, 5))
        assert sum(b.count for b in reply.world.bins) == MIN
        # By voice: in a world with no declaration, a source an agent names ("ci")
        # is that agent's own voice (docs/crew.md, "Sources and trust").
        (voice,) = reply.by_source
        assert voice.name == "agent:ada"
        # Its supports were borne out when true, its refutes when false (a plain
        # add records no evidence item).
        agreeing = sum((i % 3 != 0) == (i % 4 != 0) for i in range(MIN))
        assert voice.agreement == pytest.approx(agreeing / MIN)
        assert [g.name for g in reply.by_kind] == ["measurement"]
        assert [g.name for g in reply.by_agent] == ["ada"]
        assert reply.method in ("platt", "isotonic")  # enough record: switched on
        assert reply.fitted_on >= math.MIN_RECORDS
        # The worldview now shows calibrated confidence, and says so.
        view = await ada.before("is the cache warm?")
        said = f"{reply.method} on {reply.fitted_on} resolved beliefs"
        assert view.calibration == said
        assert f"Confidence: calibrated ({said})" in view.prompt

        # A question settled: the winner true, each rival false, all on record.
        slot = "region-of:cache"
        for bid, text in (("a1", "eu-west"), ("a2", "us-east"), ("a3", "ap-south")):
            await ada.add(f"The cache runs in {text}.", id=bid, slot=slot)
        await ada.evidence("a1", direction="supports", kind="citation", source="ops")
        settled = await ada.settle_slot("a1", "read the deploy log")
        assert [(b.id, b.outcome) for b in settled] == [
            ("a1", True),
            ("a2", False),
            ("a3", False),
        ]
        assert (await ada.calibration()).world.count == MIN + 3

        # The command line: resolve a claim, the report as JSON, the diagram as SVG.
        await ada.add("The cache evicts hourly.", id="c99")
        env = {
            **os.environ,
            "WORLDLINE_NATS": nats_url,
            "WORLDLINE_WORLD": world,
            "WORLDLINE_AGENT": "ada",
        }

        async def cli(*args: str) -> tuple[int, str, str]:
            done = await anyio.run_process([WORLDLINE, *args], env=env, check=False)
            return done.returncode, done.stdout.decode(), done.stderr.decode()

        code, out, err = await cli("resolve", "c99", "--false", "--reason", "no")
        assert code == 0, err
        assert "resolved false" in out
        assert "confidence just before" in out
        svg = tmp_path / "reliability.svg"
        code, out, err = await cli("calibration", "--json", "--svg", str(svg))
        assert code == 0, err
        report = json.loads(out)
        assert report["world"]["count"] == MIN + 4
        assert set(report) >= {"world", "by_source", "by_kind", "by_agent", "method"}
        drawn = ET.parse(svg).getroot()
        circles = drawn.findall(f"{SVG}circle")
        assert len(circles) == len(report["world"]["bins"]) > 0
        code, out, err = await cli("calibration", "--svg", "/proc/no/such/dir/d.svg")
        assert code == 2
        assert "cannot write the diagram" in err
        code, out, err = await cli("calibration")
        assert code == 0, err
        assert f"resolved beliefs: {MIN + 4}" in out
        assert "by source:" in out


async def test_a_recorded_forecast_is_scored_once_its_outcome_is_known(
    nats_url: str, tmp_path: Path
) -> None:
    from tests.runtime.test_forecast import ASK, make_index
    from worldline.actors.registry import build

    world = unique_world("forecast")
    actors = [a for a in all_actors() if a.name != "simulator"]
    actors.append(build("simulator", sim_index=make_index(tmp_path)))
    async with (
        running(actors, url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="eval") as w,
    ):
        forecast = await w.forecast(ASK)
        recorded = await w.record_forecast(forecast)
        # "To Lisbon" had 2 of 3 neighbours, "Madrid" 1: the claims say so.
        assert [round(b.confidence or 0, 2) for b in recorded] == [0.67, 0.33]
        assert len({b.slot for b in recorded}) == 1
        assert recorded[0].slot.startswith("forecast-")
        assert (await w.calibration()).forecasts is None  # nothing resolved yet
        # The user said Madrid: the forecast gave it a third.
        closed = await w.settle_slot(recorded[1].id, "the user chose Madrid")
        assert [b.outcome for b in closed] == [True, False]
        reply = await w.calibration()
        assert reply.forecasts is not None
        assert reply.forecasts.count == 2
        expected = [
            math.Record(confidence=b.closed_confidence or 0.0, outcome=bool(b.outcome))
            for b in closed
        ]
        assert reply.forecasts.brier == pytest.approx(math.brier(expected))
        assert reply.forecasts.brier > 0.4  # a confident miss scores badly
        unlike = await w.forecast("Quarterly revenue grew in the northern region")
        with pytest.raises(worldline.BadRequest, match="no grounded outcome"):
            await w.record_forecast(unlike)

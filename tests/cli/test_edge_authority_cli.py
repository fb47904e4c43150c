"""``worldline relate --id`` re-states an edge already linked: its author may, another
agent is rejected ``unauthorized`` and the command exits 3 with the reason (issue 23;
docs/crew.md, "Belief edges"), against the five actors on a real nats-server."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

import worldline
from tests.support import all_actors, running, unique_world

if TYPE_CHECKING:
    import subprocess

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).with_name("worldline"))
EXIT_REJECTED = 3


async def relate(
    url: str, world: str, agent: str, *args: str
) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "WORLDLINE_NATS": url,
        "WORLDLINE_WORLD": world,
        "WORLDLINE_AGENT": agent,
    }
    return await anyio.run_process([WORLDLINE, "relate", *args], env=env, check=False)


async def test_relate_id_changes_only_an_edge_the_agent_may_change(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="scotty") as scotty,
    ):
        await scotty.add("The coolant pump holds at full load.", id="a")
        await scotty.add("The reactor can run at 110%.", id="c")
        await scotty.relate("c", "a", type="depends_on", confidence=0.9, id="e1")
        spock = await relate(
            nats_url, world, "spock", "c", "depends_on", "a", "--id", "e1",
            "--confidence", "0.05",
        )  # fmt: skip
        assert spock.returncode == EXIT_REJECTED, spock.stderr
        said = spock.stderr.decode()
        assert "spock may not change or remove belief edge e1, which scotty linked" in (
            said
        )
        (edge,) = [e for e in (await scotty.read()).belief_edges if e.id == "e1"]
        assert edge.confidence == 0.9
        own = await relate(
            nats_url, world, "scotty", "c", "depends_on", "a", "--id", "e1",
            "--confidence", "0.6",
        )  # fmt: skip
        assert own.returncode == 0, own.stderr
        (edge,) = [e for e in (await scotty.read()).belief_edges if e.id == "e1"]
        assert edge.confidence == 0.6
        fresh = await relate(nats_url, world, "spock", "c", "supports", "a")
        assert fresh.returncode == 0, fresh.stderr  # a new edge: anyone may

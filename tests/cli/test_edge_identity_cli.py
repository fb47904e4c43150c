"""``worldline relate`` names the edge it links (text and ``--json``), a repeat names
the same edge, ``--id`` names it explicitly, ``trace`` shows edge ids, and
``worldline unrelate EDGE_ID`` removes one (an unknown id exits 2 with the reason),
against the five actors on a real nats-server (issue 25, point 3; docs/cli.md)."""

from __future__ import annotations

import json
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
EXIT_USAGE = 2


async def cli(url: str, world: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "WORLDLINE_NATS": url,
        "WORLDLINE_WORLD": world,
        "WORLDLINE_AGENT": "spock",
    }
    return await anyio.run_process([WORLDLINE, *args], env=env, check=False)


async def traced_edges(url: str, world: str, belief_id: str) -> list[str]:
    done = await cli(url, world, "trace", belief_id, "--json")
    assert done.returncode == 0, done.stderr
    return sorted(e["id"] for e in json.loads(done.stdout).get("edges", []))


async def test_relate_prints_the_edge_id_and_unrelate_removes_it(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="spock") as spock,
    ):
        await spock.add("The launch window is open.", confidence=0.2, id="a")
        await spock.add("We launch on Friday.", confidence=0.9, id="c")
        edge_id = spock.edge_id("c", "a", type="depends_on")

        said = await cli(nats_url, world, "relate", "c", "depends_on", "a")
        assert said.returncode == 0, said.stderr
        assert said.stdout.decode() == f"edge {edge_id}: c -depends_on (0.8)-> a\n"
        again = await cli(nats_url, world, "relate", "c", "depends_on", "a", "--json")
        assert again.returncode == 0, again.stderr
        shown = json.loads(again.stdout)
        assert (shown["id"], shown["type"], shown["confidence"]) == (
            edge_id,
            "depends_on",
            0.8,
        )
        assert shown["seq"] > 0
        assert await traced_edges(nats_url, world, "c") == [edge_id]  # one edge
        trace = await cli(nats_url, world, "trace", "c")
        assert f"edge {edge_id}: c -depends_on" in trace.stdout.decode()

        named = await cli(
            nats_url, world, "relate", "c", "supports", "a", "--id", "e-named",
            "--json",
        )  # fmt: skip
        assert named.returncode == 0, named.stderr
        assert json.loads(named.stdout)["id"] == "e-named"
        assert await traced_edges(nats_url, world, "c") == sorted([edge_id, "e-named"])

        gone = await cli(nats_url, world, "unrelate", edge_id)
        assert gone.returncode == 0, gone.stderr
        removed = f"edge {edge_id} removed: c -depends_on (0.8)-> a\n"
        assert gone.stdout.decode() == removed
        assert await traced_edges(nats_url, world, "c") == ["e-named"]
        as_json = await cli(nats_url, world, "unrelate", "e-named", "--json")
        assert as_json.returncode == 0, as_json.stderr
        assert json.loads(as_json.stdout)["removed"] is True
        assert await traced_edges(nats_url, world, "c") == []

        unknown = await cli(nats_url, world, "unrelate", "be-missing")
        assert unknown.returncode == EXIT_USAGE
        assert "no belief edge 'be-missing'" in unknown.stderr.decode()

"""``worldline contradictions``, ``worldline settle`` and ``--as-of`` from the command
line, against the five actors on a real nats-server (docs/cli.md,
docs/belief-math.md "Contradictions")."""

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
from worldline.actors.belief_model.contradictions import contradiction_id

if TYPE_CHECKING:
    import subprocess

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).with_name("worldline"))


async def cli(url: str, world: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    # As the operator, who may settle any contradiction (an agent needs the world's
    # declaration to let it: docs/crew.md, "Sources and trust").
    env = {
        **os.environ,
        "WORLDLINE_NATS": url,
        "WORLDLINE_WORLD": world,
        "WORLDLINE_AGENT": "operator",
    }
    return await anyio.run_process([WORLDLINE, *args], env=env, check=False)


async def test_list_settle_and_read_as_of_from_the_command_line(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        await ada.add("The cache is warm.", id="b1")
        await ada.add("The cache is cold.", id="b2")
        await ada.relate("b1", "b2", type="contradicts", id="x1")
        cid = contradiction_id(world, "edge", ("b1", "b2"))
        shown = await cli(nats_url, world, "contradictions", "--json")
        assert shown.returncode == 0, shown.stderr
        (row,) = json.loads(shown.stdout)
        assert (row["id"], row["status"], row["beliefs"]) == (cid, "open", ["b1", "b2"])
        human = await cli(nats_url, world, "contradictions")
        assert f"{cid} open" in human.stdout.decode()
        bad = await cli(
            nats_url, world, "settle", cid, "--reason", "x", "--winner", "b7"
        )
        assert bad.returncode == 2, bad.stderr
        assert "not an end" in bad.stderr.decode()
        missing = await cli(nats_url, world, "settle", cid)
        assert missing.returncode == 2  # --reason is required
        done = await cli(
            nats_url, world, "settle", cid, "--reason", "measured", "--winner", "b1"
        )
        assert done.returncode == 0, done.stderr
        assert f"settled {cid}" in done.stdout.decode()
        settled = await cli(nats_url, world, "contradictions", "--status", "resolved")
        assert f"{cid} resolved" in settled.stdout.decode()
        assert "winner b1" in settled.stdout.decode()
        first = await ada.get("b1")
        assert first is not None
        before = (first.created_at.replace(year=first.created_at.year - 1)).isoformat()
        old = await cli(nats_url, world, "get", "b1", "--as-of", before)
        assert old.returncode == 2  # not created yet then: no such belief
        read = await cli(nats_url, world, "read", "--as-of", before, "--json")
        assert read.returncode == 0, read.stderr
        assert json.loads(read.stdout).get("beliefs", []) == []  # empty: omitted
        now = await cli(nats_url, world, "read", "--json")
        assert {b["id"] for b in json.loads(now.stdout)["beliefs"]} == {"b1", "b2"}

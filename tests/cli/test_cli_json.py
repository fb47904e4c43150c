"""What ``--json`` prints from the command line, against the five actors on a real
nats-server: every key of an answer, empty lists and nulls included (the wire leaves
defaults out; the CLI's rendering does not), and a belief's hand-set label from
``add`` to ``get``, ``list`` and ``read`` (docs/cli.md)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import msgspec
import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.protocols.base import Belief
from worldline.protocols.messages import WorldReply

if TYPE_CHECKING:
    import subprocess

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).with_name("worldline"))


async def cli(url: str, world: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "WORLDLINE_NATS": url,
        "WORLDLINE_WORLD": world,
        "WORLDLINE_AGENT": "ada",
    }
    return await anyio.run_process([WORLDLINE, *args], env=env, check=False)


def _fields(cls: type[msgspec.Struct]) -> set[str]:
    return set(cls.__struct_encode_fields__)


async def test_json_reads_print_every_key_even_when_empty(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with running(all_actors(), url=nats_url, data=tmp_path):
        read = await cli(nats_url, world, "read", "--json")
        assert read.returncode == 0, read.stderr
        empty = json.loads(read.stdout)
        assert set(empty) == {"kind", *_fields(WorldReply)}
        assert empty["beliefs"] == empty["gaps"] == empty["moves"] == []
        assert empty["declaration"] is None
        async with worldline.connect(nats_url, world=world, agent="ada") as ada:
            await ada.add("Ship the importer", type="goal", id="g1")
        got = await cli(nats_url, world, "get", "g1", "--json")
        assert got.returncode == 0, got.stderr
        goal = json.loads(got.stdout)
        assert set(goal) == _fields(Belief)
        assert goal["confidence"] is None  # a goal carries none, and says so
        assert goal["flags"] == []
        for args in (["list"], ["list", "--all"]):
            listed = await cli(nats_url, world, *args, "--type", "goal", "--json")
            assert listed.returncode == 0, listed.stderr
            assert [set(b) for b in json.loads(listed.stdout)] == [_fields(Belief)]
        read = await cli(nats_url, world, "read", "--json")
        (shown,) = json.loads(read.stdout)["goals"]
        assert set(shown) == _fields(Belief)
        # The wire itself still leaves the defaults out.
        assert b'"beliefs"' not in msgspec.json.encode(WorldReply())


async def test_a_label_set_on_add_shows_in_get_list_and_read(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with running(all_actors(), url=nats_url, data=tmp_path):
        added = await cli(
            nats_url, world, "add", "Auth sits in the middleware", "--id", "b1",
            "--label", "load-bearing", "--json",
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert json.loads(added.stdout)["label"] == "load-bearing"
        await cli(nats_url, world, "add", "The cache is warm", "--id", "b2")
        got = await cli(nats_url, world, "get", "b1", "--json")
        assert json.loads(got.stdout)["label"] == "load-bearing"
        shown = (await cli(nats_url, world, "get", "b1")).stdout.decode()
        assert "label: load-bearing" in shown
        listed = await cli(nats_url, world, "list", "--label", "load-bearing", "--json")
        assert [b["id"] for b in json.loads(listed.stdout)] == ["b1"]
        read = (await cli(nats_url, world, "read")).stdout.decode()
        assert "label load-bearing" in read
        bad = await cli(nats_url, world, "add", "Another", "--label", "two words")
        assert bad.returncode == 2
        (line,) = bad.stderr.decode().splitlines()
        assert "is not a label: use 1-64 letters, digits and _.:/-" in line
        other = await cli(nats_url, world, "add", "The cache is warm", "--id", "b2",
                          "--label", "risk")  # fmt: skip
        assert other.returncode == 0, other.stderr  # b2 had none: this sets it
        again = await cli(nats_url, world, "add", "The cache is warm", "--id", "b2",
                          "--label", "limiting-belief")  # fmt: skip
        assert again.returncode == 3
        assert "a belief's label is set once" in again.stderr.decode()

"""``worldline search`` and ``worldline list --cursor/--all`` as a user runs them: the
command as a subprocess against a real nats-server and the five actors."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import worldline
from tests.support import all_actors, running, unique_world

pytestmark = [pytest.mark.cli, pytest.mark.nats]

WORLDLINE = str(Path(sys.executable).parent / "worldline")
TARGET = "Meeting room Tuesday is booked for the board review"
HARBOR = [
    "The harbor crane needs a new gearbox before spring",
    "Harbor fees rose by a tenth this year",
    "Night shifts at the harbor are short of pilots",
    "The harbor dredging contract ends in June",
    "Fog closes the harbor about twelve days a year",
    "Harbor cameras cover the east quay only",
    "Customs at the harbor clear most containers in a day",
]


class Cli:
    def __init__(self, url: str, world: str) -> None:
        self.env = {**os.environ, "WORLDLINE_NATS": url, "WORLDLINE_WORLD": world}

    async def run(self, *args: str) -> tuple[int, str, str]:
        done = await anyio.run_process([WORLDLINE, *args], env=self.env, check=False)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    async def ok(self, *args: str) -> str:
        code, out, err = await self.run(*args)
        assert code == 0, err
        assert "Traceback" not in err
        return out

    async def json(self, *args: str) -> Any:
        return json.loads(await self.ok(*args, "--json"))


async def test_search_from_the_command_line(nats_url: str, tmp_path: Path) -> None:
    world = unique_world("clisearch")
    cli = Cli(nats_url, world)
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        target = await ada.add(TARGET, confidence=0.7)
        await ada.evidence(
            target.id,
            direction="supports",
            kind="citation",
            source="calendar",
            id="ev-room-calendar",
        )
        harbor = {(await ada.add(text)).id for text in HARBOR}
        await ada.add("Quarterly revenue beat the forecast", confidence=0.6)

        # The exact words find their belief first: JSON has the page and its cursor.
        page = await cli.json("search", "meeting room Tuesday")
        assert set(page) == {"hits", "embedder", "next_cursor"}
        first = page["hits"][0]
        assert first["belief"]["id"] == target.id
        assert first["channels"]["lexical"] > 0
        assert any(t.startswith("ev-room-calendar") for t in first["trace"])

        # The human form: rank, fused score, channels, confidence, id, text, trace.
        shown = (await cli.ok("search", "meeting room Tuesday")).splitlines()
        assert shown[0].startswith("  1. ")
        assert target.id in shown[0]
        named = [w for w in shown[0].split() if w in first["channels"]]
        assert named == [c for c in ("lexical", "semantic", "prior") if c in named]
        assert "lexical" in named
        assert "confidence 0." in shown[0]
        assert "Meeting room Tuesday" in shown[1]
        assert shown[2].strip().startswith("trace: ev-room-calendar")

        # Pages of two, cursor by cursor: every hit once, as one page of 200 and
        # as --all give them.
        whole = await cli.json("search", "harbor", "--limit", "200")
        ids = [hit["belief"]["id"] for hit in whole["hits"]]
        assert harbor <= set(ids)
        walked: list[str] = []
        cursor = ""
        while True:
            part = await cli.json(
                "search", "harbor", "--limit", "2", "--cursor", cursor
            )
            assert len(part["hits"]) <= 2
            walked += [hit["belief"]["id"] for hit in part["hits"]]
            cursor = part["next_cursor"]
            if not cursor:
                break
        assert walked == ids
        every = await cli.json("search", "harbor", "--all", "--limit", "3")
        assert [hit["belief"]["id"] for hit in every] == ids

        # Without --json, the next page's cursor is named on stderr.
        code, out, err = await cli.run("search", "harbor", "--limit", "2")
        assert code == 0, err
        assert out.count("\n  2. ") == 1
        assert "--cursor " in err
        listed = (
            await cli.ok("search", "harbor", "--all", "--limit", "2")
        ).splitlines()
        assert listed[3 * (len(ids) - 1)].startswith(f"{len(ids):>3}. ")

        # Bad input: one line on stderr naming the fix, exit 2.
        for args in (
            ("search", "harbor", "--cursor", "not-a-cursor"),
            ("list", "--cursor", "not-a-cursor"),
        ):
            code, _, err = await cli.run(*args)
            assert code == 2, err
            assert "Traceback" not in err
            assert len(err.strip().splitlines()) == 1, err
            assert "cursor" in err
            assert "next_cursor" in err
        code, _, err = await cli.run("search", "harbor", "--limit", "500")
        assert code == 2
        assert "outside 1 to 200" in err
        nothing = await cli.ok("search", "xylophone")
        assert "matches 'xylophone'" in nothing


async def test_list_all_follows_the_cursors(nats_url: str, tmp_path: Path) -> None:
    world = unique_world("clilist")
    cli = Cli(nats_url, world)
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        for n in range(23):
            await ada.add(f"Valve {n} on the cooling loop was inspected")
        everything = [b.id for b in await ada.list(limit=None)]

        # More beliefs than one page: --all follows the cursors to the end.
        streamed = await cli.json("list", "--all", "--limit", "5")
        assert [b["id"] for b in streamed] == everything
        human = await cli.ok("list", "--all", "--limit", "5")
        assert [line.split()[0] for line in human.splitlines()[::2]] == everything

        # One page at a time: the next cursor on stderr, then --cursor from it.
        code, out, err = await cli.run("list", "--limit", "10", "--json")
        assert code == 0, err
        assert [b["id"] for b in json.loads(out)] == everything[:10]
        assert "10 shown of 23" in err
        cursor = err.split("--cursor ", 1)[1].split()[0]
        rest = await cli.json("list", "--cursor", cursor, "--all")
        assert [b["id"] for b in rest] == everything[10:]
        last = await cli.run("list", "--cursor", cursor, "--limit", "13")
        assert last[0] == 0
        assert "--cursor" not in last[2]

"""``read`` and ``list`` of a world whose whole answer is larger than the server's
max payload: the projector answers a page at a time (each under 1 MiB), and the SDK
and the CLI follow the cursors, so every belief comes back exactly once, in order."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import anyio
import msgspec
import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.protocols.messages import (
    AddBelief,
    BeliefListReply,
    ListBeliefs,
    ReadWorld,
    WorldReply,
    encode,
)
from worldline.protocols.subjects import ops
from worldline.sdk.crew import new_id, utc_now

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).parent / "worldline")
BELIEFS = 1500
GOALS = 20  # of them, listed apart from the beliefs in a read
TEXT = 900  # characters a belief's text holds: the whole read is about 1.5 MB
MAX_PAYLOAD = 1024 * 1024


def _op(n: int, start: object) -> bytes:
    assert isinstance(start, type(utc_now()))
    return encode(
        AddBelief(
            op_id=new_id("op"),
            author="ada",
            # created_at comes from the op: the oldest-first order is not id order
            at=start + timedelta(seconds=(n * 7919) % BELIEFS),
            belief_id=f"b-{n:05d}",
            text=f"Belief {n} " + "holds because of a long argument. " * (TEXT // 34),
            type="goal" if n < GOALS else "claim",
        )
    )


async def _cli(url: str, world: str, *args: str) -> str:
    env = {**os.environ, "WORLDLINE_NATS": url, "WORLDLINE_WORLD": world}
    done = await anyio.run_process([WORLDLINE, *args], env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def test_read_and_list_page_a_world_larger_than_the_max_payload(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("pages")
    start = utc_now()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path / "live"),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        for n in range(BELIEFS):
            await ada._js.publish(ops(world, "ada"), _op(n, start))
        with anyio.fail_after(60):
            while True:
                reply = await ada._request("list", ListBeliefs(limit=1, status="any"))
                assert isinstance(reply, BeliefListReply), reply
                if reply.total == BELIEFS:
                    break
                await anyio.sleep(0.5)
        await ada.relate("b-00100", "b-00200", type="contradicts", confidence=0.9)

        # One page, as the projector answers it: under the max payload, with a cursor.
        first = await ada._request("read", ReadWorld())
        assert isinstance(first, WorldReply), first
        assert first.next_cursor
        assert len(encode(first)) < MAX_PAYLOAD
        assert first.moves  # the first page carries the moves

        read = await ada.read()
        ids = [b.id for b in read.beliefs]
        assert ids == [f"b-{n:05d}" for n in range(GOALS, BELIEFS)]  # once, in order
        assert [b.id for b in read.goals] == [f"b-{n:05d}" for n in range(GOALS)]
        assert [e.source for e in read.belief_edges] == ["b-00100"]
        assert [c.beliefs for c in read.contradictions] == [("b-00100", "b-00200")]
        assert not read.next_cursor

        listed = await ada.list(limit=None)
        everything = sorted((b.created_at, b.id) for b in read.beliefs + read.goals)
        assert [(b.created_at, b.id) for b in listed] == everything
        assert len({b.id for b in listed}) == BELIEFS
        # More than one request may carry (10,000): the SDK pages past it.
        assert len(await ada.list(limit=20_000)) == BELIEFS
        assert [b.id for b in await ada.list(limit=700)] == [i for _, i in everything][
            :700
        ]
        assert len(await ada.list(type="goal", limit=None)) == GOALS

        with pytest.raises(worldline.BadRequest, match=r"bad cursor .* next_cursor"):
            await ada._request("list", ListBeliefs(cursor="not a cursor"))

        cli_read = json.loads(await _cli(nats_url, world, "read", "--json"))
        assert [b["id"] for b in cli_read["beliefs"]] == ids
        cli_list = json.loads(
            await _cli(nats_url, world, "list", "--limit", "20000", "--json")
        )
        assert [b["id"] for b in cli_list] == [b.id for b in listed]
        assert msgspec.json.decode(json.dumps(cli_list[0]))["id"] == listed[0].id

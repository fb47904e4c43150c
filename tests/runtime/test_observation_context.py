"""The observation's own context over a real nats-server (issue 27): a turn observed
with the turn before as its ``context`` is found by ``before`` through that turn,
though it holds none of the question's words."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

import worldline
from tests.support import all_actors, cli_env, listed, running, unique_world
from worldline.sdk.hooks import observed

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).with_name("worldline"))

QUESTION = "Did Joey finish the lasagna?"
TURN = f"Rachel Green: {QUESTION}"
REPLY = "Chandler Bing: Every last bite."


async def test_a_reply_observed_after_its_turn_is_found_through_it(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        for i in range(4):
            await ada.observe(f"Gunther: Table {i} wants more coffee.", source=f"f{i}")
        await ada.observe(TURN, source="scene-u1")
        # observed() (the SDK hook that waits) passes the context on too
        done = await observed(ada, REPLY, source="scene-u2", context=TURN)
        assert done.applied
        with anyio.fail_after(10):
            while True:  # extraction is asynchronous
                beliefs = await ada.list()
                if len(beliefs) >= 6:
                    break
                await anyio.sleep(0.05)
        reply = next(b for b in beliefs if b.text == REPLY)
        view = await ada.before(QUESTION)
    shown = {ref for leaf in [*view.current, *view.moves] for ref in leaf.trace}
    assert reply.id in shown


async def test_the_cli_observes_with_a_context(nats_url: str, tmp_path: Path) -> None:
    """``worldline observe FILE --context TEXT``: the same as the SDK's context."""
    world = unique_world()
    reply_file = tmp_path / "reply.txt"
    reply_file.write_text(REPLY)
    env = cli_env(nats_url, world)
    async with (
        running(all_actors(), url=nats_url, data=tmp_path / "actors"),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        for i in range(4):
            await ada.observe(f"Gunther: Table {i} wants more coffee.", source=f"f{i}")
        command = [WORLDLINE, "observe", str(reply_file), "--context", TURN, "--json"]
        done = await anyio.run_process(command, env=env, check=False)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["obs_id"]
        reply = await listed(ada, REPLY)
        hits = await ada.search("Joey lasagna")
    assert reply.id in {h.belief.id for h in hits.hits}

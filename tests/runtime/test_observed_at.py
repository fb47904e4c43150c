"""When an artifact says it happened, over a real nats-server (issue 27): a turn
observed with its session's date (the SDK's ``observed_at``, the CLI's
``--observed-at``) has its evidence observed then, and a question about time shows
the day beside it."""

from __future__ import annotations

import inspect
import sys
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

import worldline
from tests.runtime.test_sync_hooks import actors_in_background
from tests.support import all_actors, cli_env, listed, running, unique_world
from worldline import hooks, sync
from worldline.sdk.hooks import observed

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).with_name("worldline"))
SESSION = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
TURN = "Caroline: I went to the LGBTQ support group yesterday."


async def test_a_turn_observed_with_its_sessions_date_says_when(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        await ada.observe("Melanie: The kids loved the museum.", source="s1")
        done = await observed(ada, TURN, source="session-1", observed_at=SESSION)
        assert done.applied
        went = next(b for b in await ada.list() if b.text == TURN)
        trace = await ada.trace(went.id)
        assert [s.evidence.observed_at for s in trace.steps] == [SESSION]
        asked = await ada.before("When did Caroline go to the support group?")
        plain = await ada.before("Did Caroline go to the support group?")
    leaf = next(leaf for leaf in asked.current if leaf.id == went.id)
    assert leaf.said == "2023-05-08"
    assert "[said 2023-05-08]" in asked.prompt
    assert "[said" not in plain.prompt


async def test_the_cli_observes_with_a_date(nats_url: str, tmp_path: Path) -> None:
    """``worldline observe FILE --observed-at TIME``; a bad time exits 2 and says
    what a good one looks like."""
    world = unique_world()
    turn_file = tmp_path / "turn.txt"
    turn_file.write_text(TURN)
    env = cli_env(nats_url, world)
    async with (
        running(all_actors(), url=nats_url, data=tmp_path / "actors"),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        bad = [WORLDLINE, "observe", str(turn_file), "--observed-at", "last may"]
        refused = await anyio.run_process(bad, env=env, check=False)
        assert refused.returncode == 2
        assert "is not an ISO time like" in refused.stderr.decode()
        command = [WORLDLINE, "observe", str(turn_file), "--observed-at", "2023-05-08"]
        done = await anyio.run_process(command, env=env, check=False)
        assert done.returncode == 0, done.stderr
        went = await listed(ada, TURN)
        trace = await ada.trace(went.id)
    day = datetime(2023, 5, 8, tzinfo=UTC)  # no zone given: UTC
    assert [s.evidence.observed_at for s in trace.steps] == [day]


def test_the_blocking_hooks_take_what_the_async_ones_take() -> None:
    for name in ("observed", "reported"):
        blocking = set(inspect.signature(getattr(sync.SyncWorld, name)).parameters)
        asynchronous = set(inspect.signature(getattr(hooks, name)).parameters)
        assert blocking - {"self"} == asynchronous - {"world"}, name


def test_the_blocking_sdk_observes_with_a_date(nats_url: str, tmp_path: Path) -> None:
    with (
        actors_in_background(nats_url, tmp_path),
        sync.connect(nats_url, world=unique_world(), agent="ada") as ada,
    ):
        done = ada.observed(
            TURN, source="s1", context="Melanie: Hi!", observed_at=SESSION
        )
        assert done.applied
        (went,) = (s.belief_id for s in done.statements)
        trace = ada.trace(went)
    assert [s.evidence.observed_at for s in trace.steps] == [SESSION]
    assert [s.evidence.context for s in trace.steps] == ["Melanie: Hi!"]

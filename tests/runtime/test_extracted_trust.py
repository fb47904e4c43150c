"""Extracted evidence is the observing agent's: over a real nats-server, ``trust
agent:<observer>`` moves what it observed and ``trust agent:extractor`` does not."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.sdk.hooks import observed

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.nats


async def test_trust_in_the_observer_moves_what_it_observed(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="spock") as spock,
        # The operator may set any trust (an agent only lowers its own).
        worldline.connect(nats_url, world=world, agent="operator") as kirk,
    ):
        found = await observed(spock, "The warp core is stable.", source="log.md")
        assert found.applied
        (statement,) = found.statements
        trace = await kirk.trace(statement.belief_id)
        assert [s.evidence.author for s in trace.steps] == ["spock"]
        # log.md is declared for nobody: it counts as spock's own voice.
        assert [s.evidence.voice for s in trace.steps] == ["agent:spock"]
        before = await kirk.get(statement.belief_id)
        assert before is not None
        assert before.confidence is not None
        assert before.confidence > 0.5
        await kirk.trust("agent:extractor", 0.0)
        unmoved = await kirk.get(statement.belief_id)
        assert unmoved is not None
        assert unmoved.confidence == before.confidence
        await kirk.trust("agent:spock", 0.0)
        silenced = await kirk.get(statement.belief_id)
        assert silenced is not None
        assert silenced.confidence == pytest.approx(0.5)

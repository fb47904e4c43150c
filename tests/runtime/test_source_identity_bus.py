"""Sources belong to someone (issue 23), over a real nats-server, through the SDK as
each agent writes: twenty sources one agent invented do not outvote an honest source
before or after ``assess_sources``; an agent cannot set another's trust (the verdict
``unauthorized`` comes back to it); one agent cannot fill a slot."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.actors.belief_model import rivals
from worldline.actors.belief_model.text import answer_id
from worldline.protocols.world import Authority, WorldDecl, WorldInfo
from worldline.sdk.batch import AddItem, EvidenceItem
from worldline.sdk.errors import Rejected

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.sdk.client import World

pytestmark = pytest.mark.nats

QUESTIONS = 12


def cite(world: World, q: int, text: str, source: str) -> EvidenceItem:
    return EvidenceItem(
        belief_id=answer_id(world.world, f"q{q}", text),
        direction="supports",
        kind="citation",
        source=source,
    )


async def leads(world: World) -> int:
    """How many questions the true answer leads."""
    count = 0
    for q in range(QUESTIONS):
        true = await world.get(answer_id(world.world, f"q{q}", f"Tolkien{q}"))
        wrong = await world.get(answer_id(world.world, f"q{q}", f"Lewis{q}"))
        assert true is not None
        assert wrong is not None
        count += (true.confidence or 0.0) > (wrong.confidence or 0.0)
    return count


@pytest.mark.timeout(180)
async def test_invented_sources_count_as_their_agent_through_the_bus(
    nats_url: str, tmp_path: Path
) -> None:
    name = unique_world("sources")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        contextlib.AsyncExitStack() as stack,
    ):
        agents = {
            agent: await stack.enter_async_context(
                worldline.connect(nats_url, world=name, agent=agent, request_timeout=20)
            )
            for agent in ("henry", "ada", "bob", "cy", "dan", "mallory")
        }
        henry = agents["henry"]
        await henry.declare(
            WorldDecl(
                world=WorldInfo(id=name),
                authority=Authority(admins=["henry"]),
                sources={"sec-filing": ["ada"]},
            )
        )
        adds = [
            AddItem(text=f"{who}{q}", slot=f"q{q}")
            for q in range(QUESTIONS)
            for who in ("Tolkien", "Lewis")
        ]
        assert {r.outcome for r in await henry.load(adds)} == {"applied"}
        ada = agents["ada"]
        honest = [cite(ada, q, f"Tolkien{q}", "sec-filing") for q in range(12)]
        assert {r.outcome for r in await ada.load(honest)} == {"applied"}
        for n, helper in enumerate(("bob", "cy", "dan")):
            world = agents[helper]
            notes = [
                cite(world, q, f"Tolkien{q}", f"{helper}-notes")
                for q in range(QUESTIONS)
                if (q + n) % 4
            ]
            assert {r.outcome for r in await world.load(notes)} == {"applied"}
        mallory = agents["mallory"]
        wires = [
            cite(mallory, q, f"Lewis{q}", f"wire-{i}")
            for q in range(QUESTIONS)
            for i in range(20)
        ]
        assert {r.outcome for r in await mallory.load(wires)} == {"applied"}
        assert await leads(henry) == QUESTIONS  # twenty names, one voice
        await henry.assess_sources()
        assert await leads(henry) == QUESTIONS
        listed = {s.source: s for s in (await henry.sources(limit=50)).sources}
        assert "wire-0" not in listed  # no voice of its own
        assert listed["agent:mallory"].weight < 0.2
        assert listed["sec-filing"].weight > 1.0
        # The trace still names the source and who reported it.
        trace = await henry.trace(answer_id(name, "q0", "Lewis0"))
        named = {(s.evidence.source, s.evidence.author) for s in trace.steps}
        assert ("wire-0", "mallory") in named
        assert {s.evidence.voice for s in trace.steps} == {"agent:mallory"}


@pytest.mark.timeout(120)
async def test_trust_needs_authority_and_a_slot_holds_a_share_per_agent(
    nats_url: str, tmp_path: Path
) -> None:
    name = unique_world("authority")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=name, agent="scotty") as scotty,
        worldline.connect(nats_url, world=name, agent="spock") as spock,
        worldline.connect(nats_url, world=name, agent="operator") as operator,
    ):
        belief = await scotty.add("The coolant loop holds pressure.", id="b1")
        await scotty.evidence(
            belief.id, direction="supports", kind="measurement", source="agent:scotty"
        )
        held = await scotty.get(belief.id)
        assert held is not None
        for source, value in (("agent:scotty", 0.0), ("agent:spock", 5.0)):
            with pytest.raises(Rejected) as refused:
                await spock.trust(source, value)
            assert refused.value.code == "unauthorized"
        unmoved = await scotty.get(belief.id)
        assert unmoved is not None
        assert unmoved.confidence == held.confidence
        await spock.trust("agent:spock", 0.5)  # lowering itself is its right
        await operator.trust("agent:scotty", 0.5)  # the operator may set any
        # One agent holds at most its share of a slot; the true answer still fits.
        junk = [
            AddItem(text=f"Junk answer {n}", slot="who wrote it")
            for n in range(rivals.MAX_AUTHOR_ANSWERS + 1)
        ]
        loaded = await spock.load(junk)
        outcomes = [(r.outcome, r.code) for r in loaded]
        assert outcomes.count(("applied", "")) == rivals.MAX_AUTHOR_ANSWERS
        assert outcomes[-1] == ("rejected", "full")
        truth = await scotty.add("Tolkien", slot="who wrote it")
        assert truth.slot == "who wrote it"

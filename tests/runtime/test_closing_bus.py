"""No single agent retracts its way through the shared world (issue 23), over a real
nats-server, through the SDK as each agent writes: spock cannot retract scotty's
measured claim nor the true answer of a question another agent added (``Rejected``,
code ``unauthorized``, read through ``op_status``; the belief, its posterior and the
slot stay as they were); the author and an admin can; any agent the declaration
names resolves a gap, a stranger cannot."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.protocols.world import Authority, TrustRules, WorldDecl, WorldInfo
from worldline.sdk.errors import Rejected

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.nats

AGENTS = ("henry", "scotty", "spock", "ada", "book", "mallory", "operator")


@pytest.mark.timeout(120)
async def test_only_the_author_an_admin_or_a_grant_closes_a_belief(
    nats_url: str, tmp_path: Path
) -> None:
    name = unique_world("closing")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        contextlib.AsyncExitStack() as stack,
    ):
        w = {
            agent: await stack.enter_async_context(
                worldline.connect(nats_url, world=name, agent=agent, request_timeout=20)
            )
            for agent in AGENTS
        }
        await w["henry"].declare(
            WorldDecl(
                world=WorldInfo(id=name),
                authority=Authority(admins=["henry"]),
                sources={"lab": ["scotty", "spock", "ada"]},
                trust=TrustRules(close=["book"]),
            )
        )
        scotty, spock = w["scotty"], w["spock"]
        claim = await scotty.add("The coolant loop holds pressure.", id="b-loop")
        await scotty.evidence(
            claim.id, direction="supports", kind="measurement", source="agent:scotty"
        )
        held = await scotty.get(claim.id)
        assert held is not None

        # spock poisons nothing: not scotty's claim...
        with pytest.raises(Rejected) as refused:
            await spock.retract(claim.id, "spock says so")
        assert refused.value.code == "unauthorized"
        assert "spock may not retract a claim scotty added" in refused.value.reason
        still = await scotty.get(claim.id)
        assert still is not None
        assert (still.status, still.confidence) == ("active", held.confidence)

        # ...nor the true answer of a question ada added.
        truth = await w["ada"].add("Tolkien", slot="who wrote The Hobbit")
        rival = await spock.add("Lewis", slot="who wrote The Hobbit")
        with pytest.raises(Rejected) as refused:
            await spock.retract(truth.id, "freeing the slot")
        assert refused.value.code == "unauthorized"
        answer = await spock.get(truth.id)
        assert answer is not None
        assert (answer.status, answer.slot) == ("active", "who wrote The Hobbit")

        # Its author, an admin, a [trust] close grant and the operator may.
        assert (await spock.retract(rival.id, "mine, wrong")).status == "retracted"
        assert (await w["henry"].retract(truth.id, "admin")).status == "retracted"
        assert (await scotty.retract(claim.id, "re-measured")).status == "retracted"
        other = await spock.add("Warp core output is nominal.", id="b-warp")
        assert (await w["book"].retract(other.id, "granted")).status == "retracted"
        last = await spock.add("Shields hold at 80%.", id="b-shields")
        assert (await w["operator"].retract(last.id, "operator")).status == "retracted"

        # A gap is a question: any agent the declaration names records its answer.
        gap = await scotty.add("Which relay failed?", type="gap", id="g-relay")
        with pytest.raises(Rejected) as refused:
            await w["mallory"].resolve(gap.id, "named nowhere")
        assert refused.value.code == "unauthorized"
        assert (await spock.resolve(gap.id, "relay 4")).status == "resolved"


@pytest.mark.timeout(90)
async def test_in_an_undeclared_world_the_author_and_the_operator_close(
    nats_url: str, tmp_path: Path
) -> None:
    name = unique_world("closing-open")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=name, agent="scotty") as scotty,
        worldline.connect(nats_url, world=name, agent="spock") as spock,
        worldline.connect(nats_url, world=name, agent="operator") as operator,
    ):
        claim = await scotty.add("The coolant loop holds pressure.", id="b-loop")
        gap = await scotty.add("Which relay failed?", type="gap", id="g-relay")
        for close in (spock.retract(claim.id), spock.resolve(gap.id)):
            with pytest.raises(Rejected) as refused:
                await close
            assert refused.value.code == "unauthorized"
            assert "no declaration" in refused.value.reason
        assert (await scotty.resolve(gap.id)).status == "resolved"
        assert (await operator.retract(claim.id)).status == "retracted"

"""No single agent re-wires another's belief edges (issue 23), over a real nats-server
and the five actors, through the SDK as each agent writes: spock cannot remove scotty's
``depends_on`` edge (which would make the claim resting on a weak assumption look
solid) nor re-weigh it, nor re-type the ``contradicts`` edge scotty linked
(``Rejected``, code ``unauthorized``; the edge, its posterior and the dependent claim's
effective confidence stay as they were); he may link an edge of his own and add
evidence to scotty's. The author, an admin, a ``[trust] close`` agent and the operator
may change it; in an undeclared world only the author and the operator."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec
import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.protocols.beliefs import BeliefEdge
from worldline.protocols.messages import LinkBeliefs
from worldline.protocols.world import Authority, TrustRules, WorldDecl, WorldInfo
from worldline.sdk.crew import new_id
from worldline.sdk.errors import Rejected

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.sdk.client import World

pytestmark = pytest.mark.nats

AGENTS = ("henry", "scotty", "spock", "book", "operator")


async def unlink(world: World, edge: BeliefEdge) -> int:
    """``edge`` removed, as ``world``'s agent: a ``LinkBeliefs`` with ``removed``
    (the SDK has no verb for it yet, so the op is submitted as a client would)."""
    gone = msgspec.structs.replace(edge, removed=True)
    op = LinkBeliefs(
        op_id=new_id("op"), author=world.agent, at=datetime.now(UTC), edge=gone
    )
    return await world._submit(op)


async def edge_of(world: World, edge_id: str) -> BeliefEdge | None:
    """The edge as a read shows it (None: not shown, removed)."""
    shown = [e for e in (await world.read()).belief_edges if e.id == edge_id]
    return shown[0] if shown else None


@pytest.mark.timeout(120)
async def test_only_the_author_an_admin_or_a_grant_changes_an_edge(
    nats_url: str, tmp_path: Path
) -> None:
    name = unique_world("edge-authority")
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
                sources={"lab": ["scotty", "spock"]},
                trust=TrustRules(close=["book"]),
            )
        )
        scotty, spock = w["scotty"], w["spock"]
        await scotty.add("The coolant pump holds at full load.", confidence=0.2, id="a")
        await scotty.add("The reactor can run at 110%.", confidence=0.9, id="c")
        await scotty.add("The reactor must stay under 100%.", confidence=0.6, id="b")
        await scotty.relate("c", "a", type="depends_on", confidence=0.9, id="e1")
        await scotty.relate("c", "b", type="contradicts", confidence=0.8, id="e2")
        fragile = await scotty.get("c")
        assert fragile is not None
        assert fragile.effective_confidence is not None
        held = await edge_of(scotty, "e1")

        # spock re-wires nothing: not removing the depends_on edge...
        dep = BeliefEdge(id="e1", type="depends_on", source="c", target="a")
        with pytest.raises(Rejected) as refused:
            await unlink(spock, dep)
        assert refused.value.code == "unauthorized"
        assert "spock may not change or remove belief edge e1, which scotty linked" in (
            refused.value.reason
        )
        # ...nor re-weighing it, nor re-typing the contradicts edge.
        for attack in (
            spock.relate("c", "a", type="depends_on", confidence=0.01, id="e1"),
            spock.relate("c", "b", type="supports", confidence=0.9, id="e2"),
        ):
            with pytest.raises(Rejected) as refused:
                await attack
            assert refused.value.code == "unauthorized"
        assert await edge_of(scotty, "e1") == held
        retyped = await edge_of(scotty, "e2")
        assert retyped is not None
        assert retyped.type == "contradicts"
        still = await scotty.get("c")
        assert still is not None
        assert still.effective_confidence == fragile.effective_confidence

        # He may link his own edge and weigh in on scotty's with evidence.
        await spock.relate("c", "a", type="supports", confidence=0.5, id="e3")
        weighed = await spock.edge_evidence(
            "e1", direction="refutes", kind="measurement", source="lab"
        )
        assert weighed.evidence_count == 1

        # The author, an admin, a [trust] close agent and the operator may.
        await scotty.relate("c", "a", type="depends_on", confidence=0.7, id="e1")
        reweighed = await edge_of(scotty, "e1")
        assert reweighed is not None
        assert reweighed.stated == 0.7
        await w["henry"].relate("c", "a", type="depends_on", confidence=0.6, id="e1")
        await w["book"].relate("c", "b", type="contradicts", confidence=0.5, id="e2")
        await w["operator"].relate("c", "a", type="supports", confidence=0.4, id="e3")
        await unlink(scotty, dep)
        assert await edge_of(scotty, "e1") is None  # removed: no longer read


@pytest.mark.timeout(90)
async def test_in_an_undeclared_world_the_author_and_the_operator_change_an_edge(
    nats_url: str, tmp_path: Path
) -> None:
    name = unique_world("edge-authority-open")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=name, agent="scotty") as scotty,
        worldline.connect(nats_url, world=name, agent="spock") as spock,
        worldline.connect(nats_url, world=name, agent="operator") as operator,
    ):
        await scotty.add("The coolant pump holds at full load.", id="a")
        await scotty.add("The reactor can run at 110%.", id="c")
        await scotty.relate("c", "a", type="depends_on", confidence=0.9, id="e1")
        with pytest.raises(Rejected) as refused:
            await spock.relate("c", "a", type="depends_on", confidence=0.1, id="e1")
        assert refused.value.code == "unauthorized"
        assert "no declaration" in refused.value.reason
        await operator.relate("c", "a", type="depends_on", confidence=0.5, id="e1")
        await unlink(scotty, BeliefEdge(id="e1", type="depends_on", source="c",
                                        target="a"))  # fmt: skip
        assert await edge_of(scotty, "e1") is None

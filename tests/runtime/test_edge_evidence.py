"""Belief edges with evidence of their own, over a real nats-server and the five
actors: evidence refuting a ``depends_on`` edge lowers the edge's posterior, which
weakens the drop it causes in the dependent claim's effective confidence; the edge's
trace shows the step; trust applies; evidence for an unknown edge is refused to the
caller (docs/belief-math.md, "Edges")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.sdk.errors import Rejected

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.nats


async def test_edge_evidence_moves_the_edge_and_what_rests_on_it(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="spock") as spock,
        worldline.connect(nats_url, world=world, agent="operator") as operator,
    ):
        await spock.add("The launch window is open.", confidence=0.2, id="a")
        await spock.add("We launch on Friday.", confidence=0.9, id="c")
        await spock.relate("c", "a", type="depends_on", confidence=0.8, id="e1")
        before = await spock.get("c")
        assert before is not None
        assert before.effective_confidence is not None
        edge = await spock.edge_evidence(
            "e1", direction="refutes", kind="measurement", source="flight-dynamics"
        )
        assert edge.stated == 0.8
        assert edge.evidence_count == 1
        assert edge.confidence < 0.8
        after = await spock.get("c")
        assert after is not None
        assert after.effective_confidence is not None
        assert after.effective_confidence > before.effective_confidence
        assert after.confidence == before.confidence  # c's own posterior: untouched
        trace = await spock.trace_edge("e1")
        assert [s.evidence.source for s in trace.steps] == ["flight-dynamics"]
        assert trace.steps[0].before == pytest.approx(0.8)
        assert trace.steps[0].after == pytest.approx(edge.confidence)
        read = await spock.read()
        (shown,) = [e for e in read.belief_edges if e.id == "e1"]
        assert shown.confidence == edge.confidence
        await operator.trust("flight-dynamics", 0.0)  # the operator may set any
        # The trust op's verdict follows the edge posteriors it caused; the read
        # replica may apply them a moment later, so wait briefly for it.
        retrusted = edge
        with anyio.move_on_after(5):
            while retrusted.confidence != pytest.approx(0.8):
                await anyio.sleep(0.02)
                retrusted = (await spock.trace_edge("e1")).edges[0]
        assert retrusted.confidence == pytest.approx(0.8)
        assert retrusted.evidence_count == 1
        with pytest.raises(Rejected, match="unknown_edge") as refused:
            await spock.edge_evidence(
                "e-missing", direction="supports", kind="citation", source="x"
            )
        assert refused.value.code == "unknown_edge"

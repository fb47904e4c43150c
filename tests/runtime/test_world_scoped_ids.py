"""Idempotency ids are scoped to their world (issue 14, item 4): JetStream's duplicate
window spans a whole stream, every world, so an id that leaves the world out makes
the same content sent to a second world within two minutes a silent duplicate there.
The observation id (also its ``Nats-Msg-Id``) hashed agent, source, role, kind and
text only: the same artifact observed into two worlds reached only the first, while
``observe`` returned as if it had been recorded."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

import worldline
from tests.support import running, unique_world
from worldline.actors.registry import build
from worldline.sdk.beliefs import observation_id

if TYPE_CHECKING:
    from pathlib import Path

ARTIFACT = (
    "The billing service retries failed charges three times. "
    "Customers on the annual plan churn less than monthly ones."
)


def test_the_observation_id_names_the_world_and_is_stable() -> None:
    parts = ("ada", "notes.md", "artifact", "text", ARTIFACT)
    here = observation_id("world-a", *parts)
    assert here == observation_id("world-a", *parts)  # a repeat is still a repeat
    assert here != observation_id("world-b", *parts)
    assert here.startswith("obs-")
    assert len(here) == len("obs-") + 24
    # The separator keeps fields apart: moving text between world and agent is
    # another id.
    assert observation_id("a", "bc", "", "artifact", "text", "x") != observation_id(
        "ab", "c", "", "artifact", "text", "x"
    )


@pytest.mark.nats
async def test_the_same_artifact_observed_into_two_worlds_reaches_both(
    nats_url: str, tmp_path: Path
) -> None:
    first, second = unique_world("obs-a"), unique_world("obs-b")
    specs = [build(n) for n in ("extractor", "fusion", "materializer", "projector")]
    async with (
        running(specs, url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=first, agent="ada") as a,
        worldline.connect(nats_url, world=second, agent="ada") as b,
    ):
        ids = [await a.observe(ARTIFACT), await b.observe(ARTIFACT)]  # within 120 s
        with anyio.fail_after(15):
            while True:
                found = [await a.list(), await b.list()]
                if all(len(beliefs) >= 2 for beliefs in found):
                    break
                await anyio.sleep(0.05)
        assert ids[0] != ids[1]
        assert await a.observe(ARTIFACT) == ids[0]  # same world: still idempotent
        texts = [sorted(belief.text for belief in beliefs) for beliefs in found]
        assert texts[0] == texts[1]
        assert len(texts[0]) == 2
        assert {belief.id for belief in found[0]}.isdisjoint(
            belief.id for belief in found[1]
        )  # belief ids were already world-scoped

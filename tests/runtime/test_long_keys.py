"""Text of any length goes through ``add`` end to end: no index key the projector
asks LMDB to store can exceed its 511-byte limit (one 480-character URL token used to
make the projector retry its batch forever, and every later ``add``, in any world,
time out)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import worldline
from tests.support import all_actors, running, unique_world

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.nats


@pytest.mark.parametrize("length", [480, 5000])
async def test_a_sentence_with_a_huge_token_is_added_and_nothing_stalls(
    nats_url: str, tmp_path: Path, length: int
) -> None:
    url = "https://example.com/" + "a" * length
    text = f"The spec lives at {url} and is current."
    one, two = unique_world(), unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=one, agent="ada", request_timeout=5) as a,
        worldline.connect(nats_url, world=two, agent="ada", request_timeout=5) as b,
    ):
        poison = await a.add(text, confidence=0.7)
        assert poison.text == text
        # The projector kept going: later adds, in this world and another, apply.
        after = await a.add("The spec is reviewed weekly.")
        elsewhere = await b.add("Another world is unaffected.")
        assert await a.get(poison.id) == poison
        assert await a.get(after.id) == after
        assert await b.get(elsewhere.id) == elsewhere
        view = await a.before(f"check {url[:4000]}")
        assert poison.id in {leaf.id for leaf in view.current}

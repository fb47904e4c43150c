"""The vertical slice over a real nats-server: SDK -> fusion -> materializer ->
projector."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio
import msgspec
import nats
import pytest
from nats.js import api

import worldline
from tests.support import all_actors, running, unique_world
from worldline.actors.registry import build
from worldline.protocols.messages import DeadLetter, Observe, encode
from worldline.protocols.subjects import DLQ, dlq, obs, ops

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.nats

_LETTER = msgspec.msgpack.Decoder(DeadLetter)
AT = datetime(2026, 1, 1, tzinfo=UTC)


async def test_add_get_list_round_trip(nats_url: str, tmp_path: Path) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
        worldline.connect(nats_url, world=world, agent="spock") as spock,
    ):
        added = await ada.add(
            "Market size is $4.2B", confidence=0.85, type="assumption"
        )
        assert added.confidence == pytest.approx(0.85)
        assert added.evidence_weight == 0.0
        assert added.author == "ada"
        assert added.version > 0  # the OPS sequence of the op that created it
        # Another agent reads the same canonical answer.
        assert await spock.get(added.id) == added
        goal = await spock.add("Close three pilots", type="goal")
        assert goal.confidence is None
        assert goal.version > added.version
        listed = await spock.list()
        assert [b.id for b in listed] == [added.id, goal.id]
        assert [b.id for b in await spock.list(type="goal")] == [goal.id]
        assert await spock.get("b-missing") is None


async def test_worlds_are_isolated(nats_url: str, tmp_path: Path) -> None:
    one, two = unique_world(), unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=one, agent="ada") as a,
        worldline.connect(nats_url, world=two, agent="ada") as b,
    ):
        belief = await a.add("Only in world one")
        assert await b.get(belief.id) is None
        assert await b.list() == []


async def test_observe_extracts_beliefs(nats_url: str, tmp_path: Path) -> None:
    world = unique_world()
    text = "- Auth is enforced at the middleware.\n- Export bypasses it. It is old.\n"
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="geordi") as geordi,
    ):
        await geordi.observe(text, source="audit.md")
        beliefs = await _eventually(geordi, 3)
    assert sorted(b.text for b in beliefs) == [
        "Auth is enforced at the middleware.",
        "Export bypasses it.",
        "It is old.",
    ]
    assert {b.author for b in beliefs} == {"extractor"}


async def _eventually(world: worldline.World, n: int) -> list[worldline.Belief]:
    """Poll ``list`` until it holds ``n`` beliefs (extraction is asynchronous)."""
    with anyio.fail_after(10):
        while True:
            beliefs = await world.list()
            if len(beliefs) >= n:
                return beliefs
            await anyio.sleep(0.05)


async def _dead_letters(
    nats_url: str, world: str, actor: str, n: int
) -> list[DeadLetter]:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe(dlq(world, actor), stream=DLQ.name)
        letters: list[DeadLetter] = []
        with anyio.fail_after(10):
            while len(letters) < n:
                try:
                    msgs = await sub.fetch(n - len(letters), timeout=0.5)
                except TimeoutError:
                    continue
                for msg in msgs:
                    letters.append(_LETTER.decode(msg.data))
                    await msg.ack()
        return letters
    finally:
        await nc.close()


async def test_malformed_input_is_dead_lettered_and_actor_keeps_serving(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    garbage = b"\xc1 not msgpack"
    wrong_tag = msgspec.msgpack.encode({"kind": "op.nonsense.v9", "op_id": "x"})
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    async with (
        running([build("fusion")], url=nats_url, data=tmp_path),
        worldline.connect(
            nats_url, world=world, agent="mallory", request_timeout=5
        ) as w,
    ):
        for i, payload in enumerate((garbage, wrong_tag)):
            await js.publish(
                ops(world, "mallory"), payload, headers={api.Header.MSG_ID: f"m{i}"}
            )
        letters = await _dead_letters(nats_url, world, "fusion", 2)
        # ...and the same fusion actor still serves: this add goes all the way through
        # fusion, so materializer and projector are started for it.
        async with running(
            [build("materializer"), build("projector")],
            url=nats_url,
            data=tmp_path,
        ):
            belief = await w.add("Still serving")
            assert belief.text == "Still serving"
    await nc.close()
    assert [letter.payload for letter in letters] == [garbage, wrong_tag]
    assert letters[0].reason.startswith("undecodable")
    assert "op.nonsense.v9" in letters[1].reason
    assert all(letter.actor == "fusion" for letter in letters)
    assert letters[0].stream_seq < letters[1].stream_seq


async def test_forged_author_is_rejected_with_reason(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with running([build("extractor")], url=nats_url, data=tmp_path):
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        forged = Observe(obs_id="o-forged", author="ada", at=AT, text="x")
        await js.publish(obs(world, "mallory"), encode(forged))
        await nc.close()
        (letter,) = await _dead_letters(nats_url, world, "extractor", 1)
    assert letter.reason.startswith("invalid")
    assert "mallory" in letter.reason
    assert letter.actor == "extractor"

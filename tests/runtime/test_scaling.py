"""Scaled out, worldline answers as it does on one instance of each actor: two fusion
shards, two projector replicas (a queue group) and two materializer partitions give
the same beliefs, the same whole-world read, the same worldview bytes and the same
state hashes as one fusion, one projector and one materializer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import anyio
import msgspec
import nats
import pytest
from nats.js import api

import worldline
from tests.support import running
from worldline.actors.registry import build
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.protocols.messages import encode
from worldline.protocols.subjects import partition_of

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.actors.runtime.spec import ActorSpec
    from worldline.sdk.export import ExportRecord

pytestmark = pytest.mark.nats

BASE = datetime(2100, 1, 1, tzinfo=UTC)  # after the beliefs are created
LATER = BASE + timedelta(days=30)
WORLDS = ("alpha", "beta", "gamma")

Answers = dict[str, bytes]
Log = list["ExportRecord"]


def single() -> list[ActorSpec]:
    return [build(n) for n in ("extractor", "fusion", "materializer", "projector")]


def scaled() -> list[ActorSpec]:
    return [
        build("extractor"),
        *(build("fusion", shard=f"{i}/2") for i in range(2)),
        *(build("materializer", partition=f"{i}/2") for i in range(2)),
        *(build("projector", replica=name) for name in ("a", "b")),
    ]


async def _written(specs: list[ActorSpec], tmp_path: Path) -> tuple[Answers, Log]:
    """Write beliefs and evidence into each world through the SDK; return every
    answer and the whole op log, in log order."""
    answers: Answers = {}
    log: Log = []
    with EmbeddedNats(tmp_path / "nats") as server:
        async with running(specs, url=server.url, data=tmp_path / "actors"):
            for name in WORLDS:
                async with worldline.connect(server.url, world=name) as world:
                    await _write(world)
            for name in WORLDS:
                async with worldline.connect(server.url, world=name) as world:
                    answers.update(await _answers(world))
                    log += [record async for record in world.export()]
    return answers, sorted(log, key=lambda record: record.seq)


async def _replayed(
    specs: list[ActorSpec], tmp_path: Path, log: Log, want: Answers
) -> Answers:
    """Publish the same log, op for op, to a fresh server running ``specs``; return
    the answers once they stop changing towards ``want`` (or after 30 s)."""
    with EmbeddedNats(tmp_path / "nats") as server:
        async with running(specs, url=server.url, data=tmp_path / "actors"):
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            for record in log:
                ack = await js.publish(
                    record.subject,
                    encode(record.op),
                    headers={api.Header.MSG_ID: record.op.op_id},
                )
                assert ack.seq == record.seq  # the same log, sequence for sequence
            await nc.close()
            answers: Answers = {}
            with anyio.move_on_after(30):
                while answers != want:
                    await anyio.sleep(0.2)
                    for name in WORLDS:
                        async with worldline.connect(server.url, world=name) as world:
                            answers.update(await _answers(world))
    return answers


async def _write(world: worldline.World) -> None:
    ids = []
    for i in range(8):
        added = await world.add(f"{world.world} statement {i} about the pilot",
                                id=f"b-{i}", confidence=0.2 + 0.08 * i)  # fmt: skip
        ids.append(added.id)
    for i, belief_id in enumerate(ids):
        for j in range(3):
            await world.evidence(belief_id, id=f"ev-{i}-{j}", source=f"src-{j}",
                                 direction="supports" if (i + j) % 3 else "refutes",
                                 kind="measurement" if j == 0 else "citation",
                                 observed_at=BASE)  # fmt: skip
    await world.relate(ids[0], ids[1], type="depends_on")


async def _answers(world: worldline.World) -> Answers:
    await world.sync()
    out: Answers = {}
    enc = msgspec.json.encode
    for i in range(8):
        got = await world.get(f"b-{i}", at=LATER)
        out[f"{world.world}/get/b-{i}"] = enc(got)
    out[f"{world.world}/read"] = enc(await world.read(at=LATER))
    # Ask several times: the projector replicas share a queue group, so both answer.
    views = {enc(await world.before("renew the pilot", at=LATER)) for _ in range(8)}
    assert len(views) == 1, "two replicas answered differently"
    out[f"{world.world}/before"] = views.pop()
    out[f"{world.world}/state_hash"] = (await world.state_hash()).hash.encode()
    return out


async def test_shards_replicas_and_partitions_answer_as_one_of_each(
    tmp_path: Path,
) -> None:
    assert {partition_of(w, 2) for w in WORLDS} == {0, 1}  # both partitions write
    one, log = await _written(single(), tmp_path / "one")
    assert len(one) == len(WORLDS) * 11
    assert len(log) == len(WORLDS) * (8 + 24 + 1)
    again = await _replayed(single(), tmp_path / "again", log, one)
    assert again == one  # the comparison itself is sound: one of each, same log
    many = await _replayed(scaled(), tmp_path / "many", log, one)
    differ = [key for key in one if one[key] != many.get(key)]
    assert not differ, differ

"""An agent cannot silently suppress another agent's observation (issue 23, F11/F12,
found by ``bench/attack.py``).

JetStream de-duplicates by ``Nats-Msg-Id`` across a whole stream, whatever the
subject, and every id involved could be computed from the artifact:

- F11: the observation's Msg-Id was its content-derived ``obs_id``; spock published
  ``b"junk"`` with it on his own ``obs`` subject, and zora's ``observe`` within 120 s
  got a duplicate PubAck: told recorded, nothing extracted.
- F12: spock's valid ``Observe`` naming zora's ``obs_id`` made the extractor publish
  statement op ids (``sha256(world, obs_id, index)``) that zora's statements then
  repeated: dropped as duplicates.
- The extractor's statement op ids (also their Msg-Ids in ``WL_OPS``) could be
  pre-empted by junk with that id on the agent's own ``ops`` subject.

Now the SDK's observation travels under a random Msg-Id, the extractor's op ids hash
the observing agent too, and a duplicate PubAck in a stream agents write is checked
against the message stored there (``worldline/actors/runtime/preempt.py``).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio
import nats
import nats.errors
import pytest
from nats.js import api

import worldline
from tests.support import running, unique_world
from worldline.actors.belief_model.text import belief_id
from worldline.actors.extractor.core import handle as extract
from worldline.actors.registry import build
from worldline.actors.runtime.declare import ensure_streams
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.metrics import ActorMetrics, bind_metrics
from worldline.actors.runtime.outbox import OutboxItem
from worldline.actors.runtime.preempt import MAX_ROUNDS, rescue_id
from worldline.actors.runtime.publish import publish_all
from worldline.actors.runtime.spec import Context
from worldline.protocols.messages import Observe, encode
from worldline.protocols.subjects import OBS, OPS, STREAMS, obs, ops
from worldline.sdk.beliefs import observation_id

if TYPE_CHECKING:
    from pathlib import Path

    from nats.aio.client import Client as NATS
    from nats.js import JetStreamContext

    from worldline.sdk.client import World

pytestmark = pytest.mark.nats

AT = datetime(2026, 1, 1, tzinfo=UTC)
S1 = "The audit log keeps 92 days of entries."
S2 = "The archive job runs nightly at 3."
ARTIFACT = f"{S1} {S2}"
ACTORS = ("extractor", "fusion", "materializer", "projector")


def zoras_id(world: str) -> str:
    """The observation id zora's ``observe(ARTIFACT)`` computes: anyone can."""
    return observation_id(world, "zora", "", "artifact", "text", ARTIFACT)


def statement_ids(world: str, agent: str, obs_id: str, text: str) -> list[str]:
    """The op ids (also Msg-Ids) the extractor gives ``agent``'s observation."""
    observation = Observe(obs_id=obs_id, author=agent, at=AT, text=text)
    ctx = Context(world=world, author=agent, subject=obs(world, agent), seq=1, now=AT)
    step = extract(MemoryState(), observation, ctx)
    return [out.msg_id for out in step.out]


async def read_back(w: World, texts: list[str], wait: float = 20.0) -> bool:
    """Whether every belief ``texts`` name becomes readable within ``wait``."""
    ids = [belief_id(w.world, text) for text in texts]
    with anyio.move_on_after(wait):
        while True:
            if all([await w.get(i) is not None for i in ids]):
                return True
            await anyio.sleep(0.05)
    return False


async def stored(js: JetStreamContext, stream: str, subject: str) -> int:
    info = await js.stream_info(stream, subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


async def test_f11_junk_under_zoras_observation_id_suppresses_nothing(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("f11")
    async with (
        running([build(n) for n in ACTORS], url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="zora") as zora,
    ):
        spock = await nats.connect(nats_url)
        ack = await spock.jetstream().publish(
            obs(world, "spock"),
            b"junk",
            headers={api.Header.MSG_ID: zoras_id(world)},
        )
        await spock.close()
        assert not ack.duplicate
        assert await zora.observe(ARTIFACT) == zoras_id(world)  # the id stays
        assert await read_back(zora, [S1, S2])


async def test_f12_spocks_observe_naming_zoras_id_takes_none_of_her_statements(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("f12")
    filler = "Filler from spock. Nothing to see here."
    async with (
        running([build(n) for n in ACTORS], url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="zora") as zora,
    ):
        spock = await nats.connect(nats_url)
        forged = Observe(obs_id=zoras_id(world), author="spock", at=AT, text=filler)
        await spock.jetstream().publish(obs(world, "spock"), encode(forged))
        await spock.close()
        # His statements are extracted (the observation is his own) first ...
        assert await read_back(zora, ["Filler from spock.", "Nothing to see here."])
        assert await zora.observe(ARTIFACT) == zoras_id(world)
        # ... and take none of hers.
        assert await read_back(zora, [S1, S2])
        assert set(statement_ids(world, "spock", zoras_id(world), filler)).isdisjoint(
            statement_ids(world, "zora", zoras_id(world), ARTIFACT)
        )


async def test_junk_under_the_extractors_statement_id_suppresses_nothing(
    nats_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    world = unique_world("pre")
    caplog.set_level(logging.WARNING, logger="worldline.actor")
    wanted = statement_ids(world, "zora", zoras_id(world), ARTIFACT)
    async with (
        running([build(n) for n in ACTORS], url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="zora") as zora,
    ):
        spock = await nats.connect(nats_url)
        js = spock.jetstream()
        for msg_id in wanted:
            await js.publish(
                ops(world, "spock"), b"junk", headers={api.Header.MSG_ID: msg_id}
            )
        await zora.observe(ARTIFACT)
        assert await read_back(zora, [S1, S2])
        assert await stored(js, OPS.name, ops(world, "extractor")) == 2
        await spock.close()
    lines = [r.getMessage() for r in caplog.records]
    for msg_id in wanted:
        assert any(f"output {msg_id} " in line for line in lines), msg_id


async def test_a_repeat_observation_is_still_one(nats_url: str, tmp_path: Path) -> None:
    """The observation's Msg-Id is random now; the effect stays idempotent: the
    repeat's statements carry the same op ids and are de-duplicated in WL_OPS."""
    world = unique_world("again")
    async with (
        running([build(n) for n in ACTORS], url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="zora") as zora,
    ):
        first = await zora.observe(ARTIFACT)
        assert await read_back(zora, [S1, S2])
        assert await zora.observe(ARTIFACT) == first
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        with anyio.fail_after(15):  # the work queue is empty once both are handled
            while True:
                if not (await js.stream_info(OBS.name)).state.messages:
                    break
                await anyio.sleep(0.05)
        assert await stored(js, OPS.name, ops(world, "extractor")) == 2
        await nc.close()
        belief = await zora.get(belief_id(world, S1))
        assert belief is not None
        trace = await zora.trace(belief.id)
        assert len(trace.steps) == 1  # one evidence item, not two


# --- the publish path alone ---------------------------------------------------------


def _item(world: str, msg_id: str, payload: bytes = b"ours") -> OutboxItem:
    return OutboxItem(b"k", ops(world, "extractor"), msg_id, payload)


async def _declared(nats_url: str) -> NATS:
    nc = await nats.connect(nats_url)
    await ensure_streams(nc.jetstream(), STREAMS, replicas=1)
    return nc


def _metrics() -> ActorMetrics:
    metrics = ActorMetrics("extractor", "extractor", {}, AT, 0.0)
    bind_metrics(metrics)
    return metrics


async def test_a_genuine_repeat_stays_one_message(nats_url: str) -> None:
    world = unique_world("dup")
    nc = await _declared(nats_url)
    js = nc.jetstream()
    metrics = _metrics()
    for _ in range(3):  # a retry, a redelivered input: same subject, same id
        await publish_all(js, [_item(world, "op-1")])
    assert await stored(js, OPS.name, ops(world, "extractor")) == 1
    assert metrics.preempted == 0
    await nc.close()


async def test_a_preempted_output_is_published_again_once(nats_url: str) -> None:
    world = unique_world("forged")
    nc = await _declared(nats_url)
    js = nc.jetstream()
    metrics = _metrics()
    junk = await js.publish(
        ops(world, "spock"), b"junk", headers={api.Header.MSG_ID: "op-1"}
    )
    await publish_all(js, [_item(world, "op-1")])
    assert await stored(js, OPS.name, ops(world, "extractor")) == 1
    kept = await js.get_msg(OPS.name, subject=ops(world, "extractor"))
    assert kept.data == b"ours"
    assert kept.headers is not None
    assert kept.headers[api.Header.MSG_ID] == rescue_id("op-1", junk.seq)
    assert metrics.preempted == 1
    # The outbox retried after a crash: the same steps find its own copy.
    await publish_all(js, [_item(world, "op-1")])
    assert await stored(js, OPS.name, ops(world, "extractor")) == 1
    assert metrics.preempted == 2  # the original id is still the forger's
    await nc.close()


async def test_a_chain_of_forged_rescue_ids_ends_without_a_msg_id(
    nats_url: str,
) -> None:
    """A forger who learns each sequence it got can pre-empt the rescue ids too;
    after MAX_ROUNDS the output goes without a Msg-Id, which nothing can pre-empt."""
    world = unique_world("chain")
    nc = await _declared(nats_url)
    js = nc.jetstream()
    metrics = _metrics()
    msg_id = "op-1"
    for _ in range(MAX_ROUNDS + 1):
        junk = await js.publish(
            ops(world, "spock"), b"junk", headers={api.Header.MSG_ID: msg_id}
        )
        msg_id = rescue_id("op-1", junk.seq)
    await publish_all(js, [_item(world, "op-1")])
    kept = await js.get_msg(OPS.name, subject=ops(world, "extractor"))
    assert kept.data == b"ours"
    assert api.Header.MSG_ID not in (kept.headers or {})
    assert metrics.preempted == MAX_ROUNDS + 1
    await nc.close()


async def test_an_unreadable_check_takes_the_puback_as_it_says_and_pauses(
    nats_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials written before the extractor's read right: the read times out.
    The output is taken as stored (as before the check existed), and the connection
    skips the check for a while rather than wait out a timeout per statement."""
    world = unique_world("unread")
    nc = await _declared(nats_url)
    js = nc.jetstream()
    metrics = _metrics()
    reads = 0

    async def refused(*_: object, **__: object) -> None:
        nonlocal reads
        reads += 1
        raise nats.errors.TimeoutError

    monkeypatch.setattr(js, "get_msg", refused)
    caplog.set_level(logging.WARNING, logger="worldline.actor")
    for n in range(3):
        await js.publish(
            ops(world, "spock"), b"junk", headers={api.Header.MSG_ID: f"op-{n}"}
        )
    await publish_all(js, [_item(world, f"op-{n}") for n in range(3)])
    assert reads == 1  # then paused
    assert metrics.preempted == 0
    assert await stored(js, OPS.name, ops(world, "extractor")) == 0
    assert any("not checked" in r.getMessage() for r in caplog.records)
    await nc.close()

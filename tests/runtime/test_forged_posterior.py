"""A forged posterior on an open bus (issue 14, item 3), end to end on a real
nats-server running the actors: a ``PosteriorUpdate`` with a huge ``cause_seq``
published straight onto the derived stream (plain, and packed in a batch as fusion
sends them) is dead-lettered with the reason, and real evidence then moves the belief.
On the old code the forgery became the belief's version and every later real
posterior was ignored as older."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import msgspec
import nats
import pytest
from nats.js import api

import worldline
from tests.support import running, unique_world
from worldline.actors.materializer.ops_end import OpsEnd
from worldline.actors.registry import ACTORS, build
from worldline.protocols.messages import (
    DeadLetter,
    PosteriorUpdate,
    encode,
    encode_batch,
)
from worldline.protocols.subjects import BATCH_HEADER, derived, dlq

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.actors.runtime.spec import ActorSpec

pytestmark = pytest.mark.nats

FORGED_SEQ = 10**12


async def test_a_forged_posterior_is_dead_lettered_and_real_evidence_moves_the_belief(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("forge")
    specs: list[ActorSpec] = [build(name) for name in ACTORS]
    (materializer,) = [s for s in specs if s.name == "materializer"]
    ops_end = materializer.inputs[1].prepare_batch
    assert isinstance(ops_end, OpsEnd)
    async with (
        running(specs, url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        seeded = await ada.add("Pilots convert to signed SLAs", confidence=0.5)
        assert seeded.confidence is not None
        nc = await nats.connect(nats_url)
        try:
            letters = await nc.subscribe(dlq(world, "materializer"))
            js = nc.jetstream()
            subject = derived(world, "posterior", "0")
            fake = msgspec.structs.replace(seeded, confidence=0.99, text="forged")
            plain = PosteriorUpdate(belief=fake, cause="op-x", cause_seq=FORGED_SEQ)
            await js.publish(
                subject, encode(plain), headers={api.Header.MSG_ID: "forged-1"}
            )
            packed = PosteriorUpdate(
                belief=fake, cause="op-y", cause_seq=FORGED_SEQ + 1
            )
            await js.publish(
                subject,
                encode_batch([(subject, encode(packed))]),
                headers={api.Header.MSG_ID: "forged-2", BATCH_HEADER: "1"},
            )
            reasons = []
            with anyio.fail_after(10):
                for _ in range(2):
                    msg = await letters.next_msg(timeout=10)
                    letter = msgspec.msgpack.decode(msg.data, type=DeadLetter)
                    reasons.append(letter.reason)
        finally:
            await nc.close()
        assert all("beyond the op log" in r for r in reasons), reasons
        assert f"cause_seq {FORGED_SEQ}," in reasons[0]
        assert f"cause_seq {FORGED_SEQ + 1}," in reasons[1]
        held = await ada.get(seeded.id)
        assert held == seeded  # the forgery changed nothing
        moved = await ada.evidence(
            seeded.id, direction="supports", kind="measurement", source="billing-db"
        )
        assert moved.version > seeded.version
        assert moved.version < FORGED_SEQ
        assert moved.text == seeded.text
        assert moved.confidence is not None
        assert seeded.confidence < moved.confidence < 0.99
        assert await ada.get(seeded.id) == moved
    # Real posteriors are covered by the cached end of the log: the two forgeries
    # cost a lookup each (plus at most one per real batch that outran the cache).
    assert ops_end.lookups >= 2

"""Actors answer a request only on an ``_INBOX.`` reply subject
(``worldline.protocols.subjects.is_reply_subject``, checked in ``serve.py::serve``): a
request naming a stream, bucket or JetStream API subject as its reply would make the
actor publish there with its own rights (a confused deputy)."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

import anyio
import nats.errors
import pytest

from tests.support import running, unique_world
from worldline.actors.registry import build
from worldline.actors.runtime.bus import connect
from worldline.protocols.messages import GetBelief, OpStatus, encode
from worldline.protocols.subjects import (
    INBOX,
    LEASES,
    OPS,
    VIEWS,
    bucket_key,
    bucket_put,
    inbox_in,
    is_reply_subject,
    lease_key,
    ops,
    rpc,
)

if TYPE_CHECKING:
    from pathlib import Path

JS_API = "$JS.API"


@pytest.mark.parametrize(
    "subject",
    [
        "_INBOX.abc",
        "_INBOX.UAGENTPUBLICKEY.xYz123",
        "_INBOX.UAGENTPUBLICKEY.a.b",
        "_INBOX.a_b-c",
    ],
)
def test_reply_inboxes_are_reply_subjects(subject: str) -> None:
    assert is_reply_subject(subject)


@pytest.mark.parametrize(
    "subject",
    [
        "",
        "_INBOX",
        "_INBOX.",
        "_INBOX..x",
        "_INBOX.x.",
        "_INBOX.*",
        "_INBOX.>",
        "_INBOX.x.>",
        "_INBOX.a b",
        "_INBOXES.x",
        "_inbox.x",
        "x._INBOX.y",
        f"{JS_API}.STREAM.PURGE.{OPS.name}",
        f"{JS_API}.STREAM.DELETE.{OPS.name}",
        f"{JS_API}.CONSUMER.DELETE.{INBOX.name}.{inbox_in('w', 'zora').durable}",
        bucket_put(LEASES, lease_key("materializer", 0, 1)),
        bucket_put(VIEWS, bucket_key("w", "zora")),
        ops("w", "zora"),
        "$JS.ACK.WL_OPS.fusion.1.2.3.4.5",
    ],
)
def test_streams_buckets_and_api_subjects_are_not(subject: str) -> None:
    assert not is_reply_subject(subject)


@pytest.mark.nats
async def test_an_actor_refuses_to_answer_on_a_subject_that_is_not_a_reply_inbox(
    nats_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On the open bus (any client may do anything, so nothing else stops it): a
    request whose reply names a plain subject or an op subject gets no answer there,
    while the same request with an ``_INBOX`` reply is answered."""
    caplog.set_level(logging.WARNING, logger="worldline.actor")
    world = unique_world("deputy")
    trap = f"trap-{uuid.uuid4().hex}.reply"  # a subject the actor could publish on
    forged = ops(world, "zora")  # would put a message "from zora" in the record
    projector = build("projector", replica=f"d{uuid.uuid4().hex[:6]}")
    specs = [projector, build("materializer", replica=f"d{uuid.uuid4().hex[:6]}")]
    nc = await connect(nats_url, name="deputy-probe")
    try:
        async with running(specs, url=nats_url, data=tmp_path):
            caught = await nc.subscribe(trap, max_msgs=0)
            requests = [
                (rpc(world, "get"), GetBelief(belief_id="b-1")),
                (rpc(world, "op_status"), OpStatus(seq=0)),
            ]
            for subject, request in requests:
                # Answered on a reply inbox: the actors serve these verbs now.
                answer = await nc.request(subject, encode(request), timeout=10)
                assert answer.data
                for target in (trap, forged):
                    await nc.publish(subject, encode(request), reply=target)
            await nc.flush()
            with anyio.fail_after(10):
                while True:
                    refused = [
                        r.getMessage()
                        for r in caplog.records
                        if "refused to answer on" in r.getMessage()
                    ]
                    if all(
                        any(repr(target) in line for line in refused)
                        for target in (trap, forged)
                    ) and len(refused) >= 2 * len(requests):
                        break
                    await anyio.sleep(0.05)
            with pytest.raises(nats.errors.TimeoutError):
                await caught.next_msg(timeout=0.5)
            js = nc.jetstream()
            info = await js.stream_info(OPS.name, subjects_filter=forged)
            assert not info.state.subjects  # nothing was recorded "from zora"
    finally:
        await nc.close()

"""Per-agent NATS users on a real nats-server started with the generated auth.conf.

Each actor runs as its own user; agents connect with their own credentials. Every
forbidden attempt is checked twice: the operation fails (a JetStream request gets no
answer, since the server drops it) AND the server reported a permissions violation
naming that exact subject, so a timeout for another reason cannot pass the test.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

import anyio
import nats.errors
import pytest
from nats.js import api

import worldline
from tests.security.secured import (
    PILOT,
    Secured,
    actors_as_own_users,
    declared_by_the_operator,
    logged,
    raw,
    secured_server,
)
from worldline.actors.runtime.auth import AGENT_JS_API
from worldline.actors.runtime.bus import connect as bus_connect
from worldline.actors.runtime.declare import ensure_buckets
from worldline.cli import main as cli_main
from worldline.ops.creds import new_seed
from worldline.protocols.messages import SetField, WorkAssigned, encode
from worldline.protocols.subjects import (
    INBOX,
    OPS,
    VIEWS,
    bucket_key,
    bucket_put,
    bucket_stream,
    derived,
    inbox,
    inbox_in,
    obs,
    ops,
    state,
)
from worldline.sdk.errors import BadRequest, BusUnavailable

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Iterator
    from pathlib import Path

    from worldline import World
    from worldline.protocols.messages import AgentView

pytestmark = pytest.mark.nats

JS_API = "$JS.API"
AGENT_API = AGENT_JS_API  # an agent's account reaches JetStream under this prefix


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    with secured_server(tmp_path, "sec") as s:
        yield s


async def _work_for(w: World) -> list[WorkAssigned]:
    """Wait until ``w``'s inbox holds a work request; return them, unacknowledged."""
    with anyio.fail_after(10):
        while True:
            items = await w.inbox(wait=0.3)
            work = [i.message for i in items if isinstance(i.message, WorkAssigned)]
            for item in items:
                await item.release()
            if work:
                return work


async def _violation(
    caplog: pytest.LogCaptureFixture, subject: str, kind: str = "publish"
) -> None:
    """Wait until the server has reported a permissions violation on ``subject``
    (nats-py passes the server's -ERR, lower-cased, to the error callback)."""
    await logged(caplog, f'permissions violation for {kind} to "{subject}"')


async def test_an_agent_with_its_creds_uses_its_own_world(
    secured: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = secured
    async with (
        actors_as_own_users(s, monkeypatch),
        worldline.connect(
            s.url, world=s.world, agent="ada", creds=s.creds("ada")
        ) as ada,
        worldline.connect(
            s.url, world=s.world, agent="spock", creds=s.creds("spock")
        ) as spock,
    ):
        await declared_by_the_operator(s)
        await ada.write(PILOT, "phase", "sla")
        # Its inbox: create/bind/fetch its durable, then ack (bus ack plus an op).
        (request,) = await _work_for(spock)
        assert request.work_kind == "replan_request"
        await spock.ack(await spock.inbox(wait=0.5))
        assert await spock.inbox(wait=0.3) == []
        # Its view: computed on request, stored in the bucket (direct get), watched.
        computed = await spock.view()
        assert computed is not None
        with anyio.fail_after(10):
            while True:
                stored = await spock.stored_view()
                if stored is not None:
                    break
                await anyio.sleep(0.05)
        assert stored.agent == "spock"
        # Watching its own key, through a consumer filtered to it.
        updates = cast("AsyncGenerator[AgentView, None]", spock.watch())
        try:
            with anyio.fail_after(10):
                watched = await anext(updates)
        finally:
            await updates.aclose()
        assert watched.agent == "spock"
        # Beliefs through its own ops, reads over RPC, the worldview before a move.
        belief = await spock.add("Soteria pilots convert at 40%", confidence=0.6)
        got = await spock.get(belief.id)
        assert got is not None
        assert got.text == "Soteria pilots convert at 40%"
        context = await spock.before("draft the SLA memo")
        assert context.prompt
        # Its observations, and presence (its own key; anyone's readable).
        assert await spock.observe("The SLA draft is due Friday.", source="memo")
        await spock.set_presence("drafting", task="sla memo")
        seen = await ada.presence("spock")
        assert seen is not None
        assert seen.status == "drafting"


async def test_an_agent_cannot_touch_another_agents_inbox(
    secured: Secured,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = secured
    caplog.set_level(logging.WARNING, logger="worldline.bus")
    theirs = inbox_in(s.world, "spock")
    async with (
        actors_as_own_users(s, monkeypatch),
        worldline.connect(
            s.url, world=s.world, agent="ada", creds=s.creds("ada")
        ) as ada,
        worldline.connect(
            s.url, world=s.world, agent="spock", creds=s.creds("spock")
        ) as spock,
    ):
        await declared_by_the_operator(s)
        await ada.write(PILOT, "phase", "sla")
        before = await _work_for(spock)
        async with raw(s, "scotty") as nc:
            js = nc.jetstream(timeout=1.0, prefix=AGENT_API)
            with pytest.raises(nats.errors.TimeoutError):
                await js.consumer_info(INBOX.name, theirs.durable)
            await _violation(
                caplog, f"{AGENT_API}.CONSUMER.INFO.{INBOX.name}.{theirs.durable}"
            )

            sub = await js.pull_subscribe_bind(
                durable=theirs.durable, stream=INBOX.name
            )
            with pytest.raises(nats.errors.TimeoutError):
                await sub.fetch(1, timeout=1.0)
            await sub.unsubscribe()
            await _violation(
                caplog, f"{AGENT_API}.CONSUMER.MSG.NEXT.{INBOX.name}.{theirs.durable}"
            )

            # Re-creating Spock's durable (say, with a new start position) is denied.
            config = api.ConsumerConfig(
                name=theirs.durable,
                durable_name=theirs.durable,
                filter_subject=theirs.filter_subject,
                ack_policy=api.AckPolicy.EXPLICIT,
            )
            with pytest.raises(nats.errors.TimeoutError):
                await js.add_consumer(INBOX.name, config)
            await _violation(
                caplog,
                f"{AGENT_API}.CONSUMER.CREATE.{INBOX.name}.{theirs.durable}."
                f"{theirs.filter_subject}",
            )

            # Nor can it overhear the replies Spock's fetches come back on.
            await nc.subscribe("_INBOX.>")
            await _violation(caplog, "_INBOX.>", kind="subscription")
            # Nor publish into anyone's inbox channel.
            await nc.publish(inbox(s.world, "spock"), b"forged")
            await nc.flush()
            await _violation(caplog, inbox(s.world, "spock"))
        # Spock still holds every message: nothing was taken or acknowledged.
        assert [w.id for w in await _work_for(spock)] == [w.id for w in before]


async def test_an_agent_cannot_write_as_another_or_on_derived_channels(
    secured: Secured,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = secured
    caplog.set_level(logging.WARNING, logger="worldline.bus")
    async with actors_as_own_users(s, monkeypatch), raw(s, "scotty") as nc:
        js = nc.jetstream(timeout=1.0, prefix=AGENT_API)
        info = await js.stream_info(bucket_stream(VIEWS))
        assert info.config.allow_direct  # per-key reads are what the rights name
        for subject in (ops(s.world, "spock"), obs(s.world, "spock")):
            with pytest.raises(nats.errors.TimeoutError):
                await js.publish(subject, b"forged", timeout=1.0)
            await _violation(caplog, subject)
        # Its own ops subject is open: the same connection gets a PubAck there.
        op = SetField(
            op_id="op-own-subject",
            author="scotty",
            at=datetime.now(UTC),
            entity=PILOT,
            field="phase",
            value="sla",
        )
        ack = await js.publish(ops(s.world, "scotty"), encode(op), timeout=5.0)
        assert ack.stream == OPS.name
        for subject in (state(s.world, "field"), derived(s.world, "posterior", "0")):
            await nc.publish(subject, b"forged")
            await nc.flush()
            await _violation(caplog, subject)
        with pytest.raises(nats.errors.TimeoutError):
            await js.delete_stream(OPS.name)
        await _violation(caplog, f"{AGENT_API}.STREAM.DELETE.{OPS.name}")
        with pytest.raises(nats.errors.TimeoutError):
            await js.purge_stream(OPS.name)
        await _violation(caplog, f"{AGENT_API}.STREAM.PURGE.{OPS.name}")
    # The operator's user sees the record intact: only Scotty's own op is in it.
    operator = await bus_connect(s.url, name="op", creds=s.out / "operator.creds")
    try:
        info = await operator.jetstream().stream_info(OPS.name)
    finally:
        await operator.close()
    assert info.state.messages == 1


async def test_an_agent_cannot_read_another_agents_view(
    secured: Secured,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = secured
    caplog.set_level(logging.WARNING, logger="worldline.bus")
    views = bucket_stream(VIEWS)
    key = bucket_put(VIEWS, bucket_key(s.world, "spock"))
    async with (
        actors_as_own_users(s, monkeypatch),
        worldline.connect(s.url, world=s.world, agent="ada", creds=s.creds("ada")),
        worldline.connect(
            s.url, world=s.world, agent="spock", creds=s.creds("spock")
        ) as spock,
    ):
        await declared_by_the_operator(s)
        with anyio.fail_after(10):
            while True:  # it is there, for Spock
                if await spock.stored_view() is not None:
                    break
                await anyio.sleep(0.05)
        async with raw(s, "scotty") as nc:
            js = nc.jetstream(timeout=1.0, prefix=AGENT_API)
            kv = await js.key_value(VIEWS.bucket)
            with pytest.raises(nats.errors.TimeoutError):
                await kv.get(bucket_key(s.world, "spock"))
            await _violation(caplog, f"{AGENT_API}.DIRECT.GET.{views}.{key}")
            # The gets whose subject names no key are closed too.
            with pytest.raises(nats.errors.TimeoutError):
                await js.get_last_msg(views, key)
            await _violation(caplog, f"{AGENT_API}.STREAM.MSG.GET.{views}")
            with pytest.raises(nats.errors.TimeoutError):
                await js.get_msg(views, seq=1, direct=True)
            await _violation(caplog, f"{AGENT_API}.DIRECT.GET.{views}")
            # Watching it means a consumer filtered to its key: denied.
            with pytest.raises(nats.errors.TimeoutError):
                await js.pull_subscribe(key, stream=views)
            await logged(
                caplog,
                "permissions violation for publish to",
                f"{AGENT_API}.CONSUMER.CREATE.{views}.",
                key,
            )


async def test_without_credentials_the_server_refuses(
    secured: Secured, tmp_path: Path
) -> None:
    s = secured
    with pytest.raises(BusUnavailable, match="refused an anonymous client"):
        async with worldline.connect(s.url, world=s.world, agent="spock"):
            pass
    unknown = tmp_path / "unknown.creds"
    unknown.write_text(new_seed() + "\n")  # a valid key the server does not know
    with pytest.raises(BusUnavailable, match="refused the credentials in"):
        async with worldline.connect(
            s.url, world=s.world, agent="spock", creds=unknown
        ):
            pass
    forged = tmp_path / "forged.creds"
    forged.write_text("not a key\n")
    with pytest.raises(BadRequest, match="no single NATS user nkey seed"):
        async with worldline.connect(s.url, world=s.world, agent="spock", creds=forged):
            pass


async def test_buckets_made_before_per_key_reads_get_them(nats_url: str) -> None:
    """Agent rights name keys, which only direct gets carry: an older bucket made
    without them is updated when the runtime declares it."""
    nc = await bus_connect(nats_url, name="buckets")
    try:
        js = nc.jetstream()
        await js.create_key_value(api.KeyValueConfig(bucket=VIEWS.bucket, history=1))
        before = await js.stream_info(bucket_stream(VIEWS))
        await ensure_buckets(js, [VIEWS], replicas=1)
        after = await js.stream_info(bucket_stream(VIEWS))
    finally:
        await nc.close()
    assert not before.config.allow_direct
    assert after.config.allow_direct


async def test_status_reads_the_secured_bus_with_the_operators_creds(
    secured: Secured,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def status(*extra: str) -> int:
        argv = ["status", "--nats", secured.url, "--json", "--timeout", "5", *extra]
        try:
            return cli_main(argv)
        except SystemExit as exc:  # how the CLI reports a failure
            return int(exc.code or 0)

    async with actors_as_own_users(secured, monkeypatch):
        refused = await anyio.to_thread.run_sync(status)
        assert refused == 4  # anonymous: the server turns it away
        assert "refused an anonymous client" in capsys.readouterr().err
        creds = str(secured.out / "operator.creds")
        assert await anyio.to_thread.run_sync(status, "--creds", creds) == 0
        report = json.loads(capsys.readouterr().out)
        seen = {row["instance"] for row in report["instances"] if row["pid"]}
        assert {"fusion", "materializer", "projector-0"} <= seen  # their heartbeats
        assert all(row["messages"] is not None for row in report["streams"])

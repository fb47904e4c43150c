"""Agents and actors apart at the bus: each agent is a NATS account of its own, the
actors, JetStream and the operator another (``WORLDLINE``), on a real nats-server
started with the ``auth.conf`` that ``worldline creds`` generates.

The attack these close: nats-server does not check a publisher's reply subject
against its permissions, and delivers a JetStream publish acknowledgement (or an
actor's answer) on it. In one account an agent publishing its own op with reply
``$KV.wl-leases.<key>`` had the server write ``{"stream":"WL_OPS","seq":N}`` over the
materializer's lease, and the same on another agent's inbox, ops, the change feed,
derived records or presence. Across accounts the reply subject is mapped: whatever
answers comes back into the agent's own account, where nothing reads it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import anyio
import pytest
from nats.js import api

import worldline
from tests.security.secured import (
    PILOT,
    Secured,
    actors_as_own_users,
    crew,
    declared_by_the_operator,
    logged,
    raw,
    secured_server,
)
from tests.security.test_actor_rights import allowed
from worldline.actors.runtime.auth import AGENT_JS_API, load_credentials
from worldline.actors.runtime.bus import connect as bus_connect
from worldline.actors.runtime.declare import ensure_buckets, ensure_streams
from worldline.actors.runtime.requester import REQUEST_INFO, agent_account
from worldline.ops.creds import actor_exports, agent_imports, write_credentials
from worldline.protocols.messages import LEASE_VALUE, WorkAssigned
from worldline.protocols.subjects import (
    BUCKETS,
    DERIVED,
    INBOX,
    LEASES,
    OPS,
    PRESENCE,
    STATE,
    STREAMS,
    VIEWS,
    RpcVerb,
    bucket_key,
    bucket_put,
    bucket_stream,
    derived,
    inbox,
    inbox_in,
    lease_key,
    ops,
    rpc,
    rpc_pattern,
    state,
)
from worldline.protocols.world import OPERATOR

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg

    from worldline import World

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).parent / "worldline")
LEASE_KEY = lease_key("materializer", 0, 1)
PUBACK = b'"stream":'  # what a JetStream publish acknowledgement holds


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    with secured_server(tmp_path, "acct") as s:
        yield s


def hostile_replies(s: Secured) -> list[str]:
    """Reply subjects naming the actors' subject space and another agent's."""
    zora_key = load_credentials(s.creds("zora"))
    assert zora_key is not None
    return [
        bucket_put(LEASES, LEASE_KEY),  # the materializer's lease
        inbox(s.world, "zora"),  # another agent's inbox
        ops(s.world, "zora"),  # another agent's ops: a message "from zora"
        state(s.world, "field"),  # the change feed
        derived(s.world, "posterior", "0"),  # fusion's records
        bucket_put(PRESENCE, bucket_key(s.world, "zora")),  # another's presence
        bucket_put(VIEWS, bucket_key(s.world, "zora")),  # another's stored view
        f"_INBOX.{zora_key.public_key}.stolen",  # another agent's replies
        f"$JS.API.STREAM.PURGE.{OPS.name}",  # the JetStream API
    ]


async def _landed(nc: NATS) -> dict[str, int]:
    """Per stream of the actors' account (buckets too): how many messages hold a
    publish acknowledgement, read back with the operator's credentials."""
    js = nc.jetstream(timeout=5)
    names = [s.name for s in STREAMS] + [
        bucket_stream(b) for b in (LEASES, PRESENCE, VIEWS)
    ]
    found: dict[str, int] = {}
    for name in names:
        info = await js.stream_info(name)
        found[name] = 0
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                msg = await js.get_msg(name, seq)
            except Exception:
                continue
            if msg.data is not None and PUBACK in msg.data:
                found[name] += 1
    return found


async def _lease_holder(nc: NATS) -> str:
    kv = await nc.jetstream(timeout=5).key_value(LEASES.bucket)
    entry = await kv.get(LEASE_KEY)
    assert entry.value is not None
    return LEASE_VALUE.decode(entry.value).holder  # raises if it does not decode


async def _work_for(w: World) -> list[WorkAssigned]:
    with anyio.fail_after(10):
        while True:
            items = await w.inbox(wait=0.3)
            for item in items:
                await item.release()
            work = [i.message for i in items if isinstance(i.message, WorkAssigned)]
            if work:
                return work


async def test_hostile_reply_subjects_land_nothing_and_the_agent_gets_its_puback(
    secured: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = secured
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(actors_as_own_users(s, monkeypatch))
        await declared_by_the_operator(s)
        zora = await stack.enter_async_context(
            worldline.connect(s.url, world=s.world, agent="zora", creds=s.creds("zora"))
        )
        await zora.set_presence("reviewing")
        operator = await stack.enter_async_context(raw(s, OPERATOR))
        with anyio.fail_after(10):
            while True:  # the materializer holds its lease
                try:
                    if await _lease_holder(operator) == "materializer":
                        break
                except Exception:
                    pass
                await anyio.sleep(0.05)
        before = await _landed(operator)
        assert not any(before.values())

        spock = await stack.enter_async_context(raw(s, "spock"))
        js = spock.jetstream(prefix=AGENT_JS_API, timeout=5)
        # Its own op, acknowledged to it: the import hands the PubAck back.
        ack = await js.publish(ops(s.world, "spock"), b"junk-own")
        assert ack.stream == OPS.name
        # The same publish, with every hostile reply subject.
        targets = hostile_replies(s)
        for n, target in enumerate(targets):
            await spock.publish(ops(s.world, "spock"), b"junk-%d" % n, reply=target)
        await spock.flush()
        await anyio.sleep(1.0)  # anything delivered would have landed by now

        landed = await _landed(operator)
        assert landed == before, landed  # landed in the actors' streams: 0
        assert await _lease_holder(operator) == "materializer"  # still readable
        info = await operator.jetstream(timeout=5).stream_info(
            OPS.name, subjects_filter=ops(s.world, "*")
        )
        # Spock's own subject holds its own publishes; nothing is "from zora".
        subjects = info.state.subjects or {}
        assert subjects[ops(s.world, "spock")] == 1 + len(targets)
        assert ops(s.world, "zora") not in subjects
        seen = await zora.presence("zora")
        assert seen is not None
        assert seen.status == "reviewing"
        for stream in (INBOX, STATE, DERIVED):
            assert landed[stream.name] == 0


async def test_the_server_names_who_asks_on_every_verb_and_replaces_a_forgery(
    secured: Secured,
) -> None:
    """Every RPC import shares the requester: the actor gets ``Nats-Request-Info``
    naming the agent's account and user, whatever header the agent set."""
    s = secured
    spock_key = load_credentials(s.creds("spock"))
    zora_key = load_credentials(s.creds("zora"))
    assert spock_key is not None
    assert zora_key is not None
    forged = {
        REQUEST_INFO: json.dumps(
            {"acc": agent_account("zora"), "user": zora_key.public_key}
        )
    }
    seen: dict[str, dict[str, str]] = {}
    verbs: tuple[RpcVerb, ...] = get_args(RpcVerb)
    every_actor = s.out / "actors" / "all.creds"  # serves every verb
    actor = await bus_connect(s.url, name="probe-actors", creds=every_actor)
    try:
        async with raw(s, "spock") as spock:

            async def answer(msg: Msg) -> None:
                seen[msg.subject] = dict(msg.headers or {})
                await msg.respond(b"ok")

            for verb in verbs:
                await actor.subscribe(rpc_pattern(verb), cb=answer)
            await actor.flush()
            for verb in verbs:
                subject = rpc(s.world, verb)
                reply = await spock.request(subject, b"", headers=forged, timeout=5)
                assert reply.data == b"ok"
    finally:
        await actor.close()
    assert set(seen) == {rpc(s.world, verb) for verb in verbs}
    for subject, headers in seen.items():
        info = json.loads(headers[REQUEST_INFO])
        assert info["acc"] == agent_account("spock"), subject
        assert info["user"] == spock_key.public_key, subject


async def test_an_agent_cannot_make_a_push_consumer_of_its_inbox(
    secured: Secured,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Recreating its inbox durable (or a view watcher) as a push consumer aimed at
    another agent's subject, an actor's service or reply inbox is refused by the
    server: agents create no consumer (the materializer opens inbox durables)."""
    s = secured
    caplog.set_level(logging.WARNING, logger="worldline.bus")
    mine = inbox_in(s.world, "spock")
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(actors_as_own_users(s, monkeypatch))
        await declared_by_the_operator(s)
        ada = await stack.enter_async_context(
            worldline.connect(s.url, world=s.world, agent="ada", creds=s.creds("ada"))
        )
        spock = await stack.enter_async_context(
            worldline.connect(
                s.url, world=s.world, agent="spock", creds=s.creds("spock")
            )
        )
        await ada.write(PILOT, "phase", "sla")
        before = await _work_for(spock)  # the materializer opened the durable
        nc = await stack.enter_async_context(raw(s, "spock"))
        for prefix in (AGENT_JS_API, "$JS.API"):
            js = nc.jetstream(prefix=prefix, timeout=1.0)
            for deliver in (
                inbox(s.world, "zora"),
                ops(s.world, "zora"),
                rpc(s.world, "get"),
                "_INBOX.materializer-replies",
            ):
                config = api.ConsumerConfig(
                    name=mine.durable,
                    durable_name=mine.durable,
                    filter_subject=mine.filter_subject,
                    ack_policy=api.AckPolicy.NONE,
                    deliver_subject=deliver,
                )
                with pytest.raises(TimeoutError):
                    await js.add_consumer(INBOX.name, config)
            subject = (
                f"{prefix}.CONSUMER.CREATE.{INBOX.name}.{mine.durable}."
                f"{mine.filter_subject}"
            )
            await logged(caplog, f'permissions violation for publish to "{subject}"')
            # Nor a push watcher on its own view.
            key = bucket_put(VIEWS, bucket_key(s.world, "spock"))
            with pytest.raises(TimeoutError):
                await js.add_consumer(
                    bucket_stream(VIEWS),
                    api.ConsumerConfig(
                        name="hijack",
                        filter_subject=key,
                        ack_policy=api.AckPolicy.NONE,
                        deliver_subject=ops(s.world, "zora"),
                    ),
                )
        async with raw(s, OPERATOR) as operator:
            ojs = operator.jetstream(timeout=5)
            info = await ojs.consumer_info(INBOX.name, mine.durable)
            assert info.config.deliver_subject is None  # still the pull durable
            views = await ojs.consumers_info(bucket_stream(VIEWS))
            assert not [c for c in views if c.config.deliver_subject]
            opsinfo = await ojs.stream_info(OPS.name, subjects_filter=ops(s.world, "*"))
            assert ops(s.world, "zora") not in (opsinfo.state.subjects or {})
        # And Spock's inbox still serves it, every message still there.
        assert [w.id for w in await _work_for(spock)] == [w.id for w in before]


async def test_who_lists_the_worlds_agents_for_an_agent(
    secured: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agents cannot list the presence bucket across accounts; ``who`` reads every
    agent the declaration names by key (it timed out before: an agent had no right to
    read presence at all)."""
    s = secured
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(actors_as_own_users(s, monkeypatch))
        await declared_by_the_operator(s)
        agents: dict[str, World] = {}
        for name in ("spock", "zora"):
            agents[name] = await stack.enter_async_context(
                worldline.connect(
                    s.url,
                    world=s.world,
                    agent=name,
                    creds=s.creds(name),
                    request_timeout=8,
                )
            )
        await agents["zora"].set_presence("reviewing", task="sla memo")
        await agents["spock"].set_presence("drafting")
        # `who` takes the names from the declaration as the projector holds it: wait
        # until the projector has applied the operator's declaration.
        with anyio.fail_after(8):
            while True:
                world = await agents["spock"].read_world(
                    entity_type="none", beliefs=False
                )
                if world.declaration is not None:
                    break
                await anyio.sleep(0.05)
        with anyio.fail_after(4):
            present = await agents["spock"].who()
        assert [(p.agent, p.status) for p in present] == [
            ("spock", "drafting"),
            ("zora", "reviewing"),
        ]
        # A reply subject naming one of the agent's OWN imports re-enters through
        # it: the PubAck lands on Spock's own presence key (what Spock may write
        # anyway). It poisons nothing: everyone else's `who` skips the entry.
        own = bucket_put(PRESENCE, bucket_key(s.world, "spock"))
        async with raw(s, "spock") as nc:
            await nc.publish(ops(s.world, "spock"), b"junk", reply=own)
            await nc.flush()
        with anyio.fail_after(4):
            while True:
                if await agents["zora"].presence("spock") is None:  # junk: skipped
                    break
                await anyio.sleep(0.05)
            present = await agents["zora"].who()
        assert [p.agent for p in present] == ["zora"]


def _cli(s: Secured, *argv: str, world: str, agent: str) -> tuple[int, str]:
    """Run a verb with Spock's credentials; its exit code and stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}
    where = ["--nats", s.url, "--world", world, "--agent", agent]
    spock = ["--creds", str(s.creds("spock")), "--timeout", "8"]
    result = subprocess.run(
        [WORLDLINE, *argv, *where, *spock],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    return result.returncode, result.stderr


@pytest.mark.cli
def test_agent_refusals_are_named_permission_errors(secured: Secured) -> None:
    """With an agent's credentials, what the agent may not do exits 2 at once with
    the subject and whose credentials these are, never "nats: timeout" (exit 4)."""
    s = secured

    async def declare() -> None:  # what the actors do at start-up
        async with raw(s, OPERATOR) as nc:
            js = nc.jetstream(timeout=5)
            await ensure_streams(js, STREAMS, replicas=1)
            await ensure_buckets(js, BUCKETS, replicas=1)

    anyio.run(declare)
    elsewhere = f"{s.world}-x"  # a world Spock is not declared in
    cases = [
        # the op log is the operator's
        (["export"], s.world, "spock", f"{AGENT_JS_API}.STREAM.INFO.{OPS.name}"),
        # presence as another agent
        (
            ["presence", "drafting"],
            s.world,
            "zora",
            bucket_put(PRESENCE, bucket_key(s.world, "zora")),
        ),
        # who, in a world it has no import of
        (["who"], elsewhere, "spock", rpc(elsewhere, "read")),
    ]
    for argv, world, agent, subject in cases:
        started = time.monotonic()
        code, err = _cli(s, *argv, world=world, agent=agent)
        assert time.monotonic() - started < 6, err
        assert code == 2, (argv, err)
        (line,) = err.strip().splitlines()
        assert line.startswith("worldline: permission denied publishing to "), line
        assert subject.lower() in line.lower(), (subject, line)
        assert "agent spock" in line, line


def test_every_import_is_exported_and_every_verb_shared(tmp_path: Path) -> None:
    """Pure: each agent account imports only what the actors' account exports, its
    own subjects only, the RPC verbs with ``share: true``; its user may publish
    exactly what it imports."""

    report = write_credentials([crew("w")], tmp_path)
    exports = [e.subject for e in actor_exports()]
    for user in report.users:
        if user.role != "agent":
            assert not user.imports
            continue
        assert user.account == agent_account(user.name)
        assert set(user.permissions.publish) == {i.local for i in user.imports}
        for imp in user.imports:
            assert allowed(exports, imp.subject.replace("*", "x")), imp
            assert imp.share == (imp.subject.split(".")[2] == "rpc"), imp
            assert not imp.local.startswith("$JS.API."), imp  # answered locally
    shared = {i.subject for i in agent_imports(["w"], "ada") if i.share}
    assert shared == {rpc("w", verb) for verb in get_args(RpcVerb)}
    config = report.config.read_text()
    assert "accounts {" in config
    assert "jetstream: enabled" in config
    assert config.count("jetstream: enabled") == 1  # the actors' account only
    stream_exports = [e.subject for e in actor_exports() if e.stream]
    assert stream_exports == [f"$JS.API.CONSUMER.MSG.NEXT.{INBOX.name}.*"]

"""The outside attack's confused-deputy moves, replayed on a secured server.

A real nats-server runs with the ``auth.conf`` that ``worldline creds`` generates;
each actor runs as its own (least-privilege) user, the materializer in secured mode
(it connects with credentials). Spock, with its own least-privilege credentials,
then asks every actor's RPC verbs with reply subjects that name the op log, the
materializer's lease, another agent's stored view and inbox durable, and another
agent's ops subject. Before the fix the actor answered there with its own broad
rights: ``WL_OPS`` purged, the lease frozen, Zora's view overwritten, her inbox
durable deleted, a message "from zora" in the record. Now Spock is a NATS account of
its own: its request reaches the actor with the reply subject the server mapped it
to (``_R_.…``), and the answer is delivered back in Spock's account, on the subject
Spock named there, where nothing reads it. An actor asked on any other reply subject
(from inside the actors' account) refuses to answer (tests/security/
test_reply_subjects.py), and its credentials would not allow most of it anyway;
everything is intact, and direct attempts by Spock are the server's permissions
violations.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import pytest

import worldline
from tests.security.secured import (
    PILOT,
    Secured,
    actors_as_own_users,
    crew,
    logged,
    raw,
    secured_server,
)
from worldline.protocols.messages import LEASE_VALUE
from worldline.protocols.subjects import (
    INBOX,
    LEASES,
    OPS,
    VIEWS,
    RpcVerb,
    bucket_key,
    bucket_put,
    derived,
    inbox,
    inbox_in,
    lease_key,
    ops,
    rpc,
    state,
)
from worldline.protocols.world import OPERATOR
from worldline.sdk.errors import Rejected

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from worldline import World

pytestmark = pytest.mark.nats

JS_API = "$JS.API"
LEASE_KEY = lease_key("materializer", 0, 1)
# Verbs of every actor that serves: the projector, the materializer, the simulator.
VERBS: tuple[RpcVerb, ...] = (
    "get",
    "list",
    "read",
    "view",
    "before",
    "state_hash",
    "op_status",
    "sim.status",
)


def targets(s: Secured) -> list[str]:
    """The reply subjects of the outside attack."""
    zora = inbox_in(s.world, "zora").durable
    return [
        f"{JS_API}.STREAM.PURGE.{OPS.name}",
        bucket_put(LEASES, LEASE_KEY),
        bucket_put(VIEWS, bucket_key(s.world, "zora")),
        f"{JS_API}.CONSUMER.DELETE.{INBOX.name}.{zora}",
        ops(s.world, "zora"),
        f"{JS_API}.STREAM.DELETE.{OPS.name}",
    ]


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    with secured_server(tmp_path, "deputy") as s:
        yield s


async def _violation(caplog: pytest.LogCaptureFixture, who: str, subject: str) -> None:
    """The server reported a permissions violation by ``who`` on ``subject``."""
    await logged(
        caplog, f"probe-{who}", f'permissions violation for publish to "{subject}"'
    )


async def _held(agent: World) -> list[str]:
    """The ids of what ``agent``'s inbox holds, handed back unacknowledged."""
    items = await agent.inbox(wait=0.3)
    for item in items:
        await item.release()
    return sorted(item.message.id for item in items)


@dataclass
class Snapshot:
    messages: int
    first_seq: int
    last_seq: int
    lease_holder: str
    zora_view: bytes


async def _snapshot(s: Secured) -> Snapshot:
    """What the attack went after, read with the operator's credentials."""
    async with raw(s, OPERATOR) as nc:
        js = nc.jetstream(timeout=5)
        info = await js.stream_info(OPS.name)
        leases = await js.key_value(LEASES.bucket)
        lease = await leases.get(LEASE_KEY)
        assert lease.value is not None
        holder = LEASE_VALUE.decode(lease.value).holder
        views = await js.key_value(VIEWS.bucket)
        view = await views.get(bucket_key(s.world, "zora"))
        assert view.value is not None
        # Zora's inbox durable is there (raises NotFoundError once deleted).
        await js.consumer_info(INBOX.name, inbox_in(s.world, "zora").durable)
        return Snapshot(
            info.state.messages,
            info.state.first_seq,
            info.state.last_seq,
            holder,
            view.value,
        )


async def _from_zora(s: Secured) -> int:
    """Messages on Zora's ops subject (she never wrote one)."""
    async with raw(s, OPERATOR) as nc:
        info = await nc.jetstream(timeout=5).stream_info(
            OPS.name, subjects_filter=ops(s.world, "zora")
        )
    return sum((info.state.subjects or {}).values())


async def test_the_deputy_attacks_change_nothing(
    secured: Secured,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = secured
    caplog.set_level(logging.WARNING, logger="worldline.actor")
    caplog.set_level(logging.WARNING, logger="worldline.bus")
    async with (
        actors_as_own_users(s, monkeypatch),
        worldline.connect(
            s.url, world=s.world, agent=OPERATOR, creds=s.creds(OPERATOR)
        ) as operator,
        worldline.connect(
            s.url, world=s.world, agent="ada", creds=s.creds("ada")
        ) as ada,
        worldline.connect(
            s.url, world=s.world, agent="zora", creds=s.creds("zora")
        ) as zora,
    ):
        # World squatting: an agent with credentials for the world cannot declare
        # it first, even as an admin the declaration names; the operator does.
        with pytest.raises(Rejected, match="only the operator declares") as squat:
            await ada.declare(crew(s.world))
        assert squat.value.code == "unauthorized"
        await operator.declare(crew(s.world))
        await ada.write(PILOT, "phase", "sla")
        held = await _held(zora)  # binds her inbox durable
        with anyio.fail_after(10):
            while True:
                if await operator.stored_view("zora") is not None:
                    break
                await anyio.sleep(0.05)
        # Settled first: the write's notification and her inbox count rebuild her
        # view once more, up to a second later (views are rebuilt per batch or
        # once a second), which is not the attack's doing.
        before = await _snapshot(s)
        with anyio.fail_after(15):
            while True:
                await anyio.sleep(1.2)
                again = await _snapshot(s)
                if again == before:
                    break
                before = again
        assert before.lease_holder == "materializer"

        # The attack: every verb, every target, with Spock's own credentials.
        async with raw(s, "spock") as nc:
            for target in targets(s):
                for verb in VERBS:
                    await nc.publish(rpc(s.world, verb), b"\x80", reply=target)
            await nc.flush()
        await anyio.sleep(1.0)  # anything the actors did would have landed by now
        after = await _snapshot(s)
        assert after == before  # every op, the lease, Zora's view and her durable
        assert await _from_zora(s) == 0
        # The actors never saw those subjects: each request came with its own
        # account's reply mapping, and no actor refused (nor wrote) anything.
        assert not [
            r.getMessage()
            for r in caplog.records
            if "refused to answer on" in r.getMessage()
        ]

        async with raw(s, "spock") as nc:
            # Spock cannot do any of it directly either.
            for target in targets(s):
                await nc.publish(target, b"")
                await nc.flush()
                await _violation(caplog, "spock", target)
            # Nor write on an actor's channel: derived, change feed, inboxes.
            for subject in (
                derived(s.world, "posterior", "0"),
                state(s.world, "field"),
                inbox(s.world, "zora"),
            ):
                await nc.publish(subject, b"forged")
                await nc.flush()
                await _violation(caplog, "spock", subject)
        assert await _snapshot(s) == before
        # The world works on: the lease holder applies a write; Zora's inbox serves.
        assert await ada.write(PILOT, "phase", "build") > before.last_seq
        assert set(held) <= set(await _held(zora))  # and still holds what it did


async def test_an_actor_cannot_do_what_the_deputy_was_tricked_into(
    secured: Secured,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Had an actor answered, its own credentials would not let the answer land
    there: the second line of defence, on the real server."""
    s = secured
    caplog.set_level(logging.WARNING, logger="worldline.bus")
    own_lease = bucket_put(LEASES, LEASE_KEY)
    zora_view = bucket_put(VIEWS, bucket_key(s.world, "zora"))
    async with actors_as_own_users(s, monkeypatch):
        for actor in ("projector", "materializer", "simulator"):
            async with raw(s, actor) as nc:
                for target in targets(s):
                    if actor == "materializer" and target == own_lease:
                        continue  # its own lease: the one key it must write
                    if actor == "projector" and target == zora_view:
                        continue  # it writes views; the reply check stops this one
                    await nc.publish(target, b"x")
                    await nc.flush()
                    await _violation(caplog, actor, target)
        # Channels belong to their actor: fusion may not write the change feed or
        # inboxes, the materializer may not write derived records.
        async with raw(s, "fusion") as nc:
            for subject in (state(s.world, "field"), inbox(s.world, "zora")):
                await nc.publish(subject, b"x")
                await nc.flush()
                await _violation(caplog, "fusion", subject)
        async with raw(s, "materializer") as nc:
            subject = derived(s.world, "posterior", "0")
            await nc.publish(subject, b"x")
            await nc.flush()
            await _violation(caplog, "materializer", subject)
        async with raw(s, OPERATOR) as nc:
            info = await nc.jetstream(timeout=5).stream_info(OPS.name)
        assert info.state.messages == 0  # nothing landed in the record

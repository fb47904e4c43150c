"""F11/F12 and the statement pre-emption (issue 23) as ``bench/attack.py`` runs them:
a secured deploy, every actor with its own credentials, spock and zora agents in
accounts of their own. spock may publish only on his own ``obs`` and ``ops``
subjects, but JetStream de-duplicates a ``Nats-Msg-Id`` stream-wide: each attack
used an id zora's observation (or the extractor's statements for it) would carry.
The extractor's credentials allow the read that tells its own message from a
forgery (``STREAM.MSG.GET`` on ``WL_OPS``)."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio
import pytest
from nats.js import api

import worldline
from tests.security.secured import (
    Secured,
    actors_as_own_users,
    declared_by_the_operator,
    raw,
    secured_server,
)
from tests.security.test_actor_rights import allowed
from worldline.actors.belief_model.text import belief_id
from worldline.actors.extractor.core import handle as extract
from worldline.actors.runtime.auth import AGENT_JS_API, public_key_of
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.ops.creds import actor_permissions, new_seed
from worldline.protocols.messages import Observe, encode
from worldline.protocols.subjects import ACTOR_NAMES, OPS, STREAMS, obs, ops
from worldline.sdk.beliefs import observation_id

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from worldline.sdk.client import World

pytestmark = pytest.mark.nats

AT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    with secured_server(tmp_path, "pre") as s:
        yield s


async def _read_back(w: World, texts: list[str], wait: float = 20.0) -> bool:
    ids = [belief_id(w.world, text) for text in texts]
    with anyio.move_on_after(wait):
        while True:
            if all([await w.get(i) is not None for i in ids]):
                return True
            await anyio.sleep(0.1)
    return False


def _statement_ids(world: str, obs_id: str, text: str) -> list[str]:
    """The op ids the extractor gives zora's observation of ``text``."""
    observation = Observe(obs_id=obs_id, author="zora", at=AT, text=text)
    ctx = Context(world=world, author="zora", subject=obs(world, "zora"), seq=1, now=AT)
    return [out.msg_id for out in extract(MemoryState(), observation, ctx).out]


async def test_spock_cannot_suppress_zoras_observation(
    secured: Secured,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = secured
    caplog.set_level(logging.WARNING, logger="worldline.actor")
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(actors_as_own_users(s, monkeypatch))
        await declared_by_the_operator(s)
        zora = await stack.enter_async_context(
            worldline.connect(s.url, world=s.world, agent="zora", creds=s.creds("zora"))
        )
        spock = await stack.enter_async_context(raw(s, "spock"))
        js = spock.jetstream(prefix=AGENT_JS_API, timeout=10)
        control = "The pager rota rotates every Monday."
        await zora.observe(control)
        assert await _read_back(zora, [control])
        attacks = ("header", "body", "statements")
        for n, attack in enumerate(attacks):
            s1 = f"The audit log keeps {91 + n} days of entries."
            s2 = f"The archive job runs nightly at {2 + n}."
            art = f"{s1} {s2}"
            zid = observation_id(s.world, "zora", "", "artifact", "text", art)
            if attack == "header":  # F11
                await js.publish(
                    obs(s.world, "spock"), b"junk", headers={api.Header.MSG_ID: zid}
                )
            elif attack == "body":  # F12
                filler = f"Filler {n} from spock. Nothing to see here."
                forged = Observe(obs_id=zid, author="spock", at=AT, text=filler)
                await js.publish(obs(s.world, "spock"), encode(forged))
                assert await _read_back(zora, [f"Filler {n} from spock."])
            else:  # the extractor's statement ids, on spock's own ops subject
                for msg_id in _statement_ids(s.world, zid, art):
                    await js.publish(
                        ops(s.world, "spock"),
                        b"junk",
                        headers={api.Header.MSG_ID: msg_id},
                    )
            assert await zora.observe(art) == zid
            assert await _read_back(zora, [s1, s2]), attack
    # The forged statements were told apart by the extractor's own read.
    lines = [r.getMessage() for r in caplog.records]
    assert any("was pre-empted" in line for line in lines)
    assert not any("not checked" in line for line in lines)


def test_only_the_extractor_reads_the_record_by_sequence() -> None:
    """The one right the check needs: the extractor (whose statements go into
    WL_OPS) reads a WL_OPS message by sequence; no actor reads any other stream so,
    and no other actor needs to."""
    key = public_key_of(new_seed())
    for actor in ACTOR_NAMES:
        rights = actor_permissions(actor, key).publish
        for stream in STREAMS:
            wanted = actor == "extractor" and stream is OPS
            assert allowed(rights, f"$JS.API.STREAM.MSG.GET.{stream.name}") == wanted

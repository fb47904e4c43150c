"""Who asks is what the server vouches for, never a reply subject, a body field or a
header the requester sets (issue 23).

A real nats-server runs with a small hand-written accounts config: the actors'
account (JetStream, the operator, the actors) exports the RPC verbs as services, and
each agent has an account of its own that imports them with ``share: true``, so the
server writes the ``Nats-Request-Info`` header (the requesting account and user) on
every request an agent makes, replacing any the agent set. Spock forges reply
subjects under Zora's reply prefix and headers naming Zora's account or made-up ones;
the simulator counts every one of them as Spock's, so Zora's quota and the global
limit stay free. Another agent cannot step or end Spock's session; the projector
answers an agent's view and worldview only to that agent (or the operator).
"""

from __future__ import annotations

import json
import secrets
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, get_args

import anyio
import nats
import nkeys
import pytest

import worldline
from tests.runtime.test_simulator import ASK, make_index
from tests.security.secured import declared_by_the_operator, raw, secured_server
from tests.support import running, unique_world
from worldline.actors.registry import build
from worldline.actors.runtime.auth import (
    CREDS_ENV,
    load_credentials,
    public_key_of,
    reply_prefix,
)
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.actors.runtime.requester import REQUEST_INFO, agent_account
from worldline.actors.simulator.sessions import DEFAULT_PER_CLIENT
from worldline.protocols.messages import (
    PROJECTOR_REPLY,
    SIMULATOR_REPLY,
    Before,
    GetView,
    Message,
    RpcError,
    SimEnd,
    SimEnded,
    SimError,
    SimStart,
    SimStarted,
    SimStep,
    SimStepReply,
    ViewReply,
    WorldviewReply,
    encode,
)
from worldline.protocols.simulator import DEFAULT_LIMITS
from worldline.protocols.subjects import ACTOR_NAMES, RpcVerb, rpc, rpc_pattern
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg

pytestmark = pytest.mark.nats

AGENTS = ("spock", "zora")
ACTORS_ACCOUNT = "ACTORS"


def _seed() -> str:
    seed: bytes = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)
    return seed.decode()


def accounts_config(keys: dict[str, str]) -> str:
    """The actors' account (JetStream, the actors and the operator) exporting every
    RPC verb; one account per agent importing them with ``share: true``. Agents may
    subscribe under their own account's reply subjects as they like: they cannot
    reach another account's."""
    verbs = [rpc_pattern(verb) for verb in get_args(RpcVerb)]
    exports = ", ".join(f"{{service: {json.dumps(v)}}}" for v in verbs)
    lines = [
        "accounts {",
        f"  {ACTORS_ACCOUNT} {{",
        "    jetstream: enabled",
        f'    users = [{{nkey: "{keys["actors"]}"}}, {{nkey: "{keys["operator"]}"}}]',
        f"    exports = [{exports}]",
        "  }",
    ]
    for agent in AGENTS:
        imports = ", ".join(
            f"{{service: {{account: {ACTORS_ACCOUNT}, subject: {json.dumps(v)}}}, "
            "share: true}"
            for v in verbs
        )
        lines += [
            f"  {agent_account(agent)} {{",
            f'    users = [{{nkey: "{keys[agent]}"}}]',
            f"    imports = [{imports}]",
            "  }",
        ]
    return "\n".join([*lines, "}", ""])


@dataclass
class Deploy:
    url: str
    world: str
    seeds: dict[str, str]

    @asynccontextmanager
    async def client(self, who: str) -> AsyncIterator[NATS]:
        """A connection as ``who`` (an agent, or the operator in the actors'
        account), replies under its own ``_INBOX.<public key>``."""
        seed = self.seeds[who]
        nc = await nats.connect(
            self.url,
            nkeys_seed_str=seed,
            inbox_prefix=reply_prefix(public_key_of(seed)),
        )
        try:
            yield nc
        finally:
            await nc.close()


@contextmanager
def accounts_server(tmp_path: Path) -> Iterator[Deploy]:
    seeds = {who: _seed() for who in ("actors", "operator", *AGENTS)}
    config = tmp_path / "accounts.conf"
    config.write_text(accounts_config({w: public_key_of(s) for w, s in seeds.items()}))
    creds = tmp_path / "actors.creds"
    creds.write_text(
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seeds['actors']}\n"
        "------END USER NKEY SEED------\n"
    )
    creds.chmod(0o600)
    with EmbeddedNats(tmp_path / "nats", config=config) as server:
        yield Deploy(server.url, unique_world("attest"), seeds)


@asynccontextmanager
async def secured_actors(
    d: Deploy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *names: str
) -> AsyncIterator[None]:
    """The actors, connected with the actors' credentials (so they run secured)."""
    specs = [
        build(name, sim_index=make_index(tmp_path) if name == "simulator" else None)
        for name in names
    ]
    monkeypatch.setenv(CREDS_ENV, str(tmp_path / "actors.creds"))
    async with running(specs, url=d.url, data=tmp_path / "actors"):
        monkeypatch.delenv(CREDS_ENV)
        yield


async def ask(
    nc: NATS, subject: str, request: Message, headers: dict[str, str] | None = None
) -> Message:
    msg = await nc.request(subject, encode(request), timeout=5, headers=headers)
    simulator = isinstance(request, SimStart | SimStep | SimEnd)
    return (SIMULATOR_REPLY if simulator else PROJECTOR_REPLY).decode(msg.data)


def outcome(reply: Message) -> str:
    if isinstance(reply, SimError):
        return reply.name
    assert isinstance(reply, SimStarted), reply
    return "started"


async def test_forged_replies_and_headers_take_neither_zoras_quota_nor_the_global(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with accounts_server(tmp_path) as d:
        zora_key = public_key_of(d.seeds["zora"])
        forged_zora = json.dumps({"acc": agent_account("zora"), "user": zora_key})
        async with (
            secured_actors(d, tmp_path, monkeypatch, "simulator"),
            d.client("spock") as spock,
            d.client("zora") as zora,
        ):
            subject = rpc(d.world, "sim.start")
            # Spock listens to every reply subject of its own account, so it sees
            # the answers to its forged requests (Zora never does: her reply
            # prefix in her account is another subject space).
            answers: list[str] = []
            sent = 320
            all_in = anyio.Event()

            async def collect(msg: Msg) -> None:
                answers.append(outcome(SIMULATOR_REPLY.decode(msg.data)))
                if len(answers) == sent:
                    all_in.set()

            sub = await spock.subscribe("_INBOX.>", cb=collect)
            for n in range(20):  # Zora's reply prefix, Zora's account, her name
                await spock.publish(
                    subject,
                    encode(SimStart(task="book a flight", agent="zora")),
                    reply=f"{reply_prefix(zora_key)}.x{n}",
                    headers={REQUEST_INFO: forged_zora},
                )
            for n in range(300):  # random inboxes and made-up accounts
                made_up = json.dumps(
                    {"acc": agent_account(f"x{n}"), "user": f"U{n:055d}"}
                )
                await spock.publish(
                    subject,
                    encode(SimStart(task="book a flight", agent=f"x{n}")),
                    reply=f"_INBOX.{secrets.token_hex(8)}.x",
                    headers={REQUEST_INFO: made_up},
                )
            await spock.flush()
            with anyio.fail_after(20):
                await all_in.wait()
            await sub.unsubscribe()
            # All 320 were Spock's: 16 sessions, then its own quota; never the
            # global limit, never Zora's.
            assert answers.count("started") == DEFAULT_PER_CLIENT == 16
            assert answers.count("session_quota") == sent - 16
            assert "too_many_sessions" not in answers
            # Zora still opens her own sixteen.
            mine = [
                outcome(await ask(zora, subject, SimStart(task="t", agent="zora")))
                for _ in range(DEFAULT_PER_CLIENT)
            ]
            assert mine == ["started"] * DEFAULT_PER_CLIENT
            # And Spock asking in its own name is still held to its quota.
            again = await ask(spock, subject, SimStart(task="t", agent="spock"))
            assert outcome(again) == "session_quota"
            assert isinstance(again, SimError)
            assert "'spock'" in again.message
    assert DEFAULT_LIMITS.sessions == 256  # the global limit none of this reached


async def test_another_agent_cannot_step_or_end_a_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with accounts_server(tmp_path) as d:
        spock_key = public_key_of(d.seeds["spock"])
        forged_spock = json.dumps({"acc": agent_account("spock"), "user": spock_key})
        async with (
            secured_actors(d, tmp_path, monkeypatch, "simulator"),
            d.client("spock") as spock,
            d.client("zora") as zora,
            d.client("operator") as operator,
        ):
            start = rpc(d.world, "sim.start")
            step, end = rpc(d.world, "sim.step"), rpc(d.world, "sim.end")
            started = await ask(spock, start, SimStart(task="book a flight"))
            assert isinstance(started, SimStarted)
            sid = started.session_id
            stepping = SimStep(
                session_id=sid, message={"role": "assistant", "content": ASK}
            )
            for headers in (None, {REQUEST_INFO: forged_spock}):
                taken = await ask(zora, step, stepping, headers)
                assert isinstance(taken, SimError)
                assert taken.name == "not_your_session"
                ended = await ask(zora, end, SimEnd(session_id=sid), headers)
                assert isinstance(ended, SimError)
                assert ended.name == "not_your_session"
            # Untouched: Spock steps it and ends it.
            assert isinstance(await ask(spock, step, stepping), SimStepReply)
            assert isinstance(await ask(spock, end, SimEnd(session_id=sid)), SimEnded)
            # The operator (inside the actors' account) may end anyone's session.
            other = await ask(zora, start, SimStart(task="book a flight"))
            assert isinstance(other, SimStarted)
            closed = await ask(operator, end, SimEnd(session_id=other.session_id))
            assert isinstance(closed, SimEnded)


async def test_an_agent_reads_its_own_view_and_worldview_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with accounts_server(tmp_path) as d:
        zora_key = public_key_of(d.seeds["zora"])
        forged_zora = json.dumps({"acc": agent_account("zora"), "user": zora_key})
        async with (
            secured_actors(d, tmp_path, monkeypatch, "projector"),
            d.client("spock") as spock,
            d.client("operator") as operator,
        ):
            view, before = rpc(d.world, "view"), rpc(d.world, "before")
            now = datetime.now(UTC)
            for headers in (None, {REQUEST_INFO: forged_zora}):
                for subject, request in (
                    (view, GetView(agent="zora")),
                    (before, Before(agent="zora", query="next?", at=now)),
                ):
                    refused = await ask(spock, subject, request, headers)
                    assert isinstance(refused, RpcError)
                    assert refused.code == "invalid"
                    assert "'spock' may not read as agent 'zora'" in refused.message
            own = await ask(spock, view, GetView(agent="spock"))
            assert isinstance(own, ViewReply)
            mine = await ask(spock, before, Before(agent="spock", query="q", at=now))
            assert isinstance(mine, WorldviewReply)
            # The operator reads as anyone.
            theirs = await ask(operator, view, GetView(agent="zora"))
            assert isinstance(theirs, ViewReply)


async def test_with_the_generated_accounts_a_forged_header_names_the_real_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on the layout ``worldline creds`` writes (``AGENT_<name>`` accounts,
    each actor its own user): Spock's starts forging Zora's header and name are
    Spock's; Spock cannot read Zora's view through the SDK."""
    with secured_server(tmp_path, "attest") as s:
        zora_auth = load_credentials(s.creds("zora"))
        assert zora_auth is not None
        zora_key = zora_auth.public_key
        forged = json.dumps({"acc": agent_account("zora"), "user": zora_key})
        async with AsyncExitStack() as actors:
            for name in ACTOR_NAMES:  # each as its own user, as secured.py runs them
                monkeypatch.setenv(CREDS_ENV, str(s.creds(name)))
                index = make_index(tmp_path) if name == "simulator" else None
                spec = build(name, sim_index=index)
                await actors.enter_async_context(
                    running([spec], url=s.url, data=s.data)
                )
            monkeypatch.delenv(CREDS_ENV)
            await declared_by_the_operator(s)
            subject = rpc(s.world, "sim.start")
            async with raw(s, "spock") as spock, raw(s, "zora") as zora:
                headers = {REQUEST_INFO: forged}
                start = SimStart(task="t", agent="zora")
                answers = [
                    outcome(await ask(spock, subject, start, headers))
                    for _ in range(20)
                ]
                assert answers == ["started"] * 16 + ["session_quota"] * 4
                theirs = [
                    outcome(await ask(zora, subject, start))
                    for _ in range(DEFAULT_PER_CLIENT)
                ]
                assert theirs == ["started"] * DEFAULT_PER_CLIENT
            async with worldline.connect(
                s.url, world=s.world, agent="spock", creds=s.creds("spock")
            ) as w:
                assert await w.view() is not None
                with pytest.raises(BadRequest, match="may not read as agent 'zora'"):
                    await w.view("zora")

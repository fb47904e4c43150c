"""A real nats-server run with the ``auth.conf`` that ``worldline creds`` generates for
the crew of ``examples/crew.toml``, and the actors each as its own user: what the
security tests share."""

from __future__ import annotations

from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import msgspec

import worldline
from tests.support import running, unique_world
from worldline.actors.registry import build
from worldline.actors.runtime.auth import CREDS_ENV
from worldline.actors.runtime.bus import connect as bus_connect
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.ops.creds import write_credentials
from worldline.protocols.subjects import ACTOR_NAMES
from worldline.protocols.world import OPERATOR
from worldline.sdk.declaration import load_declaration

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    import pytest
    from nats.aio.client import Client as NATS

    from worldline.protocols.world import WorldDecl

__all__ = [
    "CREW_TOML",
    "PILOT",
    "Secured",
    "actors_as_own_users",
    "crew",
    "declared_by_the_operator",
    "logged",
    "raw",
    "secured_server",
]

CREW_TOML = Path(__file__).resolve().parents[2] / "examples" / "crew.toml"
PILOT = "project:soteria-pilot-conversion"


def crew(world: str) -> WorldDecl:
    """The example crew's declaration, renamed to ``world``."""
    decl = load_declaration(CREW_TOML)
    return msgspec.structs.replace(
        decl, world=msgspec.structs.replace(decl.world, id=world)
    )


@dataclass
class Secured:
    """A server that requires credentials, the folder they were written to, the
    world they were written for, and a data folder for the actors' stores."""

    url: str
    out: Path
    world: str
    data: Path

    def creds(self, who: str) -> Path:
        """The credentials file of an agent, an actor or the operator."""
        if who == OPERATOR:
            return self.out / f"{OPERATOR}.creds"
        if who in ACTOR_NAMES:
            return self.out / "actors" / f"{who}.creds"
        return self.out / "agents" / f"{who}.creds"


@contextmanager
def secured_server(tmp_path: Path, prefix: str) -> Iterator[Secured]:
    """Credentials for a fresh world named from ``prefix``, and a server that
    requires them."""
    world = unique_world(prefix)
    out = tmp_path / "creds"
    write_credentials([crew(world)], out)
    with EmbeddedNats(tmp_path / "nats", config=out / "auth.conf") as server:
        yield Secured(server.url, out, world, tmp_path / "actors")


@asynccontextmanager
async def actors_as_own_users(
    s: Secured, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[None]:
    """Every actor with its own credentials, each spec built as ``worldline actor
    NAME --creds actors/NAME.creds`` builds it (so the materializer runs secured: a
    world's first declaration must come from the operator)."""
    async with AsyncExitStack() as stack:
        for name in ACTOR_NAMES:
            monkeypatch.setenv(CREDS_ENV, str(s.creds(name)))
            spec = build(name)
            await stack.enter_async_context(running([spec], url=s.url, data=s.data))
        monkeypatch.delenv(CREDS_ENV)
        yield


async def declared_by_the_operator(s: Secured) -> None:
    """Declare the crew world as the operator, as deploy/credentials.md says."""
    async with worldline.connect(
        s.url, world=s.world, agent=OPERATOR, creds=s.creds(OPERATOR)
    ) as operator:
        await operator.declare(crew(s.world))


@asynccontextmanager
async def raw(s: Secured, who: str) -> AsyncIterator[NATS]:
    """A plain connection with ``who``'s credentials, named ``probe-<who>``."""
    nc = await bus_connect(s.url, name=f"probe-{who}", creds=s.creds(who))
    try:
        yield nc
    finally:
        await nc.close()


async def logged(caplog: pytest.LogCaptureFixture, *parts: str) -> None:
    """Wait until one captured log line holds every one of ``parts`` (any case)."""
    wanted = [part.lower() for part in parts]
    with anyio.fail_after(5):
        while True:
            lines = [r.getMessage().lower() for r in caplog.records]
            if any(all(part in line for part in wanted) for line in lines):
                return
            await anyio.sleep(0.02)

"""The change feed the console follows: an ordered JetStream consumer of the world's
``WL_STATE`` subjects (new messages only), as every other reader of the feed.

Each message bumps :attr:`Feed.version` and wakes whoever waits in
:meth:`Feed.wait_past`; the page's event stream turns that into one ``change`` event
per burst, and the page reads its panels again. The consumer is ephemeral: a gateway
that restarts simply follows from the newest change.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
from nats.js.api import DeliverPolicy

from worldline.protocols.subjects import state

if TYPE_CHECKING:
    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg

__all__ = ["Feed"]

log = logging.getLogger("worldline.console")


class Feed:
    """How many changes the world's feed has carried since the gateway started."""

    def __init__(self) -> None:
        self.version = 0
        self.kinds: set[str] = set()  # change kinds since the last event sent
        self.following = False
        self._changed = anyio.Event()

    def bump(self, kind: str) -> None:
        self.version += 1
        self.kinds.add(kind)
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_past(self, version: int, *, within: float) -> bool:
        """Wait until the feed is past ``version`` (True) or ``within`` seconds
        passed (False)."""
        with anyio.move_on_after(within):
            while self.version <= version:
                await self._changed.wait()
        return self.version > version

    async def follow(self, nc: NATS, world: str) -> None:
        """Follow ``world``'s change feed on ``nc`` until cancelled."""

        async def on_change(msg: Msg) -> None:
            self.bump(msg.subject.rsplit(".", 1)[-1])

        js = nc.jetstream()
        sub = await js.subscribe(
            state(world, "*"),
            cb=on_change,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
        )
        self.following = True
        log.info("console: following the change feed of world %r", world)
        try:
            await anyio.sleep_forever()
        finally:
            self.following = False
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await sub.unsubscribe()

"""Agents' startup views as the projector stores them in ``wl-views``: read by key,
or watched as they change. Mixed into :class:`worldline.sdk.client.World` through
:class:`worldline.sdk.crew.CrewMixin`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import nats.js.errors
from nats.js import api

from worldline.protocols.subjects import VIEWS, bucket_key, bucket_put, bucket_stream
from worldline.sdk.errors import bus_errors
from worldline.sdk.undecodable import view_or_none

if TYPE_CHECKING:
    import contextlib
    from collections.abc import AsyncIterator, Callable

    from nats.js import JetStreamContext

    from worldline.protocols.messages import AgentView

__all__ = ["WATCH_POLL", "ViewsMixin"]

# Seconds between reads of a watched view by an agent's own account.
WATCH_POLL = 0.5


class ViewsMixin:
    """Stored views; needs ``_js``, ``_url``, ``world``, ``agent``,
    ``_agent_account`` and ``_permitted``."""

    _js: JetStreamContext
    _url: str = "the server"
    _agent_account: bool = False
    world: str
    agent: str

    def _permitted(
        self, wanted: str | Callable[[str], bool]
    ) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    async def stored_view(self, agent: str | None = None) -> AgentView | None:
        """The view the projector last pushed to the ``wl-views`` bucket."""
        entry = await self._stored_view_entry(agent or self.agent)
        return None if entry is None else entry[1]

    async def _stored_view_entry(
        self, agent: str
    ) -> tuple[int, AgentView | None] | None:
        """The stored view's revision and view, or None when there is none."""
        with (
            self._permitted(lambda subject: VIEWS.bucket in subject),
            bus_errors(self._url, "reading the stored view"),
        ):
            kv = await self._js.key_value(VIEWS.bucket)
            try:
                entry = await kv.get(bucket_key(self.world, agent))
            except nats.js.errors.KeyNotFoundError:
                return None
        if entry.value is None:
            return None
        revision = int(entry.revision or 0)
        return revision, view_or_none(agent, revision, entry.value)

    async def watch(self, agent: str | None = None) -> AsyncIterator[AgentView]:
        """The agent's startup view with its standing worldview: the latest one at
        once, then each one the projector publishes (only when its bytes change)."""
        if self._agent_account:  # no consumer of its own: read the key as it moves
            async for polled in self._poll_view(agent or self.agent):
                yield polled
            return
        subject = bucket_put(VIEWS, bucket_key(self.world, agent or self.agent))
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
            inactive_threshold=60.0,
        )
        with bus_errors(self._url, "watching the view"):
            sub = await self._js.pull_subscribe(
                subject, stream=bucket_stream(VIEWS), config=config
            )
        try:
            while True:
                try:
                    msgs = await sub.fetch(16, timeout=1.0)
                except TimeoutError:
                    continue
                for msg in msgs:
                    revision = msg.metadata.sequence.stream
                    view = view_or_none(agent or self.agent, revision, msg.data)
                    if view is not None:
                        yield view
        finally:
            await sub.unsubscribe()

    async def _poll_view(self, agent: str) -> AsyncIterator[AgentView]:
        """Each new revision of ``agent``'s stored view, read by key every
        ``WATCH_POLL`` seconds (an agent's own account may not create a consumer)."""
        seen = -1
        while True:
            entry = await self._stored_view_entry(agent)
            if entry is not None and entry[0] != seen:
                seen = entry[0]
                if entry[1] is not None:
                    yield entry[1]
            await anyio.sleep(WATCH_POLL)

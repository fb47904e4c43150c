"""The start fence: a (re)started actor that serves reads from state its own durables
feed (the projector) answers them only once it has applied what its feed held when
it started.

Without it, right after a crash or restart the replica answers from where its store
stopped while it replays the backlog, and a client that has written nothing (its
read fence is 0) reads the past as current. At start, after its inputs are bound,
the actor records each owned input's stream end (only where the durable has a
backlog); a request that arrives before the store has applied that far waits, at
most :data:`READ_FENCE_WAIT` seconds. If the replica is still behind then, that
request and every one after it are answered at once with an error naming how far it
got, until it has caught up: an answer, never a stale one and never a pile of
requests each waiting out the bound.

Actors with a lease (the materializer) serve only while they hold it and are not
fenced here; inputs whose filter is narrower than their stream are not fenced (the
stream's end may be a message they never receive).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Final

import anyio

from worldline.actors.runtime.declare import answered
from worldline.protocols.messages import RpcError

if TYPE_CHECKING:
    from nats.js import JetStreamContext

    from worldline.actors.runtime.spec import ActorSpec
    from worldline.actors.runtime.store import Store

__all__ = ["READ_FENCE_WAIT", "StartFence"]

READ_FENCE_WAIT: Final = 5.0  # seconds a read waits for the catch-up (SDK waits 10)
_POLL: Final = 0.02  # seconds between looks at the store's applied sequence


class StartFence:
    """What a restarted actor's inputs must apply before its reads are current."""

    def __init__(self, store: Store, targets: dict[str, int]) -> None:
        self._store = store
        self._targets = dict(targets)  # durable -> stream sequence held at start
        self._gave_up = False  # a read waited the whole bound: stop waiting

    @classmethod
    async def at_start(
        cls, js: JetStreamContext, store: Store, spec: ActorSpec
    ) -> StartFence | None:
        """The fence for ``spec``'s services, or None when there is nothing to wait
        for (no owned input with a backlog, or an actor with a lease). Call it after
        the inputs are bound and before the services subscribe."""
        if spec.lease or not spec.services:
            return None
        targets = {}
        for inp in spec.inputs:
            consumer = inp.consumer
            if not inp.skip_applied or consumer.stream.subjects != (
                consumer.filter_subject,
            ):
                continue
            # Inside the start-up retry (a cluster may still be electing a leader).
            name = consumer.stream.name
            info = await answered(f"stream {name}", partial(js.stream_info, name))
            end = int(info.state.last_seq)
            if end > store.applied_seq(consumer.durable):
                targets[consumer.durable] = end
        return cls(store, targets) if targets else None

    def caught_up(self) -> bool:
        """Whether every fenced input has applied what its stream held at start."""
        if self._targets:
            self._targets = {
                durable: end
                for durable, end in self._targets.items()
                if self._store.applied_seq(durable) < end
            }
        return not self._targets

    async def hold(self) -> RpcError | None:
        """Wait (bounded) until caught up; None then, else the error to answer."""
        if self.caught_up():
            return None
        if not self._gave_up:
            with anyio.move_on_after(READ_FENCE_WAIT):
                # Polling one LMDB read: the consume loop has no hook to signal from.
                while not self.caught_up():  # noqa: ASYNC110
                    await anyio.sleep(_POLL)
                return None
            self._gave_up = True
            if self.caught_up():
                return None
        behind = ", ".join(
            f"{durable} applied {self._store.applied_seq(durable)} of {end}"
            for durable, end in sorted(self._targets.items())
        )
        return RpcError(
            code="internal",
            message=f"{self._store.actor} is catching up after a restart ({behind}: "
            "the stream's end when it started) and does not answer from the past; "
            "retry in a few seconds, or ask another replica",
            retry_after=1.0,
        )

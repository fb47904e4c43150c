"""The blocking SDK, for scripts and notebooks that have no event loop of their own.

``with worldline.sync.connect(url, world="crew", agent="ada") as world:`` then
``world.before("draft the memo")``, ``world.add(...)``, ``for view in world.watch():``.

Every public coroutine method of :class:`worldline.sdk.client.World` has a blocking twin
here with the same signature, and each async iterator (``watch``, ``export``,
``iter_list``, ``iter_search``) a blocking iterator. They run on one background event
loop (anyio's blocking portal, asyncio backend) that owns the single NATS connection
for the ``with`` block. Any thread may call them; a thread that runs an event loop
may not (it would block its own loop): there, use the async API (``await`` at the
top level of a notebook).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from worldline.sdk.client import World
from worldline.sdk.client import connect as async_connect
from worldline.sdk.errors import WorldlineError
from worldline.sdk.hooks import Extracted, Turn, observed, reported

if TYPE_CHECKING:
    import os
    from collections.abc import (
        AsyncIterator,
        Callable,
        Coroutine,
        Iterator,
        Sequence,
    )
    from datetime import datetime

    from worldline.protocols.worldview import Worldview
    from worldline.sdk.crew import InboxItem
    from worldline.sdk.turns import Role

__all__ = ["LoopRunning", "SyncWorld", "connect"]

P = ParamSpec("P")
R = TypeVar("R")
Y = TypeVar("Y")


class LoopRunning(WorldlineError, RuntimeError):
    """The blocking SDK was called from a thread that runs an event loop."""


def _refuse_running_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise LoopRunning(
        "worldline.sync blocks, and this thread runs an event loop (Jupyter, an "
        "async app): use the async API instead, `async with worldline.connect(...) "
        "as world:` and `await world.before(...)` (top-level await works in Jupyter)"
    )


class _Blocking(Generic[P, R]):
    """A blocking twin of one ``World`` coroutine method (same signature)."""

    def __init__(self, method: Callable[Concatenate[World, P], Coroutine[Any, Any, R]]):
        self._method = method
        self.__doc__ = method.__doc__

    def __get__(self, obj: SyncWorld, owner: type[SyncWorld]) -> Callable[P, R]:
        method = self._method

        @functools.wraps(method)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return obj._call(functools.partial(method, obj.aio, *args, **kwargs))

        return call


class _Iterating(Generic[P, Y]):
    """A blocking iterator over one ``World`` async iterator method."""

    def __init__(self, method: Callable[Concatenate[World, P], AsyncIterator[Y]]):
        self._method = method
        self.__doc__ = method.__doc__

    def __get__(
        self, obj: SyncWorld, owner: type[SyncWorld]
    ) -> Callable[P, Iterator[Y]]:
        method = self._method

        @functools.wraps(method)
        def call(*args: P.args, **kwargs: P.kwargs) -> Iterator[Y]:
            return obj._iterate(method(obj.aio, *args, **kwargs))

        return call


async def _next(iterator: AsyncIterator[Y]) -> tuple[bool, Y | None]:
    try:
        return True, await anext(iterator)
    except StopAsyncIteration:
        return False, None


class SyncWorld:
    """One agent's blocking handle on one world. Build it with :func:`connect`.

    ``aio`` is the async :class:`~worldline.sdk.client.World` underneath (its coroutines
    run only on this handle's loop thread).
    """

    def __init__(self, world: World, portal: BlockingPortal) -> None:
        self.aio = world
        self._portal = portal

    @property
    def world(self) -> str:
        return self.aio.world

    @property
    def agent(self) -> str:
        return self.aio.agent

    def _call(self, fn: Callable[[], Coroutine[Any, Any, R]]) -> R:
        _refuse_running_loop()
        result: R = self._portal.call(fn)
        return result

    def _iterate(self, iterator: AsyncIterator[Y]) -> Iterator[Y]:
        try:
            while True:
                more, item = self._call(functools.partial(_next, iterator))
                if not more:
                    return
                yield item  # type: ignore[misc]  # Y | None is Y when more is True
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                # RuntimeError: the portal has stopped, and its loop is gone.
                with contextlib.suppress(RuntimeError):
                    self._portal.call(aclose)

    # --- beliefs (worldline.sdk.beliefs) ----------------------------------------------
    add = _Blocking(World.add)
    evidence = _Blocking(World.evidence)
    retract = _Blocking(World.retract)
    resolve = _Blocking(World.resolve)
    trust = _Blocking(World.trust)
    assess_sources = _Blocking(World.assess_sources)
    sources = _Blocking(World.sources)
    load = _Blocking(World.load)  # worldline.sdk.batch: many adds and evidence
    relate = _Blocking(World.relate)
    unrelate = _Blocking(World.unrelate)
    edge_evidence = _Blocking(World.edge_evidence)
    observe = _Blocking(World.observe)
    after = _Blocking(World.after)
    get = _Blocking(World.get)
    list = _Blocking(World.list)
    list_page = _Blocking(World.list_page)
    iter_list = _Iterating(World.iter_list)
    search = _Blocking(World.search)
    iter_search = _Iterating(World.iter_search)
    read = _Blocking(World.read)
    contradictions = _Blocking(World.contradictions)
    resolve_contradiction = _Blocking(World.resolve_contradiction)
    settle_slot = _Blocking(World.settle_slot)
    calibration = _Blocking(World.calibration)
    record_forecast = _Blocking(World.record_forecast)
    before = _Blocking(World.before)
    trace = _Blocking(World.trace)
    trace_edge = _Blocking(World.trace_edge)

    # --- the crew world (worldline.sdk.crew) ------------------------------------------
    sync = _Blocking(World.sync)
    declare = _Blocking(World.declare)
    write = _Blocking(World.write)
    upsert = _Blocking(World.upsert)
    link = _Blocking(World.link)
    unlink = _Blocking(World.unlink)
    put_work = _Blocking(World.put_work)
    read_world = _Blocking(World.read_world)
    view = _Blocking(World.view)
    stored_view = _Blocking(World.stored_view)
    state_hash = _Blocking(World.state_hash)
    inbox = _Blocking(World.inbox)
    ack = _Blocking(World.ack)
    set_presence = _Blocking(World.set_presence)
    presence = _Blocking(World.presence)
    who = _Blocking(World.who)
    watch = _Iterating(World.watch)
    export = _Iterating(World.export)
    backup = _Iterating(World.backup)

    # --- the simulator (worldline.sdk.sim) --------------------------------------------
    sim_start = _Blocking(World.sim_start)
    sim_step = _Blocking(World.sim_step)
    sim_end = _Blocking(World.sim_end)
    forecast = _Blocking(World.forecast)
    before_with_forecasts = _Blocking(World.before_with_forecasts)

    def release(self, items: Sequence[InboxItem]) -> None:
        """Hand inbox items back unacknowledged: the next ``inbox()`` sees them."""
        for item in items:
            self._call(item.release)

    # --- hooks (worldline.hooks) --------------------------------------------------
    def observed(
        self,
        text: str,
        *,
        source: str = "",
        role: Role = "artifact",
        wait: float | None = None,
        context: str = "",
        observed_at: datetime | None = None,
    ) -> Extracted:
        """``observe``, then wait until what the extractor reads is applied."""
        return self._call(
            functools.partial(
                observed,
                self.aio,
                text,
                source=source,
                role=role,
                wait=wait,
                context=context,
                observed_at=observed_at,
            )
        )

    def reported(self, output: str, *, wait: float | None = None) -> Extracted:
        """``after``, then wait until what the extractor reads is applied."""
        return self._call(functools.partial(reported, self.aio, output, wait=wait))

    @contextmanager
    def turn(
        self, query: str, *, at: datetime | None = None, wait: float | None = None
    ) -> Iterator[Turn]:
        """``before(query)`` on entry; ``after(turn.output)`` on a clean exit (see
        :func:`worldline.hooks.turn`: a turn that raises reports nothing)."""
        current = Turn(query=query, worldview=self.before(query, at=at))
        yield current
        if current.output is not None:
            current.extracted = self.reported(current.output, wait=wait)

    def agent_step(self, step: Callable[[str, Worldview], str]) -> Callable[[str], str]:
        """Decorate ``def step(query, worldview) -> str`` into the agent function
        ``def step(query) -> str`` that reads the worldview first and reports its
        output after (nothing if it raises)."""

        @functools.wraps(step)
        def run(query: str) -> str:
            with self.turn(query) as current:
                output = step(query, current.worldview)
                current.output = output
            return output

        return run


@contextmanager
def connect(
    url: str | None = None,
    *,
    world: str = "default",
    agent: str | None = None,
    request_timeout: float = 10.0,
    creds: str | os.PathLike[str] | None = None,
    require_declared: bool | None = None,
) -> Iterator[SyncWorld]:
    """Connect to a worldline deployment as ``agent`` in ``world``, blocking; without
    ``url``, the bus is found as :func:`worldline.connect` finds it.

    ``creds`` is the agent's credentials file from ``worldline creds`` (default:
    ``$WORLDLINE_CREDS``, if set), for a server that requires them;
    ``require_declared`` as :func:`worldline.connect` takes it.

    Raises:
        LoopRunning: called from a thread that runs an event loop.
        BadRequest: the world or agent name is not a valid subject token.
        BusUnavailable: NATS cannot be reached at ``url``.
    """
    _refuse_running_loop()
    handle = async_connect(
        url,
        world=world,
        agent=agent,
        request_timeout=request_timeout,
        creds=creds,
        require_declared=require_declared,
    )
    with (
        start_blocking_portal(backend="asyncio", name="worldline-sync") as portal,
        portal.wrap_async_context_manager(handle) as connected,
    ):
        yield SyncWorld(connected, portal)

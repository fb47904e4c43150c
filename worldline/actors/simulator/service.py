"""Simulator actor: real transitions in, bounded world-model sessions served.

Inbox: ``wl.*.derived.transition.*`` through durable ``simulator``. Accepts:
``Transition`` (counted per world). Serves (queue group ``simulator``):
``wl.<world>.rpc.sim.status``, ``sim.start``, ``sim.step``, ``sim.end`` and
``sim.forecast`` (the real outcomes of the nearest transitions after actions like a
move, or "no grounding"; see ``forecast.py``).

A step takes an assistant text message (answered with the user's reply) or an
assistant message with ``tool_calls`` (answered with one tool result per call, keyed
by call id). Each client (``SimStart.agent``) may hold at most ``per_client`` open
sessions.

Sessions live in this process's memory only (the seed's rule: ending or expiring a
session removes its transcript), so run one simulator per deployment while sessions
are in use: a queue group of several would send a session's steps to replicas that do
not hold it. Predictions come from a read-only index artifact (``--index DIR``, built
by ``worldline sim index``) through the local, deterministic provider, or through an
OpenAI-compatible endpoint when ``WORLDLINE_LLM_URL`` and ``WORLDLINE_LLM_MODEL`` are
set (its failures fail the step by name; there is no silent fallback).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from worldline.actors.runtime.consume import Clock, utcnow
from worldline.actors.runtime.serve import requester
from worldline.actors.runtime.spec import ActorSpec, Input, Reader, Service
from worldline.actors.simulator import core
from worldline.actors.simulator.forecast import forecast
from worldline.actors.simulator.http_provider import HttpConfig, HttpProvider
from worldline.actors.simulator.index import load
from worldline.actors.simulator.provider import LocalProvider
from worldline.actors.simulator.retrieval import check_exclusions
from worldline.actors.simulator.sessions import (
    DEFAULT_PER_CLIENT,
    Provider,
    SessionError,
    Sessions,
)
from worldline.protocols.messages import (
    SIMULATOR_INBOX,
    SIMULATOR_RPC,
    Message,
    SimEnd,
    SimEnded,
    SimError,
    SimForecast,
    SimStart,
    SimStarted,
    SimStatus,
    SimStep,
    SimStepReply,
)
from worldline.protocols.simulator import DEFAULT_LIMITS, Limits
from worldline.protocols.subjects import SIMULATOR_IN, rpc_pattern

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.actors.simulator.index import TransitionIndex

__all__ = ["SessionService", "spec"]


class SessionService:
    """The shell around :class:`Sessions`: the clock, the index and the provider."""

    def __init__(
        self,
        index: TransitionIndex | None,
        *,
        limits: Limits = DEFAULT_LIMITS,
        clock: Clock = utcnow,
        rng: random.Random | None = None,
        per_client: int = DEFAULT_PER_CLIENT,
    ) -> None:
        self.index = index
        self.provider: Provider | None = None
        if index is not None:
            # Off by default: WORLDLINE_LLM_URL (and _MODEL, _KEY) select a model.
            config = HttpConfig.from_env()
            self.provider = (
                LocalProvider(index) if config is None else HttpProvider(index, config)
            )
        self.sessions = Sessions(
            limits, rng=rng or random.SystemRandom(), per_client=per_client
        )
        self.clock = clock

    def serve(
        self,
        reader: Reader,
        request: SimStatus | SimStart | SimStep | SimEnd | SimForecast,
        world: str,
    ) -> Message:
        if isinstance(request, SimStatus):
            return core.serve(reader, request, world)
        try:
            if isinstance(request, SimForecast):
                return self._forecast(request)
            return self._sessions(request, world)
        except SessionError as exc:
            return SimError(name=exc.name, message=exc.message)

    def _forecast(self, request: SimForecast) -> Message:
        """The grounded forecast for a move: stateless, no session needed."""
        if self.index is None:
            raise SessionError(
                "no_index",
                "this simulator has no index, so it has nothing to ground a forecast "
                "on; start it with --index DIR (build one with `worldline sim index "
                "TRACES... --out DIR`)",
            )
        return forecast(
            self.index,
            request.move,
            context=request.context,
            k=request.k,
            exclude_lineages=request.exclude_lineages,
        )

    def _sessions(self, request: SimStart | SimStep | SimEnd, world: str) -> Message:
        now = self.clock()
        match request:
            case SimStart():
                if self.index is None:
                    raise SessionError(
                        "no_index",
                        "this simulator has no index; start it with --index DIR "
                        "(build one with `worldline sim index TRACES... --out DIR`)",
                    )
                # An exclusion the index does not hold is named now, not at the
                # first step.
                check_exclusions(self.index, request.exclude_lineages)
                session = self.sessions.start(
                    world,
                    request.task,
                    request.context,
                    now,
                    tuple(request.exclude_lineages),
                    # The quota binds who asked as the bus tells it (a credential's
                    # key, else the connection), never the agent the body names.
                    client=requester() or request.agent,
                    agent=request.agent,
                )
                return SimStarted(
                    session_id=session.id,
                    limits=self.sessions.limits,
                    index=self.index.manifest.id,
                    per_client=self.sessions.per_client,
                )
            case SimStep():
                if self.provider is None:
                    raise SessionError(
                        "no_index",
                        "this simulator has no index, so it holds no sessions; start "
                        "it with --index DIR",
                    )
                replies, prediction = self.sessions.step(
                    world, request.session_id, request.message, now, self.provider
                )
                return SimStepReply(
                    message=replies[0],
                    terminal=prediction.terminal,
                    grounding=list(prediction.grounding),
                    messages=replies,
                )
            case SimEnd():
                self.sessions.get(world, request.session_id, now)
                self.sessions.end(world, request.session_id)
                return SimEnded(session_id=request.session_id)


def spec(index: Path | None = None) -> ActorSpec:
    sessions = SessionService(None if index is None else load(index))
    services = tuple(
        Service(rpc_pattern(verb), "simulator", SIMULATOR_RPC, sessions.serve)
        for verb in ("sim.status", "sim.start", "sim.step", "sim.end", "sim.forecast")
    )
    return ActorSpec(
        name="simulator",
        inputs=(Input(SIMULATOR_IN, SIMULATOR_INBOX, core.handle, skip_applied=False),),
        services=services,
    )

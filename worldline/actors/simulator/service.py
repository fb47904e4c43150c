"""Simulator actor: real transitions in, bounded world-model sessions served.

Inbox: ``wl.*.derived.transition.*`` through durable ``simulator``. Accepts:
``Transition`` (counted per world). Serves (queue group ``simulator``):
``wl.<world>.rpc.sim.status``, ``sim.start``, ``sim.step``, ``sim.end`` and
``sim.forecast`` (the real outcomes of the nearest transitions after actions like a
move, or "no grounding"; see ``forecast.py``).

A step takes an assistant text message (answered with the user's reply) or an
assistant message with ``tool_calls`` (answered with one tool result per call, keyed
by call id). Each client may hold at most ``per_client`` open sessions, and only the
client that opened a session may step or end it (the operator may end any). The
client is who asks as the server vouches for it on a secured deploy
(``worldline.actors.runtime.requester``); on the open bus only the agent a start
names, a claim, counts (a step or an end names none there: the session id is its
key). A session idle for ``$WORLDLINE_SIM_EXPIRY`` seconds (default 600) expires.

Sessions live in this process's memory only (the seed's rule: ending or expiring a
session removes its transcript), so run one simulator per deployment while sessions
are in use: a queue group of several would send a session's steps to replicas that do
not hold it. Predictions come from a read-only index artifact (``--index DIR``, built
by ``worldline sim index``) through the local, deterministic provider, or through an
OpenAI-compatible endpoint when ``WORLDLINE_LLM_URL`` and ``WORLDLINE_LLM_MODEL`` are
set (its failures fail the step by name; there is no silent fallback).
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.runtime.consume import Clock, utcnow
from worldline.actors.runtime.serve import requester
from worldline.actors.runtime.spec import ActorSpec, Input, Reader, Service
from worldline.actors.simulator import core, track
from worldline.actors.simulator.forecast import forecast
from worldline.actors.simulator.http_provider import HttpConfig, HttpProvider
from worldline.actors.simulator.index import load
from worldline.actors.simulator.provider import LocalProvider
from worldline.actors.simulator.retrieval import check_exclusions
from worldline.actors.simulator.sessions import (
    DEFAULT_EXPIRY,
    DEFAULT_PER_CLIENT,
    SESSION_LIMITS,
    Provider,
    SessionError,
    Sessions,
)
from worldline.actors.simulator.threads import pin_blas_threads
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
    SimStatusReply,
    SimStep,
    SimStepReply,
)
from worldline.protocols.subjects import SIMULATOR_IN, rpc_pattern

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.actors.simulator.index import TransitionIndex
    from worldline.protocols.simulator import Limits

__all__ = ["EXPIRY_ENV", "SessionService", "expiry_from_env", "spec"]

EXPIRY_ENV: Final = "WORLDLINE_SIM_EXPIRY"


def expiry_from_env() -> float:
    """Seconds an idle session lives: ``$WORLDLINE_SIM_EXPIRY``, else 600.

    Raises:
        ValueError: the variable is not a positive number of seconds.
    """
    raw = os.environ.get(EXPIRY_ENV, "").strip()
    if not raw:
        return DEFAULT_EXPIRY
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise ValueError(
            f"{EXPIRY_ENV}={raw!r}: give the seconds an idle simulator session "
            f"lives, a positive number (default {DEFAULT_EXPIRY:g})"
        )
    return seconds


class SessionService:
    """The shell around :class:`Sessions`: the clock, the index and the provider."""

    def __init__(
        self,
        index: TransitionIndex | None,
        *,
        limits: Limits = SESSION_LIMITS,
        clock: Clock = utcnow,
        rng: random.Random | None = None,
        per_client: int = DEFAULT_PER_CLIENT,
        record: track.TrackRecord | None = None,
    ) -> None:
        self.index = index
        self.record = record  # the index's own track record (track.json), if kept
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
            status = core.serve(reader, request, world)
            if self.record is None or not isinstance(status, SimStatusReply):
                return status
            return msgspec.structs.replace(status, track=self.record.keys)
        try:
            if isinstance(request, SimForecast):
                return self._forecast(request)
            return self._sessions(request, world)
        except SessionError as exc:
            return SimError(
                name=exc.name, message=exc.message, similarity=exc.similarity
            )

    def _forecast(self, request: SimForecast) -> Message:
        """The grounded forecast for a move: stateless, no session needed."""
        if self.index is None:
            raise SessionError(
                "no_index",
                "this simulator has no index, so it has nothing to ground a forecast "
                "on; start it with --index DIR (build one with `worldline sim index "
                "TRACES... --out DIR`)",
            )
        reply = forecast(
            self.index,
            request.move,
            context=request.context,
            k=request.k,
            exclude_lineages=request.exclude_lineages,
        )
        if self.record is None:
            return reply
        return msgspec.structs.replace(reply, track=self.record.of(request.move))

    def _sessions(self, request: SimStart | SimStep | SimEnd, world: str) -> Message:
        now = self.clock()
        # Who asks: attested on a secured deploy; on the open bus the agent a start
        # claims, and nobody for a step or an end (the session id is the key there).
        asker = requester()
        owner = asker.key if asker.attested else None
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
                    # The quota binds who asked as the server vouches for it; only
                    # on the open bus the agent the body names (a claim).
                    client=asker.or_claim(request.agent).key,
                    agent=asker.or_claim(request.agent).label(),
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
                    world,
                    request.session_id,
                    request.message,
                    now,
                    self.provider,
                    client=owner,
                    best_guess=request.best_guess,
                )
                return SimStepReply(
                    message=replies[0],
                    terminal=prediction.terminal,
                    grounding=list(prediction.grounding),
                    messages=replies,
                    grounded=prediction.grounded,
                    similarity=prediction.similarity,
                    note=prediction.note,
                    support=list(prediction.support),
                )
            case SimEnd():
                # The operator may end anyone's session (to free a slot).
                ender = None if asker.operator else owner
                self.sessions.get(world, request.session_id, now, ender)
                self.sessions.end(world, request.session_id)
                return SimEnded(session_id=request.session_id)


def spec(index: Path | None = None, *, expiry: float | None = None) -> ActorSpec:
    """The simulator; ``expiry``: seconds an idle session lives (default
    ``$WORLDLINE_SIM_EXPIRY``, else 600). With an index, BLAS is pinned to
    ``$WORLDLINE_SIM_BLAS_THREADS`` threads (default 1; see ``threads.py``)."""
    seconds = expiry_from_env() if expiry is None else expiry
    limits = msgspec.structs.replace(SESSION_LIMITS, expiry=seconds)
    if index is not None:
        # A query is one memory-bound matrix-vector product: BLAS threads only
        # make its tail wait on a loaded machine ($WORLDLINE_SIM_BLAS_THREADS).
        pin_blas_threads()
    loaded = None if index is None else load(index)
    record = (
        None
        if loaded is None or index is None
        else track.load(index, loaded.manifest.id)
    )
    sessions = SessionService(loaded, limits=limits, record=record)
    services = tuple(
        Service(rpc_pattern(verb), "simulator", SIMULATOR_RPC, sessions.serve)
        for verb in ("sim.status", "sim.start", "sim.step", "sim.end", "sim.forecast")
    )
    return ActorSpec(
        name="simulator",
        inputs=(Input(SIMULATOR_IN, SIMULATOR_INBOX, core.handle, skip_applied=False),),
        services=services,
    )

"""The simulator half of the SDK: bounded world-model sessions over the bus.

A step is an assistant message: text (the reply is the user's next message) or
OpenAI-style ``tool_calls`` (the reply holds one ``role: "tool"`` result per call,
keyed by ``tool_call_id``), so an agent loop can append ``reply.messages`` to its
history and go on as it would against real tools and users.

A forecast (:meth:`SimMixin.forecast`) needs no session: the real observations that
followed actions like a move, each with how many retrieved transitions support it
and their lineages, or "no grounding" when nothing is close enough.
:meth:`SimMixin.before_with_forecasts` is ``before`` plus a forecast for each of the
worldview's top moves (``before`` itself is unchanged).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import msgspec
import nats.errors

from worldline.protocols.messages import (
    SIMULATOR_REPLY,
    RpcError,
    SimEnd,
    SimError,
    SimForecast,
    SimForecastReply,
    SimStart,
    SimStarted,
    SimStep,
    SimStepReply,
    encode,
)
from worldline.protocols.subjects import rpc
from worldline.protocols.worldview import Leaf, Worldview
from worldline.sdk.crew import validated
from worldline.sdk.errors import (
    BadRequest,
    BusUnavailable,
    ServerError,
    SimulationError,
)
from worldline.sdk.paging import PagingMixin
from worldline.sdk.undecodable import decode_reply

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from worldline.protocols.messages import ForecastTrack, Message

__all__ = [
    "FORECAST_MOVES",
    "NO_SIMULATOR_INDEX",
    "MoveForecast",
    "NoSimulator",
    "SimMixin",
    "WorldviewForecasts",
]

FORECAST_MOVES: Final = 3  # top moves of a worldview that get a forecast
NO_SIMULATOR_INDEX: Final = "no grounding (no simulator index)"


class NoSimulator(BusUnavailable):
    """No simulator answers this world's ``sim.*`` subjects (none is running)."""


class MoveForecast(msgspec.Struct, frozen=True, kw_only=True):
    """One of a worldview's top moves, the text asked about (the move's belief:
    its text after ``"<verb>: "``), and the forecast: grounded real outcomes, or
    ``grounded=False`` with a note (:data:`NO_SIMULATOR_INDEX` when no simulator
    with an index answers)."""

    move: Leaf
    asked: str
    forecast: SimForecastReply


class WorldviewForecasts(msgspec.Struct, frozen=True, kw_only=True):
    """``before``'s worldview, and a forecast for each of its top moves (at most
    :data:`FORECAST_MOVES`, in the order of ``view.moves``)."""

    view: Worldview
    forecasts: tuple[MoveForecast, ...] = ()


def _asked(move: Leaf) -> str:
    """What a move forecasts: its belief's text (``"Gather evidence on: X"`` asks
    about ``X``)."""
    _, sep, rest = move.text.partition(": ")
    return rest.strip() if sep and rest.strip() else move.text


class SimMixin(PagingMixin):
    """Open a session, step it with candidate actions, end it."""

    async def _sim(self, verb: Any, request: Message) -> Message:
        try:
            reply = await self._request(verb, request)
        except nats.errors.MaxPayloadError as exc:
            size = len(encode(request))
            limit = self._nc.max_payload
            raise BadRequest(
                f"the {verb} request is {size:,} bytes, over the bus's max_payload of "
                f"{limit:,} bytes: send less (a shorter message, context or task; "
                "sessions take at most 256 KiB of context and 64 KiB of task), or "
                "raise max_payload in the nats-server configuration"
            ) from exc
        if isinstance(reply, SimError):
            raise SimulationError(reply.name, reply.message, reply.similarity)
        return reply

    async def sim_start(
        self, task: str, *, context: str = "", exclude_lineages: Sequence[str] = ()
    ) -> SimStarted:
        """Open a session for ``task``; ``exclude_lineages`` stay out of retrieval."""
        request = SimStart(
            task=task,
            context=context,
            exclude_lineages=list(exclude_lineages),
            agent=self.agent,
        )
        reply = await self._sim("sim.start", request)
        if not isinstance(reply, SimStarted):
            raise BadRequest(f"unexpected reply to sim.start: {reply!r}")
        return reply

    async def sim_step(
        self,
        session_id: str,
        message: str | dict[str, Any],
        *,
        best_guess: bool = False,
    ) -> SimStepReply:
        """Send one assistant message (text, or an OpenAI-shaped dict, with
        ``tool_calls`` or without); get what follows (``reply.messages``: the
        user's message, or one tool result per call keyed by ``tool_call_id``) and
        whether the episode ended.

        Nothing recorded close enough (below the floor forecasts use, or a call to a
        tool or an id no recorded call names) is refused as ``no_grounding``, its
        ``similarity`` the nearest score; with ``best_guess`` the nearest answers
        anyway and ``reply.grounded`` is False (``reply.note`` says why).

        Raises:
            SimulationError: a named refusal (a limit, a malformed tool call, an
                unknown or expired session, nothing close enough to ground the
                prediction on).
            BadRequest: the message is larger than the bus carries.
        """
        if isinstance(message, str):
            message = {"role": "assistant", "content": message}
        reply = await self._sim(
            "sim.step",
            SimStep(session_id=session_id, message=message, best_guess=best_guess),
        )
        if not isinstance(reply, SimStepReply):
            raise BadRequest(f"unexpected reply to sim.step: {reply!r}")
        return reply

    async def sim_end(self, session_id: str) -> None:
        """Close the session; its transcript is dropped."""
        await self._sim("sim.end", SimEnd(session_id=session_id))

    async def _ask_forecast(self, request: SimForecast) -> SimForecastReply:
        """One ``sim.forecast`` request; no simulator at all is :class:`NoSimulator`
        (not the projector's "no responders" message)."""
        subject = rpc(self.world, "sim.forecast")
        try:
            with self._permitted(subject):
                msg = await self._nc.request(
                    subject, encode(validated(request)), timeout=self.timeout
                )
        except nats.errors.NoRespondersError as exc:
            raise NoSimulator(
                f"no simulator answers {subject}; start one with an index: "
                "`worldline up --sim-index DIR` or `worldline actor simulator "
                "--index DIR`"
            ) from exc
        except nats.errors.TimeoutError as exc:
            raise BusUnavailable(
                f"no answer on {subject} within {self.timeout:g}s"
            ) from exc
        reply = decode_reply(SIMULATOR_REPLY, msg.data, subject)
        if isinstance(reply, SimError):
            raise SimulationError(reply.name, reply.message, reply.similarity)
        if isinstance(reply, RpcError):
            if reply.code == "invalid":
                raise BadRequest(reply.message)
            raise ServerError(reply.message)
        if not isinstance(reply, SimForecastReply):
            raise BadRequest(f"unexpected reply to sim.forecast: {reply!r}")
        return reply

    async def forecast(
        self,
        move: str,
        *,
        context: str = "",
        k: int = 5,
        exclude_lineages: Sequence[str] = (),
    ) -> SimForecastReply:
        """What really followed actions like ``move`` (``name(arguments)``: a tool
        call; else a message): the distinct real observations of the ``k``
        (1-10) nearest transitions that score above the floor, each with its
        ``support``, ``lineages``, ``transitions`` and best ``similarity``; or
        ``grounded=False``, no outcomes, and a ``note`` starting "no grounding:".

        Raises:
            SimulationError: ``no_index`` (the simulator has no index),
                ``unknown_lineage`` (an exclusion the index does not hold).
            NoSimulator: no simulator runs.
            BadRequest: an empty or oversized move, ``k`` outside 1-10.
        """
        request = SimForecast(
            move=move, context=context, k=k, exclude_lineages=list(exclude_lineages)
        )
        return await self._ask_forecast(request)

    async def before_with_forecasts(
        self,
        query: str,
        *,
        at: datetime | None = None,
        k: int = 5,
        exclude_lineages: Sequence[str] = (),
        as_of: datetime | None = None,
    ) -> WorldviewForecasts:
        """``before(query, at=at)``, and for each of the worldview's top moves (at
        most 3) the forecast of its belief's text (see :meth:`forecast`). Without
        a simulator, or with one that has no index, each move's forecast is
        ungrounded with the note "no grounding (no simulator index)": never a
        guess. ``as_of``: the worldview as :meth:`before` reads it then."""
        view = await self.before(query, at=at, as_of=as_of)
        found: list[MoveForecast] = []
        available = True
        for move in view.moves[:FORECAST_MOVES]:
            asked = _asked(move)
            reply: SimForecastReply | None = None
            if available:
                try:
                    reply = await self.forecast(
                        asked, k=k, exclude_lineages=exclude_lineages
                    )
                except NoSimulator:
                    available = False
                except SimulationError as exc:
                    if exc.name != "no_index":
                        raise
                    available = False
            if reply is None:
                reply = SimForecastReply(
                    move=asked, grounded=False, note=NO_SIMULATOR_INDEX
                )
            elif reply.track is not None and not reply.track.supported():
                reply = _held_back(reply, reply.track)
            found.append(MoveForecast(move=move, asked=asked, forecast=reply))
        return WorldviewForecasts(view=view, forecasts=tuple(found))


def _held_back(reply: SimForecastReply, t: ForecastTrack) -> SimForecastReply:
    """A forecast whose kind of move the simulator's own track record ``t`` does
    not support: shown as ungrounded, with the record, never its outcomes."""
    return msgspec.structs.replace(
        reply,
        grounded=False,
        outcomes=(),
        note=f"held back: the simulator's record for {t.key} is {t.hits} hits of "
        f"{t.grounded} grounded forecasts, too few to show one "
        "(docs/simulator.md, 'Track record')",
    )

"""The judgment half of the SDK: contradictions (list, settle), resolving rival
answers as a settled question (:meth:`JudgmentMixin.settle_slot`) and the world's
calibration record (:meth:`JudgmentMixin.calibration`). Mixed into
:class:`worldline.sdk.client.World`; docs/belief-math.md, "Contradictions" and
"Calibration"."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Final, Literal

from worldline.protocols.calibration import FORECAST_SLOT
from worldline.protocols.messages import (
    CalibrationReply,
    ContradictionsReply,
    GetCalibration,
    ListContradictions,
    ResolveContradiction,
)
from worldline.sdk.crew import new_id, utc_now, validated
from worldline.sdk.errors import BadRequest
from worldline.sdk.paging import PagingMixin

if TYPE_CHECKING:
    from datetime import datetime

    from worldline.protocols.beliefs import Contradiction
    from worldline.protocols.messages import Belief, SimForecastReply

__all__ = ["JudgmentMixin"]

TEXT_CHARS: Final = 400  # of a forecast outcome, in the claim that records it


class JudgmentMixin(PagingMixin):
    """Contradictions, settled questions and calibration."""

    async def settle_slot(self, winner: str, reason: str = "") -> list[Belief]:
        """Settle the question ``winner`` answers: resolve ``winner`` true and each
        of its rival answers (the beliefs of its slot) false, one op each, so every
        answer's confidence just before joins the calibration record. Returns the
        beliefs as closed, the winner first; rivals already closed are left as they
        are.

        Raises:
            BadRequest: no such belief, or it answers no question (no slot).
            Rejected: an answer this agent may not close (``unauthorized``: as for
                :meth:`resolve`); the answers closed before it stay closed.
        """
        traced = await self.trace(winner)
        belief = traced.belief
        if belief is None or not belief.slot:
            raise BadRequest(
                f"belief {winner!r} answers no question (it has no slot): resolve it "
                "alone with `resolve(id, outcome=True)`"
            )
        closed = [await self.resolve(winner, reason, outcome=True)]
        for rival in traced.rivals:
            held = await self.get(rival)
            if held is not None and held.status == "active":
                closed.append(await self.resolve(rival, reason, outcome=False))
        return closed

    async def record_forecast(self, forecast: SimForecastReply) -> list[Belief]:
        """Put a forecast on record so its outcome can score it: one claim per
        forecast outcome ("after <move>: <observation>"), its confidence the
        outcome's share of the support, all answers of one question (slot
        ``forecast-<hash>``). When what followed is known, settle it: the outcome
        that came true with :meth:`settle_slot` (the others resolve false), or
        each with ``resolve(id, outcome=False)`` when none did. Their confidences
        join the calibration record under ``forecasts``.

        Raises:
            BadRequest: the forecast is not grounded (it has no outcome).
        """
        if not forecast.grounded or not forecast.outcomes:
            raise BadRequest(
                "this forecast has no grounded outcome to record: "
                + (forecast.note or "no outcomes")
            )
        digest = hashlib.sha256(f"{forecast.index}\x00{forecast.move}".encode())
        slot = FORECAST_SLOT + digest.hexdigest()[:16]
        total = sum(o.support for o in forecast.outcomes)
        recorded = []
        for outcome in forecast.outcomes:
            text = f"after {forecast.move}: {outcome.observation}"
            recorded.append(
                await self.add(
                    text[:TEXT_CHARS],
                    confidence=outcome.support / total,
                    slot=slot,
                )
            )
        return recorded

    async def calibration(self, *, bins: int = 10, limit: int = 50) -> CalibrationReply:
        """How well the world's confidence has matched what turned out true: the
        Brier score, expected calibration error and reliability curve (``bins``
        equal-width bins) over every belief resolved true or false, for the world
        and by source, evidence kind and agent (``limit`` groups each, largest
        first), and the recalibration the worldview applies (``method``: identity
        until ``min_records`` resolutions are on record)."""
        request = validated(GetCalibration(bins=bins, limit=limit))
        reply = await self._request("calibration", request)
        if not isinstance(reply, CalibrationReply):
            raise BadRequest(f"unexpected reply to calibration: {reply!r}")
        return reply

    async def contradictions(
        self,
        *,
        status: Literal["open", "resolved", "dissolved", "all"] = "open",
        at: datetime | None = None,
        as_of: datetime | None = None,
        limit: int = 1000,
    ) -> list[Contradiction]:
        """The world's contradictions with their id, kind, ends, strength and
        lifecycle (``opened_at``, ``status``, ``resolved_at``, ``winner``): those
        opened by valid time ``at``, as recorded by ``as_of``
        (docs/belief-math.md, "Contradictions")."""
        request = ListContradictions(status=status, at=at, as_of=as_of, limit=limit)
        reply = await self._request("contradictions", validated(request))
        if not isinstance(reply, ContradictionsReply):
            raise BadRequest(f"unexpected reply to contradictions: {reply!r}")
        return list(reply.contradictions)

    async def resolve_contradiction(
        self, contradiction_id: str, reason: str, *, winner: str | None = None
    ) -> int:
        """Settle an open contradiction, naming the end judged right (``winner``)
        or none; it stops widening its ends' uncertainty. Returns the op's OPS
        sequence once applied.

        Raises:
            BadRequest: no such contradiction, it is not open, the winner is not
                one of its ends, or the reason is empty.
            Rejected: the materializer refused the op (its reason; code
                ``unauthorized`` when this agent may not settle: only the operator,
                the world's admins and the agents of its ``[trust] settle`` may).
        """
        if not reason.strip():
            raise BadRequest("say why the contradiction is settled: pass a reason")
        known = {c.id: c for c in await self.contradictions(status="all", limit=10_000)}
        found = known.get(contradiction_id)
        if found is None:
            raise BadRequest(
                f"no contradiction {contradiction_id!r} in world {self.world!r}; "
                "list them with `worldline contradictions --status all`"
            )
        if found.status != "open":
            raise BadRequest(
                f"contradiction {contradiction_id} is {found.status} already"
                + (f" (winner {found.winner})" if found.winner else "")
            )
        if winner is not None and winner not in found.beliefs:
            raise BadRequest(
                f"winner {winner!r} is not an end of contradiction {contradiction_id}"
                f"; its ends: {', '.join(found.beliefs)}"
            )
        op = ResolveContradiction(
            op_id=new_id("op"),
            author=self.agent,
            at=utc_now(),
            contradiction_id=contradiction_id,
            reason=reason,
            winner=winner,
        )
        return await self._submit(validated(op))

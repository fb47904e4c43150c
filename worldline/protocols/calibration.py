"""Calibration on the wire: how well the world's confidence has matched what turned
out true (docs/belief-math.md, "Calibration").

A belief resolved true or false (``CloseBelief(how="resolved", outcome=...)``) keeps
the confidence it had just before (``Belief.closed_confidence``); the projector
collects those records and answers ``calibration`` with the Brier score, the expected
calibration error and a reliability curve, for the world and by source, evidence
kind and agent.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from worldline.protocols.base import Message

__all__ = [
    "FORECAST_SLOT",
    "CalibrationBin",
    "CalibrationGroup",
    "CalibrationReply",
    "GetCalibration",
]


FORECAST_SLOT: Final = "forecast-"
"""The slot of a recorded forecast starts so (``World.record_forecast``): its
answers are the forecast's outcomes, and their record is scored apart as
``forecasts``."""


class CalibrationBin(msgspec.Struct, frozen=True, kw_only=True):
    """One bin of the reliability curve: records whose confidence fell in
    ``[lo, hi)``, their mean confidence and how often they were true."""

    lo: float
    hi: float
    count: int
    mean_confidence: float
    frequency: float


class CalibrationGroup(msgspec.Struct, frozen=True, kw_only=True):
    """The calibration of one group of records (the world, one source, one kind of
    evidence, one agent). ``agreement``: for a source or an agent, the share of its
    directed evidence (supports or refutes) that the outcome bore out (None for the
    world and for kinds)."""

    name: str
    count: int
    brier: float
    ece: float
    mean_confidence: float
    frequency: float
    bins: tuple[CalibrationBin, ...] = ()
    agreement: float | None = None


class GetCalibration(Message, tag="rpc.calibration.v1", kw_only=True, frozen=True):
    """Ask for the world's calibration record (``bins``: equal-width bins of the
    reliability curve; ``limit``: groups per dimension at most, largest first)."""

    bins: Annotated[int, msgspec.Meta(ge=2, le=50)] = 10
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 50


class CalibrationReply(
    Message, tag="rpc.calibration_reply.v1", kw_only=True, frozen=True
):
    """The world's calibration, and the recalibration the worldview applies:
    ``method`` ``identity`` until ``min_records`` resolved beliefs are on record, then
    ``platt`` or ``isotonic`` fitted on ``fitted_on`` of them."""

    world: CalibrationGroup
    by_source: tuple[CalibrationGroup, ...] = ()
    by_kind: tuple[CalibrationGroup, ...] = ()
    by_agent: tuple[CalibrationGroup, ...] = ()
    # Recorded forecasts alone (their outcomes resolved), when there are any.
    forecasts: CalibrationGroup | None = None
    method: Literal["identity", "platt", "isotonic"] = "identity"
    fitted_on: int = 0
    min_records: int = 0

"""The calibration record in the cores (issue 25): fusion keeps a claim's confidence
just before it is resolved true or false, refuses a resolution that does not fit the
belief, and the projector's record (and the fit reads apply) is the same whatever the
order resolutions arrive in. Pure cores over MemoryState, no bus.

Before this change a claim could not be resolved (only retracted), nothing recorded
a confidence with its outcome, and no read reported or applied calibration."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import calibration as math
from worldline.actors.fusion import core as fusion
from worldline.actors.projector import calibration, core
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import (
    AddBelief,
    AddEvidence,
    Belief,
    BeliefChanged,
    CalibrationReply,
    CloseBelief,
    GetCalibration,
    OpVerdict,
    PosteriorUpdate,
)
from worldline.protocols.subjects import ops, state

W: Final = "w1"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)


def fctx(seq: int) -> Context:
    return Context(world=W, author="ada", subject=ops(W, "ada"), seq=seq, now=T0)


def close(belief_id: str, seq: int, outcome: bool | None) -> CloseBelief:
    return CloseBelief(
        op_id=f"op-close-{seq}",
        author="ada",
        at=T0 + timedelta(hours=1),
        belief_id=belief_id,
        how="resolved",
        outcome=outcome,
    )


def test_fusion_keeps_the_confidence_just_before_and_refuses_what_does_not_fit() -> (
    None
):
    st = MemoryState()
    st.apply(
        fusion.handle(
            st,
            AddBelief(
                op_id="op-1", author="ada", at=T0, belief_id="b1", text="It is warm."
            ),
            fctx(1),
        )
    )
    st.apply(
        fusion.handle(
            st,
            AddBelief(
                op_id="op-2",
                author="ada",
                at=T0,
                belief_id="g1",
                text="Why?",
                type="gap",
            ),
            fctx(2),
        )
    )
    item = Evidence(
        id="e1",
        belief_id="b1",
        direction="supports",
        kind="measurement",
        source="probe",
        observed_at=T0,
        author="ada",
    )
    out = st.apply(
        fusion.handle(
            st, AddEvidence(op_id="op-3", author="ada", at=T0, evidence=item), fctx(3)
        )
    )
    for op, seq, why in (
        (close("b1", 4, None), 4, "true or false"),
        (close("g1", 5, True), 5, "not true or false"),
    ):
        (verdict,) = [o.message for o in st.apply(fusion.handle(st, op, fctx(seq)))]
        assert isinstance(verdict, OpVerdict)
        assert verdict.outcome == "rejected"
        assert verdict.code == "invalid"
        assert why in verdict.reason
    out = st.apply(fusion.handle(st, close("b1", 6, False), fctx(6)))
    (update,) = [o.message for o in out]
    assert isinstance(update, PosteriorUpdate)
    closed = update.belief
    assert (closed.status, closed.outcome) == ("resolved", False)
    # The measurement lifted it above 0.5; that is the confidence on record.
    assert closed.closed_confidence == closed.confidence
    assert closed.closed_confidence is not None
    assert closed.closed_confidence > 0.6


def resolved(i: int, outcome: bool, confidence: float) -> BeliefChanged:
    belief = Belief(
        id=f"b{i:03d}",
        text=f"claim {i}",
        type="claim",
        confidence=confidence,
        author="ada",
        created_at=T0,
        updated_at=T0,
        version=100 + i,
        status="resolved",
        outcome=outcome,
        closed_confidence=confidence,
    )
    item = Evidence(
        id=f"e{i}",
        belief_id=belief.id,
        direction="supports" if i % 2 else "refutes",
        kind="citation",
        source="wiki",
        observed_at=T0,
        author="ada",
    )
    return BeliefChanged(belief=belief, evidence=[item])


def record_of(changes: list[BeliefChanged]) -> MemoryState:
    st = MemoryState()
    for change in changes:
        ctx = Context(
            world=W,
            author="m",
            subject=state(W, "belief"),
            seq=change.belief.version,
            now=T0,
        )
        st.apply(core.handle(st, change, ctx))
    return st


def calibration_keys(st: MemoryState) -> dict[bytes, bytes]:
    return {k: v for k, v in st.scan(b"") if k.startswith((b"calib/", b"calcount/"))}


# Over-confident: the record says 0.9 and it comes true 60% of the time.
CHANGES: Final = [resolved(i, i % 5 < 3, 0.9 if i % 2 else 0.8) for i in range(40)]


@settings(max_examples=25, deadline=None)
@given(st.permutations(CHANGES))
def test_the_record_and_its_fit_do_not_depend_on_arrival_order(
    shuffled: list[BeliefChanged],
) -> None:
    one, other = record_of(CHANGES), record_of(shuffled)
    assert calibration_keys(one) == calibration_keys(other)
    assert calibration.calibrator(one, W) == calibration.calibrator(other, W)
    assert core.serve(one, GetCalibration(), W) == core.serve(
        other, GetCalibration(), W
    )


def test_the_fit_switches_on_with_enough_record_and_the_report_adds_up() -> None:
    few = record_of(CHANGES[: math.MIN_RECORDS - 1])
    assert calibration.calibrator(few, W).method == "identity"
    full = record_of(CHANGES)
    fitted = calibration.calibrator(full, W)
    assert fitted.method in ("platt", "isotonic")
    assert fitted.records == 40
    # The fit pulls the over-confident 0.9 down toward what came true.
    assert math.apply(fitted, 0.9) < 0.85
    reply = core.serve(full, GetCalibration(bins=5), W)
    assert isinstance(reply, CalibrationReply)
    records = [
        math.Record(
            confidence=c.belief.closed_confidence or 0.0, outcome=bool(c.belief.outcome)
        )
        for c in CHANGES
    ]
    assert reply.world.count == 40
    assert reply.world.brier == pytest.approx(math.brier(records))
    (wiki,) = reply.by_source
    # wiki supported the odd claims and refuted the even ones.
    agreed = sum((i % 2 == 1) == (i % 5 < 3) for i in range(40))
    assert wiki.agreement == pytest.approx(agreed / 40)
    assert [g.name for g in reply.by_kind] == ["citation"]
    assert (reply.method, reply.fitted_on) == (fitted.method, 40)
    # Restating a resolution changes nothing on record.
    again = record_of([*CHANGES, CHANGES[3]])
    assert calibration_keys(again) == calibration_keys(full)
    assert msgspec.json.encode(reply)  # encodable as the reply it is


def batched(changes: list[BeliefChanged], size: int) -> MemoryState:
    """``changes`` applied as the runtime does: ``size`` per batch, each batch
    closed by the projector's ``finish``."""
    st = MemoryState()
    for start in range(0, len(changes), size):
        ctx = Context(world=W, author="m", subject=state(W, "belief"), seq=0, now=T0)
        for change in changes[start : start + size]:
            ctx = msgspec.structs.replace(ctx, seq=change.belief.version)
            st.apply(core.handle(st, change, ctx))
        st.apply(core.finish(st, ctx))
    return st


def test_the_fit_is_kept_once_per_batch_and_reads_never_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    few = batched(CHANGES[: math.MIN_RECORDS - 1], 7)
    assert not any(k.startswith(b"calfit/") for k, _ in few.scan(b""))
    kept = [batched(CHANGES, size) for size in (1, 8, 40)]
    fits = [dict(state_.scan(b"calfit/")) for state_ in kept]
    assert fits[0]
    assert fits[0] == fits[1] == fits[2]  # the same whatever the batches
    expected = calibration.calibrator(record_of(CHANGES), W)  # fitted on the read

    def no_fit(records: object) -> math.Calibrator:
        raise AssertionError("a read fitted the record")

    monkeypatch.setattr(math, "fit", no_fit)
    for state_ in kept:
        assert calibration.calibrator(state_, W) == expected
    # A batch that leaves the record as it is does not refit.
    again = Context(W, "m", state(W, "belief"), 99, T0)
    assert core.finish(kept[0], again).writes == {}

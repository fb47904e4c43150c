"""Forged posteriors (issue 14, item 3): a posterior's ``cause_seq`` must name an op
that can exist, at least 1 and at most the op log's last sequence; the runtime's
``prepare_batch`` step hands the handler that bound, batches unpacked, retried until
it is known."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import msgspec
import pytest

from worldline.actors.materializer import core as materializer
from worldline.actors.materializer.ops_end import OpsEnd
from worldline.actors.registry import build
from worldline.actors.runtime import prepare
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.errors import InvalidInput
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.prepare import prepared_input
from worldline.actors.runtime.spec import Context, Step
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import (
    MATERIALIZER_INBOX,
    OPS_INBOX,
    AddBelief,
    Belief,
    BeliefChanged,
    DeadLetter,
    PosteriorUpdate,
    encode,
    encode_batch,
)
from worldline.protocols.subjects import author_of, derived, dlq, ops, world_of

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.actors.runtime.spec import Input, Reader

WORLD: Final = "w1"
SUBJECT: Final = derived(WORLD, "posterior", "0")
NOW: Final = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
T0: Final = datetime(2024, 6, 1, 8, 0, tzinfo=UTC)


def belief(confidence: float) -> Belief:
    return Belief(
        id="b1",
        text="Pilots convert",
        type="claim",
        confidence=confidence,
        author="ada",
        created_at=T0,
        updated_at=T0,
    )


def update(cause_seq: int, confidence: float = 0.5) -> PosteriorUpdate:
    return PosteriorUpdate(
        belief=belief(confidence), cause=f"op-{cause_seq}", cause_seq=cause_seq
    )


def ctx(ops_end: int | None, seq: int = 1) -> Context:
    return Context(
        world=world_of(SUBJECT),
        author=author_of(SUBJECT),
        subject=SUBJECT,
        seq=seq,
        now=NOW,
        batch_prepared=ops_end,
    )


def held(st: MemoryState) -> BeliefChanged:
    raw = st.get(materializer.belief_key(WORLD, "b1"))
    assert raw is not None
    return msgspec.msgpack.decode(raw, type=BeliefChanged)


def test_a_posterior_beyond_the_op_log_is_refused_and_real_ones_still_apply() -> None:
    st = MemoryState()
    st.apply(materializer.handle(st, update(5, 0.4), ctx(ops_end=7)))
    before = dict(st.data)
    forged = update(10**12, confidence=0.99)
    with pytest.raises(InvalidInput, match=r"cause_seq 1000000000000, beyond the op"):
        materializer.handle(st, forged, ctx(ops_end=7, seq=2))
    assert st.data == before
    # The next real op's posterior moves the belief (with the forgery held, the
    # old code ignored it as older than version 10**12).
    out = st.apply(materializer.handle(st, update(8, 0.6), ctx(ops_end=8, seq=3)))
    assert len(out) == 1
    assert held(st).belief.version == 8
    assert held(st).belief.confidence == 0.6


@pytest.mark.parametrize("cause_seq", [0, -1, -(2**63)])
def test_a_posterior_caused_by_no_sequence_is_refused(cause_seq: int) -> None:
    st = MemoryState()
    with pytest.raises(InvalidInput, match=f"cause_seq {cause_seq}: the op"):
        materializer.handle(st, update(cause_seq), ctx(ops_end=100))
    with pytest.raises(InvalidInput):  # also where the log's end is not known
        materializer.handle(st, update(cause_seq), ctx(ops_end=None))
    assert st.data == {}


def test_the_last_op_is_in_range_and_a_replay_needs_no_bound() -> None:
    st = MemoryState()
    assert st.apply(materializer.handle(st, update(7), ctx(ops_end=7)))
    other = MemoryState()  # replay: the runtime's prepare_batch does not run
    assert other.apply(materializer.handle(other, update(7), ctx(ops_end=None)))
    assert st.data == other.data


def _with_bound(inp: Input[Any], ops_end: int) -> Input[Any]:
    """``inp`` as the runtime runs it once its prepare_batch step said ``ops_end``."""
    handle = inp.handle

    def bounded(reader: Reader, message: Any, c: Context) -> Step:
        return handle(
            reader, message, msgspec.structs.replace(c, batch_prepared=ops_end)
        )

    return dataclasses.replace(inp, handle=bounded, prepare_batch=None)


def test_the_store_dead_letters_a_forgery_with_the_reason(tmp_path: Path) -> None:
    posteriors = build("materializer").inputs[1]
    store = Store(tmp_path / "m", actor="materializer")
    try:
        result = store.apply_batch(
            _with_bound(posteriors, 3),
            [
                Delivery(1, SUBJECT, encode(update(2, 0.4))),
                Delivery(2, SUBJECT, encode(update(4, 0.9))),  # beyond 3
            ],
            NOW,
        )
        assert result.accepted == [True, False]
        (item,) = [i for i in result.outbox if i.subject == dlq(WORLD, "materializer")]
        letter = msgspec.msgpack.decode(item.payload, type=DeadLetter)
        assert "beyond the op log (WL_OPS ends at sequence 3)" in letter.reason
        assert letter.stream_seq == 2
        with store.reader() as reader:
            raw = reader.get(materializer.belief_key(WORLD, "b1"))
        assert raw is not None
        assert msgspec.msgpack.decode(raw, type=BeliefChanged).belief.version == 2
    finally:
        store.close()


class _Js:
    """Stands in for the JetStream context the runtime passes through to the step
    (only ``OpsEnd`` uses it, and only for ``stream_info``)."""

    def __init__(self, last_seq: int, failures: int = 0) -> None:
        self.last_seq = last_seq
        self.failures = failures
        self.calls = 0

    async def stream_info(self, name: str) -> Any:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise TimeoutError("stream_info timed out")
        state = type("State", (), {"last_seq": self.last_seq})()
        return type("Info", (), {"state": state})()


async def test_prepare_batch_sees_batch_items_and_is_retried_until_it_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(prepare, "BATCH_RETRY", (0.01, 0.02))
    posteriors = build("materializer").inputs[1]
    assert isinstance(posteriors.prepare_batch, OpsEnd)
    seen: list[Any] = []

    def spy(reader: Reader, message: Any, c: Context) -> Step:
        seen.append((message.cause_seq, c.batch_prepared))
        return Step()

    packed = encode_batch([(SUBJECT, encode(update(9))), (SUBJECT, encode(update(4)))])
    deliveries = [
        Delivery(1, SUBJECT, encode(update(2))),
        Delivery(2, SUBJECT, packed, batch=True),  # the cause_seq 9 is inside
        Delivery(3, SUBJECT, b"\xc1 not msgpack"),
    ]
    js = _Js(last_seq=9, failures=2)
    inp = await prepared_input(
        dataclasses.replace(posteriors, handle=spy),
        [],
        deliveries,
        NOW,
        js=js,  # type: ignore[arg-type]
    )
    assert js.calls == 3  # two failures, then the answer: never applied unchecked
    inp.handle(MemoryState(), MATERIALIZER_INBOX.decode(deliveries[0].data), ctx(None))
    assert seen == [(2, 9)]
    with pytest.raises(ValueError, match="pass the bus"):
        await prepared_input(posteriors, [], deliveries, NOW)


async def test_ops_end_asks_the_bus_only_beyond_what_it_knows() -> None:
    end = OpsEnd()
    js = _Js(last_seq=50)
    assert await end(js, [encode(update(3))]) == 50  # type: ignore[arg-type]
    assert await end(js, [encode(update(50)), b"junk"]) == 50  # type: ignore[arg-type]
    assert js.calls == 1
    assert await end(js, [encode(update(10**12))]) == 50  # type: ignore[arg-type]
    assert js.calls == 2  # a forgery costs one lookup for its batch
    # Fusion's word on one op names its sequence as ``seq``: the same bound covers it.
    about_an_op = msgspec.msgpack.encode({"kind": "derived.verdict.v1", "seq": 70})
    js.last_seq = 70
    assert await end(js, [about_an_op]) == 70  # type: ignore[arg-type]
    assert js.calls == 3


async def test_ops_handed_to_the_materializer_raise_the_bound_without_a_lookup() -> (
    None
):
    """Its op input tells the bound each op's sequence: a posterior of an op the
    materializer has already been handed (one at a time, nearly always) costs no
    stream_info round trip."""
    ops_input, posteriors = build("materializer").inputs
    end = posteriors.prepare_batch
    assert isinstance(end, OpsEnd)
    op = AddBelief(op_id="op-1", author="ada", at=NOW, belief_id="b-1", text="A claim")
    ops_ctx = Context("w", "ada", ops("w", "ada"), 41, NOW)
    ops_input.handle(MemoryState(), OPS_INBOX.decode(encode(op)), ops_ctx)
    js = _Js(last_seq=41)
    assert await end(js, [encode(update(41))]) == 41  # type: ignore[arg-type]
    assert js.calls == 0
    assert await end(js, [encode(update(42))]) == 41  # type: ignore[arg-type]
    assert js.calls == 1  # beyond what it was handed: asks

"""Fusion answers client mistakes and repeats with a verdict, not a dead letter; the
materializer keeps it for ``op_status``. Pure cores, no bus."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import msgspec
import pytest

from worldline.actors.fusion import core as fusion
from worldline.actors.materializer import core as materializer
from worldline.actors.registry import build
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.errors import InvalidInput
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context, Step
from worldline.actors.runtime.store import Store
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import (
    MATERIALIZER_INBOX,
    AddBelief,
    AddEvidence,
    CloseBelief,
    DeadLetter,
    OpsInbox,
    OpStatus,
    OpStatusReply,
    OpVerdict,
    PosteriorUpdate,
    SetTrust,
    Statement,
    encode,
)
from worldline.protocols.subjects import derived, dlq, ops

if TYPE_CHECKING:
    from pathlib import Path

W: Final = "w1"
AT: Final = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def ctx(agent: str, seq: int, subject: str | None = None) -> Context:
    return Context(
        world=W, author=agent, subject=subject or ops(W, agent), seq=seq, now=AT
    )


def add(belief_id: str = "b1", op_id: str = "op-add", **kw: object) -> AddBelief:
    fields: dict[str, object] = {"text": "The cache is cold.", "type": "claim"}
    fields.update(kw)
    return AddBelief(
        op_id=op_id,
        author="ada",
        at=AT,
        belief_id=belief_id,
        **fields,  # type: ignore[arg-type]
    )


def evidence(
    evidence_id: str, belief_id: str = "b1", op_id: str | None = None
) -> AddEvidence:
    item = Evidence(
        id=evidence_id,
        belief_id=belief_id,
        direction="supports",
        kind="citation",
        source="lab",
        observed_at=AT,
        author="ada",
    )
    return AddEvidence(
        op_id=op_id or f"op-{evidence_id}", author="ada", at=AT, evidence=item
    )


def verdict(step: Step) -> OpVerdict:
    assert not step.writes  # a verdict changes nothing in fusion's state
    (out,) = step.out
    assert out.subject == derived(W, "posterior", "0")  # in order with posteriors
    assert isinstance(out.message, OpVerdict)
    return out.message


def fused(*log: OpsInbox) -> MemoryState:
    state = MemoryState()
    for seq, op in enumerate(log, start=1):
        state.apply(fusion.handle(state, op, ctx(op.author, seq)))
    return state


@pytest.mark.parametrize(
    ("op", "code", "words"),
    [
        (
            evidence("e1", belief_id="b-unknown"),
            "unknown_belief",
            "no belief b-unknown",
        ),
        (add(op_id="op-other", text="Other text."), "conflict", "already exists"),
        (add("g1", op_id="op-g", type="goal", confidence=0.5), "invalid", "no prob"),
        (
            CloseBelief(
                op_id="op-close",
                author="ada",
                at=AT,
                belief_id="b-nope",
                how="retracted",
            ),
            "unknown_belief",
            "no belief b-nope",
        ),
        (
            CloseBelief(
                op_id="op-res", author="ada", at=AT, belief_id="b1", how="resolved"
            ),
            "invalid",
            "true or false",  # a claim is resolved with its outcome, or retracted
        ),
    ],
)
def test_a_client_mistake_is_a_verdict_not_an_invalid_input(
    op: OpsInbox, code: str, words: str
) -> None:
    state = fused(add())
    before = dict(state.data)
    answer = verdict(fusion.handle(state, op, ctx("ada", 7)))
    assert (answer.outcome, answer.code, answer.seq, answer.op_id) == (
        "rejected",
        code,
        7,
        op.op_id,
    )
    assert words in answer.reason
    assert state.data == before


def test_evidence_on_a_closed_belief_is_refused_with_code_closed() -> None:
    close = CloseBelief(
        op_id="op-x", author="ada", at=AT, belief_id="b1", how="retracted"
    )
    state = fused(add(), close)
    answer = verdict(fusion.handle(state, evidence("e1"), ctx("ada", 3)))
    assert (answer.outcome, answer.code) == ("rejected", "closed")
    assert "retracted" in answer.reason
    # Closing it again is a repeat: answered as unchanged, not silently dropped.
    again = CloseBelief(
        op_id="op-y", author="ada", at=AT, belief_id="b1", how="retracted"
    )
    assert verdict(fusion.handle(state, again, ctx("ada", 4))).outcome == "unchanged"


def test_a_retried_evidence_id_is_answered_as_unchanged() -> None:
    state = fused(add(), evidence("e1"))
    before = dict(state.data)
    retry = evidence("e1", op_id="op-retry")  # a new op carrying the same evidence
    answer = verdict(fusion.handle(state, retry, ctx("ada", 3)))
    assert (answer.outcome, answer.code, answer.belief_id) == ("unchanged", None, "b1")
    assert state.data == before


def test_what_is_really_broken_is_still_dead_lettered() -> None:
    state = fused(add())
    with pytest.raises(InvalidInput, match="author"):
        fusion.handle(state, evidence("e1"), ctx("mallory", 2))  # forged author
    smuggled = Statement(
        op_id="op-st",
        author="extractor",
        at=AT,
        belief_id="b1",
        text="The cache is cold.",
        type="claim",
        evidence=evidence("e2", belief_id="b2").evidence,
    )
    with pytest.raises(InvalidInput, match="another belief"):
        fusion.handle(state, smuggled, ctx("extractor", 3))


def test_every_trust_setting_gets_one_verdict_whatever_the_shards() -> None:
    lock = SetTrust(
        op_id="op-lock", author="operator", at=AT, source="lab", trust=0.5, lock=True
    )
    steal = SetTrust(op_id="op-steal", author="bob", at=AT, source="lab", trust=2.0)
    for shards in (1, 2, 3):
        answers: list[OpVerdict] = []
        for shard in range(shards):
            state = MemoryState()
            for seq, op in enumerate((lock, steal), start=1):
                step = fusion.handle(
                    state, op, ctx(op.author, seq), shard=(shard, shards)
                )
                state.apply(step)
                answers += [
                    o.message for o in step.out if isinstance(o.message, OpVerdict)
                ]
        assert [(a.op_id, a.outcome, a.code) for a in answers] == [
            ("op-lock", "applied", None),
            ("op-steal", "rejected", "locked"),
        ]


def test_the_materializer_keeps_the_first_verdict_and_op_status_reports_it() -> None:
    answer = OpVerdict(
        op_id="op-ev", seq=5, outcome="rejected", code="closed", reason="retracted"
    )
    forged = msgspec.structs.replace(answer, op_id="op-forged", outcome="unchanged")
    state = MemoryState()
    derived_ctx = ctx("fusion", 1, derived(W, "posterior", "0"))
    decoded = MATERIALIZER_INBOX.decode(encode(answer))
    state.apply(materializer.handle_derived(state, decoded, derived_ctx))
    state.apply(materializer.handle_derived(state, forged, derived_ctx))
    # Not yet reached by the ops input: pending, but the verdict is already there.
    reply = materializer.serve(state, OpStatus(seq=5), W)
    assert reply == OpStatusReply(state="pending", verdict=answer)
    state.data[materializer.last_op_key(W)] = b"5"
    reply = materializer.serve(state, OpStatus(seq=5), W)
    assert isinstance(reply, OpStatusReply)
    assert (reply.state, reply.verdict) == ("applied", answer)
    assert materializer.serve(state, OpStatus(seq=4), W) == OpStatusReply(
        state="applied", version=4
    )
    with pytest.raises(InvalidInput, match="starts at 1"):
        materializer.record_verdict(
            state, msgspec.structs.replace(answer, seq=0), derived_ctx
        )
    # One beyond the op log's end (as the runtime's OpsEnd reports it) is forged.
    bounded = msgspec.structs.replace(derived_ctx, batch_prepared=9)
    future = msgspec.structs.replace(answer, seq=10)
    with pytest.raises(InvalidInput, match="beyond the op log"):
        materializer.record_verdict(state, future, bounded)
    assert materializer.record_verdict(
        state, msgspec.structs.replace(answer, seq=9), bounded
    ).writes


def test_a_client_mistake_leaves_no_dead_letter(tmp_path: Path) -> None:
    """Through the real store: the refused op is accepted (not termed), nothing goes
    to fusion's DLQ, and the verdict reaches the materializer's state."""
    data = tmp_path
    fusion_input = build("fusion").inputs[0]
    _, derived_input = build("materializer").inputs
    fusion_store = Store(data / "fusion", actor="fusion")
    mat_store = Store(data / "materializer", actor="materializer")
    try:
        log = [add(), evidence("e1", belief_id="b-unknown")]
        batch = [
            Delivery(seq, ops(W, "ada"), encode(op)) for seq, op in enumerate(log, 1)
        ]
        result = fusion_store.apply_batch(fusion_input, batch, AT)
        assert result.accepted == [True, True]
        assert [i for i in result.outbox if i.subject == dlq(W, "fusion")] == []
        outputs = [
            Delivery(n, item.subject, item.payload)
            for n, item in enumerate(result.outbox, 1)
        ]
        kinds = [type(MATERIALIZER_INBOX.decode(d.data)) for d in outputs]
        assert kinds == [PosteriorUpdate, OpVerdict]
        applied = mat_store.apply_batch(derived_input, outputs, AT)
        assert applied.accepted == [True, True]
        letters = [
            msgspec.msgpack.decode(i.payload, type=DeadLetter)
            for i in applied.outbox
            if i.subject == dlq(W, "materializer")
        ]
        assert letters == []
        with mat_store.reader() as reader:
            raw = reader.get(materializer.verdict_key(W, 2))
        assert raw is not None
        assert msgspec.msgpack.decode(raw, type=OpVerdict).code == "unknown_belief"
    finally:
        fusion_store.close()
        mat_store.close()

"""A belief's label set by hand on ``add`` (the seed's ``add(text, {label})``): fusion
carries it from the op to the belief its posteriors hold, sets it once, and the wire
type refuses a malformed one; the projector derives a label only for a belief
without one (docs/belief-math.md, "Labels")."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

import msgspec
import pytest

from tests.core.test_belief_math import DECLARE, ctx
from worldline.actors.fusion import core as fusion
from worldline.actors.runtime.memory import MemoryState
from worldline.protocols.messages import (
    FUSION_INBOX,
    AddBelief,
    OpVerdict,
    PosteriorUpdate,
    encode,
)
from worldline.sdk.errors import BadRequest
from worldline.sdk.labels import checked_label

T0: Final = datetime(2024, 1, 1, 9, 0, 0, tzinfo=UTC)


def add(op_id: str, label: str | None, *, author: str = "alice") -> AddBelief:
    return AddBelief(
        op_id=op_id,
        author=author,
        at=T0,
        belief_id="b1",
        text="The cache is invalidated on every deploy.",
        label=label,
    )


def feed(*ops: AddBelief) -> tuple[list[PosteriorUpdate], list[OpVerdict]]:
    memory = MemoryState()
    memory.apply(fusion.handle(memory, DECLARE, ctx("alice", 0)))
    updates: list[PosteriorUpdate] = []
    verdicts: list[OpVerdict] = []
    for seq, op in enumerate(ops, start=1):
        step = fusion.handle(
            memory, FUSION_INBOX.decode(encode(op)), ctx(op.author, seq)
        )
        for out in memory.apply(step):
            if isinstance(out.message, OpVerdict):
                verdicts.append(out.message)
            else:
                assert isinstance(out.message, PosteriorUpdate)
                updates.append(out.message)
    return updates, verdicts


def test_a_label_given_on_add_is_the_beliefs_label() -> None:
    updates, _ = feed(add("op-1", "load-bearing"))
    assert updates[-1].belief.label == "load-bearing"
    unlabelled, _ = feed(add("op-1", None))
    assert unlabelled[-1].belief.label == ""


def test_a_label_is_set_once_and_a_readd_may_only_repeat_it() -> None:
    # Added without one, the first label given sets it (the restatement counts as
    # evidence too); the same label again is fine; another is refused, unchanged.
    updates, verdicts = feed(
        add("op-1", None),
        add("op-2", "load-bearing", author="bob"),
        add("op-3", "load-bearing"),
        add("op-4", "limiting-belief"),
    )
    assert [u.cause for u in updates] == ["op-1", "op-2", "op-3"]
    assert updates[1].belief.label == updates[2].belief.label == "load-bearing"
    assert updates[2].belief.evidence_count == 2
    refused = [v for v in verdicts if v.outcome == "rejected"]
    assert [(v.op_id, v.code) for v in refused] == [("op-4", "conflict")]
    assert "with label 'load-bearing'" in refused[0].reason
    assert "set once" in refused[0].reason


@pytest.mark.parametrize("bad", ["", "two words", "-dash-first", "x" * 65, "é"])
def test_a_malformed_label_is_refused_with_what_a_label_is(bad: str) -> None:
    with pytest.raises(BadRequest, match=r"is not a label: use 1-64 letters"):
        checked_label(bad)
    with pytest.raises(msgspec.ValidationError, match=r"\$\.label"):
        msgspec.json.decode(msgspec.json.encode(add("op-1", bad)), type=AddBelief)
    assert checked_label("risk/security:high_2.0") == "risk/security:high_2.0"

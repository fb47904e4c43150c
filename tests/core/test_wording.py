"""A value a `Literal` field does not allow is answered with the values it does
(worldline.sdk.wording): a person reading "Invalid enum value 'report'" cannot
guess the six evidence kinds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

import msgspec
import pytest

from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import AddEvidence
from worldline.sdk.crew import validated
from worldline.sdk.errors import BadRequest
from worldline.sdk.wording import explain

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_wrong_evidence_kind_names_the_kinds_there_are() -> None:
    evidence = Evidence(
        id="e-1",
        belief_id="b-1",
        direction="supports",
        kind="report",  # type: ignore[arg-type]
        source="memo",
        observed_at=NOW,
        author="ada",
    )
    op = AddEvidence(op_id="op-1", author="ada", at=NOW, evidence=evidence)
    with pytest.raises(BadRequest) as refused:
        validated(op)
    assert str(refused.value) == (
        "the evidence.kind of the evidence is not valid: 'report' is none of "
        "assumption, citation, expert-judgment, inference, measurement, user-assertion"
    )


class _Step(msgspec.Struct):
    move: Literal["call", "say"]


class _Plan(msgspec.Struct):
    steps: list[_Step] | None = None
    pair: tuple[int, _Step] | None = None


@pytest.mark.parametrize(
    ("raw", "path"),
    [({"steps": [{"move": "call"}, {"move": "fly"}]}, "steps[1].move")],
)
def test_a_literal_inside_a_list_of_a_union(raw: object, path: str) -> None:
    with pytest.raises(msgspec.ValidationError) as error:
        msgspec.convert(raw, _Plan)
    said = explain(str(error.value), "the plan", _Plan)
    assert said == f"the {path} of the plan is not valid: 'fly' is none of call, say"


def test_a_tuple_position_and_an_unknown_type_keep_their_wording() -> None:
    with pytest.raises(msgspec.ValidationError) as error:
        msgspec.convert({"pair": [1, {"move": "fly"}]}, _Plan)
    said = explain(str(error.value), "the plan", _Plan)
    assert said.endswith("'fly' is none of call, say")
    # Without the type, msgspec's own words, the field named first.
    bare = explain(str(error.value), "the plan")
    assert bare == "the pair[1].move of the plan is not valid: Invalid enum value 'fly'"

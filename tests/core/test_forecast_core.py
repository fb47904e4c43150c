"""The forecast core: the floor is what the scoring makes it (a row whose action
shares nothing with the query never scores above it, and one can reach it), and
outcomes group real observations with their support and lineages."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from worldline.actors.simulator import index as transition_index
from worldline.actors.simulator.forecast import FLOOR, forecast, move_kind, outcomes
from worldline.actors.simulator.storage import ACTION_WEIGHT, CONTEXT_WEIGHT, combine
from worldline.protocols.messages import Transition


def _unit(v: np.ndarray) -> npt.NDArray[np.float32]:
    unit: npt.NDArray[np.float32] = (v / np.linalg.norm(v)).astype(np.float32)
    return unit


def test_an_action_sharing_nothing_with_the_query_never_clears_the_floor() -> None:
    assert pytest.approx(CONTEXT_WEIGHT / ACTION_WEIGHT) == FLOOR
    rng = np.random.default_rng(7)
    dims = 16
    best = -1.0
    for _ in range(20_000):
        q = _unit(rng.normal(size=dims))
        raw = rng.normal(size=dims)
        a = _unit(raw - (raw @ q) * q)  # the row's action: orthogonal to the query
        w = _unit(rng.normal(size=dims) + 3 * rng.random() * q)  # context near q
        row = combine(a[None, :], w[None, :])[0]
        best = max(best, float(row @ q))
    assert best <= FLOOR + 1e-6
    # The bound is reached: w at 30 degrees from q towards -a (sin = C / A).
    q = np.eye(dims, dtype=np.float32)[0]
    a = np.eye(dims, dtype=np.float32)[1]
    s = CONTEXT_WEIGHT / ACTION_WEIGHT
    w = _unit(np.sqrt(1 - s * s) * q - s * a)
    assert float(combine(a[None, :], w[None, :])[0] @ q) == pytest.approx(FLOOR)


def _t(i: int, lineage: str, action: str, observation: str) -> Transition:
    return Transition(
        id=f"tr-{i}",
        lineage=lineage,
        task="",
        context="",
        action=action,
        observation=observation,
        pairing="turn",
    )


def test_outcomes_group_by_normalised_observation_with_support_and_lineages() -> None:
    found = [
        (_t(1, "b", "x", "Yes,  please."), 0.9),
        (_t(2, "a", "x", "No."), 0.95),
        (_t(3, "a", "x", "Yes, please.\n"), 0.7),
    ]
    shown = outcomes(found)
    assert [(o.observation, o.support, o.lineages, o.transitions) for o in shown] == [
        ("Yes, please.", 2, ("a", "b"), ("tr-1", "tr-3")),
        ("No.", 1, ("a",), ("tr-2",)),
    ]
    assert shown[0].similarity == pytest.approx(0.9)


def test_a_forecast_is_grounded_only_above_the_floor() -> None:
    built = transition_index.build(
        [
            _t(1, "a", "Shall I book the flight to Lisbon?", "Yes, book it."),
            _t(2, "b", "Shall I book the flight to Lisbon?", "Yes, book it."),
        ],
        held_out=0.0,
    )
    near = forecast(built, "Shall I book the flight to Lisbon?")
    assert near.grounded
    assert [(o.observation, o.support) for o in near.outcomes] == [("Yes, book it.", 2)]
    far = forecast(built, "The invoice total is wrong")
    assert not far.grounded
    assert far.outcomes == ()
    assert far.note.startswith("no grounding:")
    assert move_kind('get_order({"id": 1})') == "tool"
    assert move_kind("Ship it (carefully)") == "message"

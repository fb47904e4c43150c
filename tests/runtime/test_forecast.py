"""Forecasts over a real nats-server and a real simulator: the real outcomes of the
nearest transitions with their support and lineages, "no grounding" when nothing is
close enough, named refusals, and ``before`` with a forecast for its top moves."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import worldline
from tests.support import running, unique_world
from worldline.actors.registry import build
from worldline.actors.simulator import index as transition_index
from worldline.actors.simulator.forecast import FLOOR
from worldline.protocols.messages import Transition
from worldline.sdk.sim import NO_SIMULATOR_INDEX, NoSimulator

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.nats

ASK = "Where would you like to fly?"
SEARCH = 'search_flights({"to": "LIS"})'


def _transition(lineage: str, n: int, action: str, observation: str) -> Transition:
    return Transition(
        id=f"tr-{lineage}-{n}",
        lineage=lineage,
        task="book a flight",
        context="",
        action=action,
        observation=observation,
        pairing="id" if "(" in action else "turn",
    )


def make_index(tmp_path: Path) -> Path:
    """Three real conversations: two answered ASK with Lisbon (one with extra
    whitespace), one with Madrid; two searches returned the same flights."""
    transitions = [
        _transition("lin-a", 1, ASK, "To Lisbon, please."),
        _transition("lin-b", 1, ASK, "Madrid."),
        _transition("lin-c", 1, ASK, "To  Lisbon,\nplease."),
        _transition("lin-a", 2, SEARCH, '["TP1352", "IB3170"]'),
        _transition(
            "lin-c", 2, 'search_flights({"to": "lis"})', '["TP1352", "IB3170"]'
        ),
    ]
    out = tmp_path / "index"
    transition_index.save(transition_index.build(transitions, held_out=0.0), out)
    return out


async def test_a_forecast_returns_real_outcomes_with_support_and_lineages(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("forecast")
    simulator = build("simulator", sim_index=make_index(tmp_path))
    async with (
        running([simulator], url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="eval") as w,
    ):
        said = await w.forecast(ASK)
        searched = await w.forecast(SEARCH, k=3)
        kept = await w.forecast(ASK, exclude_lineages=["lin-a"])
        unlike = await w.forecast("Quarterly revenue grew in the northern region")
        unknown_tool = await w.forecast('cancel_order({"id": 4471})')
        with pytest.raises(worldline.SimulationError) as refused:
            await w.forecast(ASK, exclude_lineages=["lin-nowhere"])
        with pytest.raises(worldline.BadRequest):
            await w.forecast(ASK, k=0)
    assert said.grounded
    assert said.move_kind == "message"
    assert said.floor == pytest.approx(FLOOR)
    # Whitespace-normalised, the two Lisbon answers are one outcome of support 2.
    assert [(o.observation, o.support, o.lineages) for o in said.outcomes] == [
        ("To Lisbon, please.", 2, ("lin-a", "lin-c")),
        ("Madrid.", 1, ("lin-b",)),
    ]
    assert set(said.outcomes[0].transitions) == {"tr-lin-a-1", "tr-lin-c-1"}
    assert all(o.similarity > FLOOR for o in said.outcomes)
    assert said.index
    assert said.note.startswith("3 of 3")
    assert searched.grounded
    assert searched.move_kind == "tool"
    assert [(o.observation, o.support) for o in searched.outcomes] == [
        ('["TP1352", "IB3170"]', 2)
    ]
    assert searched.outcomes[0].similarity == pytest.approx(1.0)
    # An excluded lineage never supports an outcome (equal support and
    # similarity: ordered by the observation).
    assert [(o.observation, o.lineages) for o in kept.outcomes] == [
        ("Madrid.", ("lin-b",)),
        ("To Lisbon, please.", ("lin-c",)),
    ]
    for ungrounded in (unlike, unknown_tool):
        assert not ungrounded.grounded
        assert ungrounded.outcomes == ()
        assert ungrounded.note.startswith("no grounding:")
    assert refused.value.name == "unknown_lineage"


async def test_without_an_index_a_forecast_is_refused_and_before_says_so(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("noindex")
    async with worldline.connect(nats_url, world=world, agent="eval") as w:
        with pytest.raises(NoSimulator, match="no simulator answers"):
            await w.forecast(ASK)  # no simulator at all
        async with running([build("simulator")], url=nats_url, data=tmp_path):
            with pytest.raises(worldline.SimulationError) as caught:
                await w.forecast(ASK)
    assert caught.value.name == "no_index"


async def test_before_with_forecasts_grounds_the_top_move(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("beforecast")
    writers = [build(n) for n in ("fusion", "materializer", "projector")]
    simulator = build("simulator", sim_index=make_index(tmp_path))
    async with worldline.connect(nats_url, world=world, agent="ada") as ada:
        async with running(writers, url=nats_url, data=tmp_path / "w"):
            await ada.add(ASK, type="gap")
            await ada.add("The sales pipeline doubled in October", confidence=0.6)
            bare = await ada.before_with_forecasts(ASK)  # no simulator yet
        async with running([*writers, simulator], url=nats_url, data=tmp_path / "w"):
            annotated = await ada.before_with_forecasts(ASK)
            plain = await ada.before(ASK, at=annotated.view.at)
    assert annotated.view == plain  # before itself is unchanged
    assert annotated.view.moves, "the gap is a move"
    top = annotated.forecasts[0]
    assert top.move == annotated.view.moves[0]
    assert top.move.text == f"Answer the open question: {ASK}"
    assert top.asked == ASK
    assert top.forecast.grounded
    assert top.forecast.outcomes[0].observation == "To Lisbon, please."
    assert top.forecast.outcomes[0].support == 2
    assert len(annotated.forecasts) == min(3, len(annotated.view.moves))
    assert bare.forecasts
    assert all(
        not f.forecast.grounded and f.forecast.note == NO_SIMULATOR_INDEX
        for f in bare.forecasts
    )

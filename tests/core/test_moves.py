"""Moves ranked by expected information gain toward the goals they serve
(worldline/actors/projector/worldview.py, worldline/actors/belief_model/
information.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from worldline.actors.belief_model import information
from worldline.actors.projector.worldview import Scene, gains, project, ranked_moves
from worldline.protocols.beliefs import BeliefEdge
from worldline.protocols.messages import Belief

W: Final = "w1"
T0: Final = datetime(2026, 3, 1, tzinfo=UTC)


def belief(
    bid: str, text: str, confidence: float | None = 0.6, sd: float | None = 0.1
) -> Belief:
    kind = "goal" if bid.startswith("goal") else "claim"
    if bid.startswith("gap"):
        kind = "gap"
    return Belief(
        id=bid,
        text=text,
        type=kind,  # type: ignore[arg-type]
        confidence=None if kind != "claim" else confidence,
        uncertainty=None if kind != "claim" else sd,
        author="ada",
        created_at=T0,
        updated_at=T0,
    )


def rests(eid: str, dependent: str, premise: str, c: float = 0.9) -> BeliefEdge:
    return BeliefEdge(
        id=eid, type="depends_on", source=dependent, target=premise, confidence=c
    )


def scene() -> Scene:
    """A goal resting on a fairly sure premise; a hub four beliefs rest on, most
    uncertain of all, that the goal does not rest on."""
    beliefs = [
        belief("goal-ship", "Ship the release on Friday"),
        belief("premise", "The release branch is green", 0.7, 0.2),
        belief("hub", "The staging cluster is healthy", 0.5, 0.3),
        *(belief(f"leaf{i}", f"Staging job {i} passes", 0.8, 0.05) for i in range(4)),
    ]
    edges = [
        rests("e-goal", "goal-ship", "premise"),
        *(rests(f"e-hub{i}", f"leaf{i}", "hub") for i in range(4)),
    ]
    return Scene(world=W, decl=None, beliefs=beliefs, edges=edges)


def test_the_move_toward_the_goal_leads_and_names_it() -> None:
    moves = ranked_moves(scene())
    top = moves[0]
    assert top.id == "move:premise"
    assert top.trace == ("premise", "goal-ship")
    found = gains(scene())["premise"]
    assert top.score == found.total
    assert top.text == (
        "Gather evidence on: The release branch is green (toward goal "
        f'"Ship the release on Friday": expected gain {found.toward_goals:.2g} bits)'
    )
    # The hub is more uncertain and more load-bearing, but no goal rests on it:
    # it ranks below, by its own gain, and names no goal.
    hub = gains(scene())["hub"]
    assert hub.own > found.own
    assert hub.load > found.load
    assert hub.goals == {}
    assert hub.total < found.total


def test_without_goals_the_load_bearing_uncertain_belief_leads() -> None:
    plain = Scene(
        world=W,
        decl=None,
        beliefs=[b for b in scene().beliefs if b.type != "goal"],
        edges=scene().edges[1:],
    )
    top = ranked_moves(plain)[0]
    assert top.id == "move:hub"
    assert top.trace == ("hub",)
    assert top.text == "Gather evidence on: The staging cluster is healthy"


def test_the_gain_reads_each_belief_as_the_math_does() -> None:
    found = gains(scene())
    pair = information.pair_of(0.7, 0.2)
    assert found["premise"].own == information.own_gain(*pair)
    assert "goal-ship" not in found  # a goal is no move
    # A leaf rests on the hub but nothing rests on it: load 1 against the hub's.
    assert found["leaf0"].load < found["hub"].load == 1.0


def test_a_query_still_decides_and_the_gain_lifts() -> None:
    view = project(scene(), "ada", "staging job 2 passes", T0)
    assert view.moves[0].id == "move:leaf2"
    # With nothing matched, the gain alone decides.
    assert project(scene(), "ada", "zebra", T0).moves[0].id == "move:premise"


def test_an_open_question_a_goal_rests_on_is_worth_answering() -> None:
    base = scene()
    gap = belief("gap-owner", "Who signs off the release?")
    with_gap = Scene(
        world=W,
        decl=None,
        beliefs=[*base.beliefs, gap],
        edges=[*base.edges, rests("e-gap", "goal-ship", "gap-owner")],
    )
    moves = ranked_moves(with_gap)
    top = moves[0]
    assert top.id == "move:gap-owner"
    assert top.text.startswith("Answer the open question: Who signs off the release?")
    assert top.trace == ("gap-owner", "goal-ship")

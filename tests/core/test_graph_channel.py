"""The graph channel (issue 27, :mod:`worldline.actors.projector.graph`): from the
query's best matches to the beliefs that share a name or an edge with them, so a
two-hop question reaches a second belief that holds none of its words. Through the
projector core on an in-memory store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.core.test_index import Replica
from worldline.actors.projector import graph

if TYPE_CHECKING:
    import pytest

    from worldline.protocols.messages import WorldviewReply

QUESTION = (
    "What government position was held by the woman who portrayed Corliss Archer "
    "in the film Kiss and Tell?"
)
FIRST = (
    "Kiss and Tell is a 1945 American comedy film starring then 17-year-old "
    "Shirley Temple as Corliss Archer."
)
SECOND = "Shirley Temple Black later served as United States Chief of Protocol."


def shown(reply: WorldviewReply) -> list[str]:
    return [i for leaf in [*reply.view.current, *reply.view.moves] for i in leaf.trace]


def world(*, second: str = SECOND) -> Replica:
    """The two hops among beliefs that share the question's words and not the
    name (so the second hop has no word of the question and is outranked)."""
    r = Replica()
    r.belief("first", FIRST)
    r.belief("second", second)
    fillers = [
        "Corliss Archer is a fictional teenage girl of a radio comedy.",
        "Meet Corliss Archer was a radio program about a teenage girl.",
        "A Kiss for Corliss is a 1949 comedy film about Corliss Archer.",
        "The government position of Lord High Treasurer is an English office.",
        "Janet Waldo portrayed Corliss Archer on the radio.",
        "Kiss Me Kate is a musical film of 1953.",
        "The woman who held the position was a film producer.",
        "Tell Me a Riddle is a 1980 film.",
    ]
    for n, text in enumerate(fillers):
        r.belief(f"filler-{n}", text)
    for n in range(200):  # a world of some size: the name is rare in it
        r.belief(f"other-{n}", f"Item {n} of the archive was catalogued in {1900 + n}.")
    return r


def test_the_second_hop_enters_through_the_name_the_first_brings() -> None:
    r = world()
    found = shown(r.before(QUESTION))
    assert "first" in found
    assert "second" in found


def test_without_the_channel_the_second_hop_is_not_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r = world()
    monkeypatch.setattr(graph, "NEIGHBOURS", 0)
    found = shown(r.before(QUESTION))
    assert "first" in found
    assert "second" not in found


def test_shared_words_that_are_no_name_link_nothing() -> None:
    # The second belief shares rare words with the first ("1945", "comedy",
    # "starring"), none of them a name, and none with the question.
    r = world(second="A 1945 comedy starring a teenage actress was rated.")
    assert "second" not in shown(r.before(QUESTION))


def test_an_edge_links_a_belief_with_no_shared_word() -> None:
    r = world(second="The archive opens at nine on weekdays.")
    assert "second" not in shown(r.before(QUESTION))
    r.edge("e1", "supports", "first", "second")
    assert "second" in shown(r.before(QUESTION))


def test_names_are_runs_of_capitalised_words() -> None:
    found = [name for name, _ in graph.names(FIRST)]
    assert found == ["Kiss and Tell", "American", "Shirley Temple", "Corliss Archer"]
    assert graph.names("The cat sat.") == []

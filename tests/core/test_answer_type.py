"""Answer types (issue 27): a question that asks when lifts the beliefs that say when,
one that asks where those that name a place; the time an artifact says it happened
becomes its statements' observation time. Pure functions, and the extractor and
projector cores on in-memory stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Final

import msgspec
import pytest

from tests.core.test_index import Replica
from tests.core.test_observation_context import apply, shown, statements
from worldline.actors.projector import answer_type, context, core, index
from worldline.actors.projector.relevance import Relevance
from worldline.protocols.messages import Belief, BeliefChanged
from worldline.sdk.beliefs import observation_id

W: Final = "w1"
T0: Final = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("When did Ross call Rachel?", "time"),
        ("what year was the bridge built?", "time"),
        ("In which year did it open?", "time"),
        ("How long did the meeting last?", "time"),
        ("And when is the flight?", "time"),
        ("Where is Rachel when she glares at Ross?", "place"),
        ("In which city was Tesla born?", "place"),
        ("Who called Rachel when she was out?", None),
        ("What did Ross say?", None),
        ("How many cats are there?", None),
        ("Why did he leave?", None),
        ("deploy the auth service", None),
    ],
)
def test_the_kind_a_question_asks_is_read_from_its_first_words(
    question: str, kind: str | None
) -> None:
    assert answer_type.asked(question) == kind


@pytest.mark.parametrize(
    ("text", "time", "place"),
    [
        ("I went to the support group yesterday.", True, False),
        ("We met on 7 May 2023 in Paris.", True, True),
        ("The flight gets in in a couple hours.", True, False),
        ("It was built in 1889.", True, False),
        ("See you at 5:30 pm.", True, False),
        ("She was sitting in Monica's apartment.", False, True),
        ("You may want to march on.", False, False),
        ("Let's meet at Central Perk.", False, True),
        ("The cache is cold.", False, False),
    ],
)
def test_a_text_offers_a_time_or_a_place(text: str, time: bool, place: bool) -> None:
    assert answer_type.offers("time", text) is time
    assert answer_type.offers("place", text) is place


def test_a_when_question_lifts_the_belief_that_says_when() -> None:
    plain = "Ross called Rachel about the lasagna."
    dated = "Ross called Rachel about the lasagna yesterday."
    asked = Relevance("When did Ross call Rachel?", "")
    asked.calibrate([plain, dated])
    # BM25's length norm puts the shorter text first; the lift turns it round.
    assert asked.channels(plain)["lexical"] > asked.channels(dated)["lexical"]
    assert asked(dated) > asked(plain)
    other = Relevance("Did Ross call Rachel?", "")
    other.calibrate([plain, dated])
    assert other(plain) > other(dated)
    # A text sharing nothing with the question is not brought in by its date.
    assert asked("The bakery opens tomorrow.") == 0.0


def test_a_when_question_reaches_the_reply_that_says_when() -> None:
    r = Replica()
    for i in range(6):
        apply(r, statements(f"Gunther: Table {i} wants more coffee, Ross.", n=10 + i))
    found = [
        *statements("Monica Geller: Ross checked his messages at the party.", n=1),
        *statements("Monica Geller: Ross checked his messages the next morning.", n=2),
    ]
    apply(r, found)
    plain, dated = (s.belief_id for s in found)
    # The kinds are read when the card is written, not when it is ranked.
    kept = {i: card.offers for i in (plain, dated) if (card := index.card(r.st, W, i))}
    assert kept == {plain: (), dated: ("time",)}
    view = shown(r.before("When did Ross check his messages?"))
    assert view.index(dated) < view.index(plain)
    view = shown(r.before("Did Ross check his messages?"))  # asks no time
    assert view.index(plain) < view.index(dated)


def test_an_artifacts_date_is_when_its_statements_were_observed() -> None:
    said = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    found = statements("Caroline: I went to the support group yesterday.", said=said)
    assert [s.evidence.observed_at for s in found] == [said]
    assert [s.at for s in found] == [T0]  # the op is still made when handed over
    # A time without a zone is UTC; a time after the handing over is then.
    naive = statements("Caroline: I went.", said=said.replace(tzinfo=None))
    assert naive[0].evidence.observed_at == said
    later = statements("Caroline: I went.", said=T0 + timedelta(days=3))
    assert later[0].evidence.observed_at == T0
    assert statements("Caroline: I went.")[0].evidence.observed_at == T0


def test_the_same_text_on_another_day_is_another_observation() -> None:
    parts = (W, "ada", "s", "artifact", "text", "Yes.")
    plain = observation_id(*parts)
    assert plain == observation_id(*parts, "", None)
    day = datetime(2023, 5, 8, tzinfo=UTC)
    assert observation_id(*parts, "", day) != plain
    assert observation_id(*parts, "", day) != observation_id(
        *parts, "", day + timedelta(days=1)
    )


AT: Final = datetime(2023, 5, 10, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("question", "first", "last"),
    [
        ("What did Caroline do on 8 May 2023?", "2023-05-08", "2023-05-08"),
        ("What happened on May 8th?", "2023-05-08", "2023-05-08"),  # at's year
        ("What was decided on 2023-05-07?", "2023-05-07", "2023-05-07"),
        ("What did she paint in 2022?", "2022-01-01", "2022-12-31"),
        ("What changed in May?", "2023-05-01", "2023-05-31"),
        ("What happened yesterday?", "2023-05-09", "2023-05-09"),
        ("What did we try three days ago?", "2023-05-07", "2023-05-07"),
        ("What did we decide last week?", "2023-05-01", "2023-05-07"),
        ("Who called this month?", "2023-05-01", "2023-05-10"),
    ],
)
def test_the_days_a_question_names(question: str, first: str, last: str) -> None:
    found = answer_type.days(question, AT)
    assert found is not None
    assert (found[0].isoformat(), found[1].isoformat()) == (first, last)


def test_no_days_without_a_date_or_a_clock() -> None:
    assert answer_type.days("What may happen to the march?", AT) is None
    assert answer_type.days("What happened yesterday?") is None  # no clock
    assert answer_type.days("What happened on May 8th?") is None  # no year


def said_on(r: Replica, text: str, day: datetime, n: int) -> str:
    found = statements(text, n=n, at=AT, said=day)
    apply(r, found)
    return found[0].belief_id


def test_a_question_about_a_day_finds_what_was_said_that_day() -> None:
    r = Replica()
    for i in range(6):
        apply(r, statements(f"Gunther: Table {i} wants more coffee.", n=10 + i, at=AT))
    text = "Caroline: I painted a lake sunrise."
    found = [
        *statements(text, n=1, at=AT, said=datetime(2023, 5, 8)),
        *statements(text, n=2, at=AT, said=datetime(2023, 5, 1)),
    ]
    first = found[0].belief_id  # one belief, said twice: first said on the 1st
    r.seq += 1
    b = Belief(id=first, text=found[0].text, type="claim", confidence=0.6,
               author="ada", created_at=AT, updated_at=AT, version=r.seq)  # fmt: skip
    change = BeliefChanged(belief=b, evidence=[s.evidence for s in found])
    r.st.apply(core.handle(r.st, change, r.ctx()))
    card = index.card(r.st, W, first)
    assert card is not None
    assert card.said == "2023-05-01"
    other = said_on(
        r, "Caroline: Melanie painted a lake sunset.", datetime(2023, 5, 8), 3
    )
    on_the_8th = shown(r.before("What did Caroline paint on 8 May 2023?"))
    assert on_the_8th.index(other) < on_the_8th.index(first)
    on_the_1st = shown(r.before("What did Caroline paint on 1 May 2023?"))
    assert on_the_1st.index(first) < on_the_1st.index(other)


def test_a_view_for_a_question_about_time_says_when_each_belief_was_said() -> None:
    r = Replica()
    went = said_on(
        r, "Caroline: I went to the support group yesterday.", datetime(2023, 5, 8), 1
    )
    view = r.before("When did Caroline go to the support group?").view
    leaf = next(leaf for leaf in view.current if leaf.id == went)
    assert leaf.said == "2023-05-08"
    assert "yesterday. (" in view.prompt
    assert "[said 2023-05-08]" in view.prompt
    plain = r.before("Did Caroline go to the support group?").view
    assert all(not leaf.said for leaf in plain.current)
    assert "[said" not in plain.prompt


def test_the_first_said_day_reads_a_time_without_a_zone_as_utc() -> None:
    aware = statements("Caroline: I went.", said=datetime(2023, 5, 8, 23, tzinfo=UTC))
    late = datetime(2023, 5, 9, 1, tzinfo=timezone(timedelta(hours=5)))  # the 8th, UTC
    zoned = msgspec.structs.replace(aware[0].evidence, id="ev-x", observed_at=late)
    raw = msgspec.structs.replace(
        aware[0].evidence, id="ev-y", observed_at=datetime(2023, 5, 9, 12)
    )  # what a raw client can send: decoded without a zone
    assert context.said([raw, zoned, aware[0].evidence]) == "2023-05-08"
    assert context.said([raw]) == "2023-05-09"
    assert context.said([]) == ""

"""``search`` and the list cursors in the SDK, over a real nats-server and the five
actors: the exact words find their belief first, each hit carries its channels and
trace, the cursors walk every hit (and every belief) exactly once, and a cursor the
projector did not hand out is refused with the fix."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from anyio.from_thread import start_blocking_portal

import worldline
from tests.support import all_actors, running, unique_world
from worldline import sync

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.protocols.messages import BeliefType, SearchHit

pytestmark = pytest.mark.nats

TARGET = "Zebra population is stable in the northern reserve"
# Nine beliefs that share the word "harbor" (two of them risks), and some that do not.
HARBOR: list[tuple[str, BeliefType]] = [
    ("The harbor crane needs a new gearbox before spring", "claim"),
    ("Harbor fees rose by a tenth this year", "claim"),
    ("Night shifts at the harbor are short of pilots", "claim"),
    ("The harbor dredging contract ends in June", "claim"),
    ("Fog closes the harbor about twelve days a year", "claim"),
    ("Harbor cameras cover the east quay only", "claim"),
    ("Customs at the harbor clear most containers in a day", "claim"),
    ("A storm surge could flood the harbor warehouses", "risk"),
    ("The only tug in the harbor may fail its inspection", "risk"),
]
OTHER = [
    "Billing runs on the legacy cluster",
    "The mobile app ships every second Tuesday",
    "Lions hunt mostly at night",
    "Reserve rangers patrol the southern fence weekly",
]


async def _seed(ada: worldline.World) -> tuple[str, str, dict[str, str]]:
    """The target's id, its one evidence id, and the harbor beliefs' ids by text."""
    target = await ada.add(TARGET, confidence=0.6)
    await ada.evidence(
        target.id,
        direction="supports",
        kind="measurement",
        source="census-2026",
        id="ev-zebra-census",
    )
    harbor = {}
    for text, kind in HARBOR:
        harbor[text] = (await ada.add(text, type=kind)).id
    for text in OTHER:
        await ada.add(text, confidence=0.5)
    return target.id, "ev-zebra-census", harbor


def _ids(hits: list[SearchHit] | tuple[SearchHit, ...]) -> list[str]:
    return [hit.belief.id for hit in hits]


async def test_search_ranks_pages_and_refuses_a_bad_cursor(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("search")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        target, evidence, harbor = await _seed(ada)

        # The exact words of one belief find it first, with its channels and trace.
        page = await ada.search("zebra population stable")
        assert page.hits, page
        first = page.hits[0]
        assert first.belief.id == target
        assert first.belief.text == TARGET
        assert first.channels["lexical"] > 0
        assert first.score > 0
        assert any(entry.startswith(evidence) for entry in first.trace), first.trace
        assert "census-2026" in " ".join(first.trace)
        # Hits come best first.
        scores = [hit.score for hit in page.hits]
        assert scores == sorted(scores, reverse=True)

        # Every belief with the word is found; pages of two walk the same hits as
        # one page of 200, in the same order, each exactly once.
        whole = await ada.search("harbor", limit=200)
        assert not whole.next_cursor
        assert set(harbor.values()) <= set(_ids(whole.hits))
        walked: list[str] = []
        cursor = ""
        pages = 0
        while True:
            part = await ada.search("harbor", limit=2, cursor=cursor)
            assert len(part.hits) <= 2
            walked += _ids(part.hits)
            pages += 1
            cursor = part.next_cursor
            if not cursor:
                break
        assert len(walked) >= len(HARBOR)
        assert pages >= len(walked) / 2  # two a page at most
        assert walked == _ids(whole.hits)
        assert len(set(walked)) == len(walked)
        streamed = [hit async for hit in ada.iter_search("harbor", page=3)]
        assert _ids(streamed) == walked
        capped = [hit async for hit in ada.iter_search("harbor", page=2, limit=5)]
        assert _ids(capped) == walked[:5]

        # The type filter keeps only that type.
        risks = await ada.search("harbor", type="risk", limit=50)
        assert {hit.belief.type for hit in risks.hits} == {"risk"}
        assert {harbor[t] for t, k in HARBOR if k == "risk"} <= set(_ids(risks.hits))

        # A cursor the projector did not hand out: refused, naming the fix.
        with pytest.raises(worldline.BadRequest, match=r"cursor.*next_cursor"):
            await ada.search("harbor", cursor="not-a-cursor")
        # Bounds the SDK checks before asking.
        with pytest.raises(worldline.BadRequest, match="outside 1-200"):
            await ada.search("harbor", limit=201)
        with pytest.raises(worldline.BadRequest, match="needs a query"):
            await ada.search("  ")


async def test_list_pages_follow_the_cursor(nats_url: str, tmp_path: Path) -> None:
    world = unique_world("listpages")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        for n in range(25):
            await ada.add(f"Sensor {n} on line four reads within tolerance")
        everything = [b.id for b in await ada.list(limit=None)]
        assert len(everything) == 25

        first = await ada.list_page(limit=10)
        assert (len(first.beliefs), first.total) == (10, 25)
        assert first.next_cursor
        second = await ada.list_page(limit=10, cursor=first.next_cursor)
        third = await ada.list_page(limit=10, cursor=second.next_cursor)
        assert not third.next_cursor
        paged = [b.id for p in (first, second, third) for b in p.beliefs]
        assert paged == everything  # each once, oldest first

        streamed = [b.id async for b in ada.iter_list(page=7)]
        assert streamed == everything
        resumed = [b.id async for b in ada.iter_list(page=4, cursor=first.next_cursor)]
        assert resumed == everything[10:]
        assert [b.id for b in await ada.list(limit=12)] == everything[:12]

        with pytest.raises(worldline.BadRequest, match=r"bad cursor .*next_cursor"):
            await ada.list_page(cursor="not-a-cursor")
        with pytest.raises(worldline.BadRequest, match="outside 1-10,000"):
            [b async for b in ada.iter_list(page=0)]


async def test_a_possessive_is_found_by_its_noun(nats_url: str, tmp_path: Path) -> None:
    world = unique_world("possessive")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        owned = await ada.add("The harbor's only tug may fail its inspection")
        await ada.add("Billing runs on the legacy cluster")
        page = await ada.search("harbor")
        assert _ids(page.hits)[:1] == [owned.id]


def test_the_blocking_twins_page_too(nats_url: str, tmp_path: Path) -> None:
    world = unique_world("syncpages")
    with (
        start_blocking_portal(backend="asyncio") as portal,
        portal.wrap_async_context_manager(
            running(all_actors(), url=nats_url, data=tmp_path)
        ),
        sync.connect(nats_url, world=world, agent="ada") as ada,
    ):
        for n in range(6):
            ada.add(f"Pump {n} hums at the usual pitch")
        everything = [b.id for b in ada.list(limit=None)]
        first = ada.list_page(limit=4)
        assert [b.id for b in first.beliefs] == everything[:4]
        assert first.next_cursor
        assert [b.id for b in ada.iter_list(page=2)] == everything
        whole = ada.search("pump pitch", limit=200)
        assert set(everything) <= {hit.belief.id for hit in whole.hits}
        streamed = [hit.belief.id for hit in ada.iter_search("pump pitch", page=2)]
        assert streamed == [hit.belief.id for hit in whole.hits]

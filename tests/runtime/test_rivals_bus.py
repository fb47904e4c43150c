"""Rival answers and learned reliability through a real nats-server (issue 18): answers
added with a slot weigh on each other, ``assess_sources`` learns a bad source and its
copies, ``sources`` shows it, the projector reads a slot at another clock as fusion
does, and the CLI's ``add --slot``, ``assess`` and ``sources`` work as a user runs
them."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.protocols.world import Authority, WorldDecl, WorldInfo
from worldline.sdk.batch import AddItem, EvidenceItem

if TYPE_CHECKING:
    from worldline.sdk.client import World

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).parent / "worldline")
AUTHORS = ("Tolkien", "Lewis", "Wirth")


def items(world: World, bad_copies: int) -> tuple[list[AddItem], list[EvidenceItem]]:
    """Twelve books; four honest stores (right on all they list), a bad store wrong
    on a quarter of the books, and ``bad_copies`` clones of it."""
    adds = [AddItem(text=a, slot=f"book-{q}") for q in range(12) for a in AUTHORS]
    # each honest store lists two thirds of the books
    cites = [
        cite(world, q, AUTHORS[0], f"store-{s}")
        for q in range(12)
        for s in range(4)
        if (q + s) % 3
    ]
    cites += [
        cite(world, q, AUTHORS[1 + q % 2], f"bad-{c}")
        for q in range(0, 12, 4)
        for c in range(bad_copies + 1)
    ]
    return adds, cites


def cite(world: World, q: int, author: str, source: str) -> EvidenceItem:
    from worldline.actors.belief_model.text import answer_id

    return EvidenceItem(
        belief_id=answer_id(world.world, f"book-{q}", author),
        direction="supports",
        kind="citation",
        source=source,
    )


async def picks(world: World) -> dict[int, str]:
    from worldline.actors.belief_model.text import answer_id

    found = {}
    for q in range(12):
        best = ("", -1.0)
        for author in AUTHORS:
            belief = await world.get(answer_id(world.world, f"book-{q}", author))
            assert belief is not None
            assert belief.slot == f"book-{q}"
            if (belief.confidence or 0.0) > best[1]:
                best = (author, belief.confidence or 0.0)
        found[q] = best[0]
    return found


@pytest.mark.timeout(120)
async def test_assessment_learns_the_bad_source_and_its_copies(
    nats_url: str, tmp_path: Path
) -> None:
    world_name = unique_world("rivals")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(
            nats_url, world=world_name, agent="ada", request_timeout=20
        ) as world,
    ):
        # ada loads for every store and its clones: each is declared hers to report,
        # so each counts as a voice of its own (undeclared, all would be ada's one).
        await world.declare(
            WorldDecl(
                world=WorldInfo(id=world_name),
                authority=Authority(admins=["ada"]),
                sources={"store-*": ["ada"], "bad-*": ["ada"]},
            )
        )
        adds, cites = items(world, bad_copies=5)
        loaded = await world.load([*adds, *cites])
        assert {r.outcome for r in loaded} == {"applied"}
        before = await picks(world)
        covered = [q for q in range(12) if q % 4 == 0]
        assert all(before[q] != AUTHORS[0] for q in covered)  # six bad voices win
        await world.assess_sources()
        after = await picks(world)
        assert all(author == AUTHORS[0] for author in after.values())
        reply = await world.sources(limit=3)
        assert reply.total == 10  # four stores, six bad ones
        assert all(s.source.startswith("bad-") for s in reply.sources)
        assert all(s.weight < 0.2 for s in reply.sources)
        honest = await world.sources("store-0")
        assert honest.sources[0].accuracy is not None
        assert honest.sources[0].accuracy > 0.8
        # A read at another clock weighs the rivals as fusion does.
        from worldline.actors.belief_model.text import answer_id

        one = answer_id(world.world, "book-0", AUTHORS[0])
        now = await world.get(one)
        assert now is not None
        later = await world.get(one, at=now.updated_at + timedelta(seconds=1))
        assert later is not None
        assert later.confidence == pytest.approx(now.confidence, abs=1e-6)


@pytest.mark.timeout(120)
def test_the_cli_adds_answers_assesses_and_lists_sources(
    nats_url: str, tmp_path: Path
) -> None:
    import anyio

    world = unique_world("rivals-cli")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [WORLDLINE, *args, "--nats", nats_url, "--world", world, "--agent", "ada"],
            capture_output=True,
            text=True,
            timeout=60,
        )

    async def scenario() -> None:
        async with running(all_actors(), url=nats_url, data=tmp_path):
            await anyio.to_thread.run_sync(body)

    def body() -> None:
        declaration = tmp_path / "world.toml"
        declaration.write_text(
            f'[world]\nid = "{world}"\n[authority]\nadmins = ["ada"]\n'
            '[sources]\ns1 = ["ada"]\ns2 = ["ada"]\n'
        )
        declared = cli("world", "load", str(declaration))
        assert declared.returncode == 0, declared.stderr
        ids = []
        for author in ("Tolkien", "Lewis"):
            added = cli("add", author, "--slot", "who wrote The Hobbit", "--json")
            assert added.returncode == 0, added.stderr
            ids.append(json.loads(added.stdout)["id"])
        for store in ("s1", "s2"):
            ev = cli(
                "evidence",
                ids[0],
                "--direction",
                "supports",
                "--kind",
                "citation",
                "--source",
                store,
            )
            assert ev.returncode == 0, ev.stderr
        rival = cli("get", ids[1], "--json")
        assert json.loads(rival.stdout)["confidence"] < 0.5  # the others' support
        assessed = cli("assess")
        assert assessed.returncode == 0, assessed.stderr
        assert "assessed (seq" in assessed.stdout
        assert "learned in " in assessed.stdout  # the fixed point's rounds and change
        traced = cli("trace", ids[0])
        assert traced.returncode == 0, traced.stderr
        assert "weights: s1 x" in traced.stdout  # the learned weight, per source
        assert f"rival answers (their support counts against it): {ids[1]}" in (
            traced.stdout
        )
        listing = cli("sources", "--json")
        assert listing.returncode == 0, listing.stderr
        assert {s["source"] for s in json.loads(listing.stdout)["sources"]} == {
            "s1",
            "s2",
        }
        assert json.loads(listing.stdout)["rounds"] > 0
        lines = [
            {"add": {"text": "Knuth", "slot": "who wrote TAOCP", "id": "b-knuth"}},
            {"add": {"text": "Wirth", "slot": "who wrote TAOCP", "id": "b-wirth"}},
            *(
                {
                    "evidence": {
                        "belief_id": "b-knuth",
                        "direction": "supports",
                        "kind": "citation",
                        "source": store,
                    }
                }
                for store in ("s1", "s2")
            ),
        ]
        loaded = subprocess.run(
            [WORLDLINE, "load", "-", "--nats", nats_url, "--world", world],
            input="\n".join(json.dumps(line) for line in lines),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert loaded.returncode == 0, loaded.stderr
        wirth = json.loads(cli("get", "b-wirth", "--json").stdout)
        assert wirth["slot"] == "who wrote TAOCP"
        assert wirth["confidence"] < 0.5
        conflict = cli("add", "Tolkien", "--slot", "another question", "--id", ids[0])
        assert conflict.returncode == 3, conflict.stderr
        assert "already exists" in conflict.stderr

    anyio.run(scenario)


@pytest.mark.timeout(60)
async def test_answers_loaded_together_tie_exactly(
    nats_url: str, tmp_path: Path
) -> None:
    """One load is one instant: two answers with one citation each read exactly
    alike, so a tie is not settled by which item was built a microsecond later."""
    from worldline.actors.belief_model.text import answer_id

    world_name = unique_world("tie")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world_name, agent="ada") as world,
    ):
        asked = "population of Springfield"
        items: list[AddItem | EvidenceItem] = [
            AddItem(text=n, slot=asked) for n in ("30720", "30270")
        ]
        items += [
            EvidenceItem(
                belief_id=answer_id(world_name, asked, n),
                direction="supports",
                kind="citation",
                source=f"editor-{n}",
            )
            for n in ("30720", "30270")
        ]
        loaded = await world.load(items, chunk=1)  # every item its own chunk
        assert {r.outcome for r in loaded} == {"applied"}
        first = await world.get(answer_id(world_name, asked, "30720"))
        second = await world.get(answer_id(world_name, asked, "30270"))
        assert first is not None
        assert second is not None
        assert first.confidence == second.confidence

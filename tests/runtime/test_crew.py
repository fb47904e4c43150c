"""The crew world on a real nats-server: the seed's five scenarios and its promises."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import msgspec
import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.ops.replay import replay
from worldline.protocols.messages import Notification, Rejection, WorkAssigned
from worldline.protocols.world import Edge, EdgeSeed, EntitySeed, Grant, WorldDecl
from worldline.sdk.declaration import load_declaration

if TYPE_CHECKING:
    from worldline import World
    from worldline.sdk.crew import InboxItem

pytestmark = pytest.mark.nats

CREW_TOML = Path(__file__).resolve().parents[2] / "examples" / "crew.toml"
PILOT = "project:soteria-pilot-conversion"


def crew(world: str) -> WorldDecl:
    """The example crew, renamed to ``world``."""
    decl = load_declaration(CREW_TOML)
    return msgspec.structs.replace(
        decl, world=msgspec.structs.replace(decl.world, id=world)
    )


async def _drain(w: World) -> list[InboxItem]:
    """Everything in ``w``'s inbox now, left unacknowledged for the next reader."""
    items = await w.inbox(wait=0.5, limit=500)
    for item in items:
        await item.release()
    return items


def _work(items: list[InboxItem]) -> list[WorkAssigned]:
    return [i.message for i in items if isinstance(i.message, WorkAssigned)]


async def test_gtm_pivot_reaches_exactly_the_agents_following_intent(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("pivot")
    async with running(all_actors(), url=nats_url, data=tmp_path):
        async with worldline.connect(nats_url, world=world, agent="henry") as henry:
            await henry.declare(crew(world))
            await henry.write("user:henry", "intent", "payer-ops content engine")
        got: dict[str, list[WorkAssigned]] = {}
        for agent in ("ada", "spock", "scotty", "zora", "geordi", "book"):
            async with worldline.connect(nats_url, world=world, agent=agent) as w:
                got[agent] = _work(await _drain(w))
    assert {a for a, work in got.items() if work} == {"spock", "scotty", "zora"}
    for agent in ("spock", "scotty", "zora"):
        (request,) = got[agent]
        assert request.work_kind == "realign_request"
        assert request.requested_by == "henry"
        assert request.rule == "intent-pivot"
        assert "payer-ops content engine" in request.goal
        assert request.due_at is not None


async def test_hot_lead_assigns_a_due_typed_request_to_the_lead_workers(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("lead")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
        worldline.connect(nats_url, world=world, agent="spock") as spock,
        worldline.connect(nats_url, world=world, agent="zora") as zora,
    ):
        await ada.declare(crew(world))
        version = await ada.write("lead:acme-tpa", "stage", "hot")
        (request,) = _work(await _drain(spock))
        assert request.work_kind == "lead_request"
        assert request.priority == 1
        assert request.due_at is not None
        assert (request.due_at - request.at).total_seconds() == 4 * 3600
        assert _work(await _drain(zora)) == []
        # The work request is a first-class entity with who, what, why and when.
        listed = await spock.read_world(entity_type="work")
        (work,) = [e for e in listed.entities if e.id == request.work]
        assert work.fields["assigned_to"].value == "spock"
        assert work.fields["requested_by"].value == "ada"
        assert work.fields["status"].value == "open"
        assert work.version == version


async def test_offline_agent_catches_up_in_order_and_acks_only_its_own(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("offline")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        await ada.declare(crew(world))
        for phase in ("sla", "contract", "live"):
            await ada.write(PILOT, "phase", phase)
    # Every actor stopped: the crew's machines went away. Spock comes back later,
    # against a fresh set of actors, and finds everything, in order.
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="spock") as spock,
        worldline.connect(nats_url, world=world, agent="scotty") as scotty,
    ):
        first = await _drain(spock)
        again = await _drain(spock)
        assert [i.message.id for i in first] == [i.message.id for i in again]
        assert [i.seq for i in first] == sorted(i.seq for i in first)
        notes = [i.message for i in first if isinstance(i.message, Notification)]
        assert [n.value for n in notes] == ["sla", "contract", "live"]
        # One re-plan per dedupe window, however often the phase moved.
        assert len(_work(first)) == 1
        # Spock's acks are Spock's: Scotty still sees his own copy.
        await spock.ack(await spock.inbox(wait=0.5, limit=500))
        assert await _drain(spock) == []
        assert len(_work(await _drain(scotty))) == 1
        view = await spock.view()
        assert view is not None
        assert view.inbox_pending == 0


async def test_concurrent_writers_lose_no_update(nats_url: str, tmp_path: Path) -> None:
    world = unique_world("race")
    writers = [f"w{i}" for i in range(12)]
    decl = crew(world)
    decl = msgspec.structs.replace(
        decl,
        authority=msgspec.structs.replace(
            decl.authority,
            grants=[
                *decl.authority.grants,
                Grant(agents=writers, fields=["company.*"]),
            ],
        ),
    )
    outcomes: dict[str, str] = {}
    rejections: list[worldline.Rejected] = []
    async with running(all_actors(), url=nats_url, data=tmp_path):
        async with worldline.connect(nats_url, world=world, agent="henry") as henry:
            await henry.declare(decl)
            base = await henry.write("company:soteria", "hot_leads", 11)

        async def write(agent: str) -> None:
            async with worldline.connect(nats_url, world=world, agent=agent) as w:
                try:
                    await w.write(
                        "company:soteria", "hot_leads", agent, expect_version=base
                    )
                    outcomes[agent] = "applied"
                except worldline.Rejected as exc:
                    outcomes[agent] = "rejected"
                    rejections.append(exc)

        async with anyio.create_task_group() as tg:
            for agent in writers:
                tg.start_soon(write, agent)
        async with worldline.connect(nats_url, world=world, agent="henry") as henry:
            await henry.sync()  # read what the other writers wrote
            state = await henry.read_world(entity_type="company")
    applied = [a for a, o in outcomes.items() if o == "applied"]
    assert len(outcomes) == len(writers)  # each write is applied or rejected: 0 lost
    assert len(applied) == 1
    assert {r.code for r in rejections} == {"version_conflict"}
    assert all((r.current_version or 0) > base for r in rejections)
    (soteria,) = [e for e in state.entities if e.id == "company:soteria"]
    assert soteria.fields["hot_leads"].value == applied[0]


async def test_a_crew_of_fifty_does_not_cascade(nats_url: str, tmp_path: Path) -> None:
    world = unique_world("fifty")
    agents = [f"a{i:02d}" for i in range(50)]
    decl = crew(world)
    decl = msgspec.structs.replace(
        decl,
        entities=[*decl.entities, *(EntitySeed(id=f"agent:{a}") for a in agents)],
        edges=[
            *decl.edges,
            *(
                EdgeSeed(
                    id=f"c-{a}",
                    type="collaborates_on",
                    source=f"agent:{a}",
                    target=PILOT,
                )
                for a in agents
            ),
        ],
        rules=[
            *decl.rules,
            # A rule on the work requests rules create: without dampening, a loop.
            msgspec.structs.replace(
                decl.rules[0],
                id="work-echo",
                on="work.status",
                notify="collaborates_on",
            ),
        ],
    )
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        await ada.declare(decl)
        await ada.write(PILOT, "phase", "sla")
        await ada.write(PILOT, "phase", "contract")  # inside the dedupe window
        works = (await ada.read_world(entity_type="work")).entities
        per_agent: dict[str, int] = {}
        for work in works:
            assignee = str(work.fields["assigned_to"].value)
            per_agent[assignee] = per_agent.get(assignee, 0) + 1
        async with worldline.connect(nats_url, world=world, agent="a07") as a07:
            inbox = await _drain(a07)
    collaborators = {*agents, "spock", "scotty", "zora"}
    assert set(per_agent) == collaborators
    assert all(count == 1 for count in per_agent.values())  # no duplicates
    assert len(_work(inbox)) == 1


async def test_unauthorized_write_is_rejected_and_changes_nothing(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("authz")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="henry") as henry,
        worldline.connect(nats_url, world=world, agent="zora") as zora,
    ):
        await henry.declare(crew(world))
        before = await henry.read_world()  # henry declared: his reads are fenced
        with pytest.raises(worldline.Rejected) as caught:
            await zora.write("user:henry", "intent", "whatever zora wants")
        assert caught.value.code == "unauthorized"
        with pytest.raises(worldline.Rejected) as edge:
            await zora.link(
                "rel-x", "collaborates_on", "agent:spock", "project:openclaw-v1"
            )
        assert edge.value.code == "unauthorized"
        after = await zora.read_world()
        (rejection,) = [
            i.message for i in await _drain(zora) if isinstance(i.message, Rejection)
        ][:1]
        assert rejection.code == "unauthorized"
    assert after.entities == before.entities
    assert after.edges == before.edges


async def test_replay_of_the_log_reproduces_the_live_hash(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("replay")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path / "live"),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
        worldline.connect(nats_url, world=world, agent="zora") as zora,
    ):
        await ada.declare(crew(world))
        await ada.add(
            "Pilots convert when the SLA names a stop-loss carrier", confidence=0.6
        )
        await ada.write(PILOT, "phase", "sla")
        await ada.link("rel-x", "collaborates_on", "agent:book", PILOT)
        await ada.put_work("w1", kind="research_request", assigned_to="spock",
                           goal="Map SLA objections")  # fmt: skip
        with pytest.raises(worldline.Rejected):
            await zora.write(PILOT, "phase", "nope")
        await zora.set_presence("drafting", task="payer-ops post")  # never hashed
        await ada.unlink("rel-x")
        await ada.add("Unrelated goal", type="goal")
        records = [r async for r in ada.export()]
        live = await ada.state_hash()
    result = replay(records, tmp_path / "replayed", world)
    assert result.ops == len(records) == 8  # presence is not an op
    assert live.applied == result.last_seq
    assert result.hash == live.hash


async def test_views_are_small_and_kept_current_in_the_bucket(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("views")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
        worldline.connect(nats_url, world=world, agent="spock") as spock,
    ):
        await ada.declare(crew(world))
        await ada.write(PILOT, "phase", "sla")
        with anyio.fail_after(10):
            while True:
                computed = await spock.view()
                stored = await spock.stored_view()
                if stored == computed and computed is not None and computed.work:
                    break
                await anyio.sleep(0.05)
        presence = await spock.presence("zora")
        sizes = []
        for agent in ("ada", "spock", "scotty", "zora", "geordi", "book"):
            view = await ada.view(agent)
            assert view is not None
            sizes.append(len(msgspec.json.encode(view)))
    assert presence is None
    assert all(2_000 <= size <= 10_000 for size in sizes), sizes
    assert stored is not None
    assert [w.fields["kind"].value for w in stored.work] == ["replan_request"]
    assert Edge in (type(e) for e in stored.edges)


async def test_a_write_that_changes_nothing_reports_the_version_it_kept(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("noop")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        await ada.declare(crew(world))
        first = await ada.write(PILOT, "phase", "sla")
        again = await ada.write(PILOT, "phase", "sla")
        assert again == first
        moved = await ada.write(PILOT, "phase", "contract", expect_version=again)
        assert moved > first


async def test_an_edge_cannot_be_taken_over_by_reusing_its_id(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("takeover")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="henry") as henry,
        worldline.connect(nats_url, world=world, agent="zora") as zora,
    ):
        await henry.declare(crew(world))
        with pytest.raises(worldline.Rejected) as caught:
            await zora.link("rel-1", "collaborates_on", "agent:zora", PILOT)
        assert caught.value.code == "unauthorized"
        edges = {e.id: e for e in (await zora.read_world()).edges}
    assert edges["rel-1"].source == "agent:spock"


async def test_one_agent_cannot_bury_anothers_inbox_under_work(
    nats_url: str, tmp_path: Path
) -> None:
    """Issue 23 (F14): spock filed 200 of 200 work items into zora's inbox. Now the
    17th open one is refused ``too_much_work``, closing one frees its place, and
    ada (an admin) still assigns what she likes."""
    world = unique_world("bury")
    cap = 16  # MAX_OPEN_WORK
    async with (
        running(all_actors(), url=nats_url, data=tmp_path / "live"),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
        worldline.connect(nats_url, world=world, agent="spock") as spock,
        worldline.connect(nats_url, world=world, agent="zora") as zora,
    ):
        await ada.declare(crew(world))
        goal = "Drop everything and re-read the whole world model."
        for n in range(cap):
            await spock.put_work(f"spam-{n}", kind="chore", assigned_to="zora",
                                 goal=goal, priority=1)  # fmt: skip
        refused = 0
        for n in range(cap, cap + 4):
            with pytest.raises(worldline.Rejected) as caught:
                await spock.put_work(f"spam-{n}", kind="chore", assigned_to="zora",
                                     goal=goal, priority=1)  # fmt: skip
            assert caught.value.code == "too_much_work"
            assert "close one of them" in caught.value.reason
            refused += 1
        await spock.put_work("spam-0", kind="chore", assigned_to="zora", goal=goal,
                             priority=1, status="done")  # fmt: skip
        await spock.put_work("spam-freed", kind="chore", assigned_to="zora",
                             goal=goal, priority=1)  # fmt: skip
        await ada.put_work("lead-1", kind="review", assigned_to="zora",
                           goal="Review the pilot")  # fmt: skip
        spam = [w for w in _work(await _drain(zora)) if w.requested_by == "spock"]
        rejections = [
            i.message for i in await _drain(spock) if isinstance(i.message, Rejection)
        ]
        listed = await zora.read_world(entity_type="work")
        records = [r async for r in ada.export()]
        live = await ada.state_hash()
    replayed = replay(records, tmp_path / "replayed", world)
    assert replayed.hash == live.hash  # the log refuses the same ops again
    assert refused == 4
    assert len(spam) == cap + 1  # sixteen, then one more once a place was freed
    assert {r.code for r in rejections} == {"too_much_work"}
    assert len(rejections) == 4
    open_spam = [
        e
        for e in listed.entities
        if e.fields["requested_by"].value == "spock"
        and e.fields["status"].value == "open"
    ]
    assert len(open_spam) == cap
    assert any(e.id == "work:lead-1" for e in listed.entities)


async def test_filed_and_closed_work_waits_for_the_assignees_acks(
    nats_url: str, tmp_path: Path
) -> None:
    """Closing frees a place, so filing and closing could still post without end:
    at most 32 (MAX_UNREAD_WORK) of spock's WorkAssigned wait unacked in zora's
    inbox; once she acks them spock may file again."""
    world = unique_world("churn")
    unread = 32  # MAX_UNREAD_WORK
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
        worldline.connect(nats_url, world=world, agent="spock") as spock,
        worldline.connect(nats_url, world=world, agent="zora") as zora,
    ):
        await ada.declare(crew(world))
        for n in range(unread):
            await spock.put_work(f"c-{n}", kind="chore", assigned_to="zora", goal="x")
            await spock.put_work(f"c-{n}", kind="chore", assigned_to="zora",
                                 goal="x", status="cancelled")  # fmt: skip
        with pytest.raises(worldline.Rejected) as caught:
            await spock.put_work("c-more", kind="chore", assigned_to="zora", goal="x")
        assert caught.value.code == "too_much_work"
        assert "not yet acknowledged 32 work requests" in caught.value.reason
        items = await zora.inbox(wait=1.0, limit=500)
        assert len(_work(items)) == unread
        await zora.ack(items)
        await spock.put_work("c-more", kind="chore", assigned_to="zora", goal="x")
        (fresh,) = _work(await _drain(zora))
    assert fresh.work == "work:c-more"

"""The grounded simulator over a real nats-server: sessions answer from real
transitions, refuse by name, and keep excluded lineages out."""

from __future__ import annotations

from typing import TYPE_CHECKING

import nats
import pytest

import worldline
from tests.support import running, unique_world
from worldline.actors.registry import build
from worldline.actors.simulator import index as transition_index
from worldline.protocols.messages import (
    SIMULATOR_REPLY,
    SimError,
    SimStart,
    SimStarted,
    Transition,
    encode,
)
from worldline.protocols.subjects import rpc

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.nats


ASK = "Where would you like to fly?"
BOOKED = "Booked, anything else?"


def transition(
    n: int, lineage: str, context: str, action: str, observation: str
) -> Transition:
    return Transition(
        id=f"tr-{lineage}-{n}",
        lineage=lineage,
        task="book a flight",
        context=context,
        action=action,
        observation=observation,
        final=observation.startswith("Thanks"),
        pairing="id" if action.startswith("search_flights(") else "turn",
    )


def make_index(tmp_path: Path) -> Path:
    # Contexts are written as a session renders its transcript ("role: text").
    after_ask = f"assistant: {ASK}\nuser: To Lisbon, please."
    transitions = [
        transition(1, "lin-a", "", ASK, "To Lisbon, please."),
        transition(2, "lin-a", after_ask, BOOKED, "Thanks, that's all."),
        transition(1, "lin-b", "", ASK, "Madrid."),
        transition(2, "lin-b", "", 'search_flights({"to": "MAD"})', '["IB3170"]'),
    ]
    built = transition_index.build(transitions, held_out=0.0)
    out = tmp_path / "index"
    transition_index.save(built, out)
    return out


async def test_a_session_answers_from_real_transitions(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("sim")
    simulator = build("simulator", sim_index=make_index(tmp_path))
    async with (
        running([simulator], url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="eval") as w,
    ):
        started = await w.sim_start("book a flight")
        first = await w.sim_step(started.session_id, ASK)
        assert first.message["role"] == "user"
        assert first.message["content"] in ("To Lisbon, please.", "Madrid.")
        assert first.grounding
        assert not first.terminal
        last = await w.sim_step(started.session_id, BOOKED)
        assert last.message["content"] == "Thanks, that's all."
        assert last.terminal  # and the session is gone
        with pytest.raises(worldline.SimulationError) as gone:
            await w.sim_step(started.session_id, "Hello?")
        assert gone.value.name == "unknown_session"
        # A tool call gets the real tool result, keyed by its id; a malformed one
        # is refused before retrieval, by name.
        other = await w.sim_start("book a flight")
        call = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "search_flights",
                        "arguments": '{"to": "LIS"}',
                    },
                }
            ],
        }
        result = await w.sim_step(other.session_id, call)
        assert result.messages == [
            {"role": "tool", "tool_call_id": "call_1", "content": '["IB3170"]'}
        ]
        assert result.grounding == ["tr-lin-b-2"]
        bad = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]}
        with pytest.raises(worldline.SimulationError) as tool:
            await w.sim_step(other.session_id, bad)
        assert tool.value.name == "bad_tool_call"
        # A message larger than the bus carries is a named error, not nats-py's.
        with pytest.raises(worldline.BadRequest, match="max_payload") as big:
            await w.sim_step(other.session_id, "x" * (2 * 1024 * 1024))
        assert "bytes" in str(big.value)
        await w.sim_end(other.session_id)
        # An excluded lineage is never what answers.
        kept = await w.sim_start("book a flight", exclude_lineages=["lin-a"])
        answer = await w.sim_step(kept.session_id, ASK)
        assert answer.message["content"] == "Madrid."
        assert all("lin-a" not in t for t in answer.grounding)
        await w.sim_end(kept.session_id)
        with pytest.raises(worldline.SimulationError):
            await w.sim_end(kept.session_id)


async def test_a_call_to_a_tool_the_index_does_not_hold_is_never_a_confident_answer(
    nats_url: str, tmp_path: Path
) -> None:
    """Issue 26.4: ``book_hotel`` returned ``search_flights``' result, unflagged."""
    world = unique_world("simfloor")
    simulator = build("simulator", sim_index=make_index(tmp_path))
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_h",
                "type": "function",
                "function": {"name": "book_hotel", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    async with (
        running([simulator], url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="eval") as w,
    ):
        started = await w.sim_start("book a flight")
        with pytest.raises(worldline.SimulationError) as refused:
            await w.sim_step(started.session_id, call)
        guess = await w.sim_step(started.session_id, call, best_guess=True)
        after = await w.sim_step(started.session_id, ASK)  # the refusal changed nothing
        await w.sim_end(started.session_id)
    assert refused.value.name == "no_grounding"
    assert "book_hotel" in refused.value.message
    assert refused.value.similarity is not None
    assert refused.value.similarity <= 0.5
    assert not guess.grounded
    assert guess.note.startswith("call_h: no grounding:")
    assert guess.similarity is not None
    assert guess.similarity <= 0.5
    assert guess.messages == [
        {"role": "tool", "tool_call_id": "call_h", "content": '["IB3170"]'}
    ]
    assert after.grounded
    assert after.similarity is not None
    assert after.similarity > 0.5


async def test_without_an_index_sessions_are_refused_by_name(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("noindex")
    async with (
        running([build("simulator")], url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="eval") as w,
    ):
        with pytest.raises(worldline.SimulationError) as caught:
            await w.sim_start("anything")
    assert caught.value.name == "no_index"


async def test_an_exclusion_the_index_does_not_hold_is_refused_at_start(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("exclude")
    simulator = build("simulator", sim_index=make_index(tmp_path))
    async with (
        running([simulator], url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="eval") as w,
    ):
        with pytest.raises(worldline.SimulationError) as caught:
            await w.sim_start("book a flight", exclude_lineages=["lin-nope"])
        kept = await w.sim_start("book a flight", exclude_lineages=["lin-a"])
        reply = await w.sim_step(kept.session_id, ASK)
        assert reply.message["content"] == "Madrid."  # lin-a's answer is out
    assert caught.value.name == "unknown_lineage"
    assert "lin-nope" in str(caught.value)


async def test_one_agent_cannot_take_every_session(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("quota")
    simulator = build("simulator", sim_index=make_index(tmp_path))
    async with (
        running([simulator], url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="greedy") as greedy,
        worldline.connect(nats_url, world=world, agent="other") as other,
    ):
        first = await greedy.sim_start("book a flight")
        opened = [first.session_id]
        while len(opened) < first.per_client:
            started = await greedy.sim_start("book a flight")
            opened.append(started.session_id)
        with pytest.raises(worldline.SimulationError) as full:
            await greedy.sim_start("book a flight")
        assert full.value.name == "session_quota"
        assert len(opened) == first.per_client
        assert "'greedy'" in full.value.message
        # Another agent still gets one; ending one of greedy's frees a slot.
        await other.sim_start("book a flight")
        await greedy.sim_end(opened.pop())
        await greedy.sim_start("book a flight")


async def test_on_the_open_bus_the_quota_counts_the_claimed_agent_not_the_reply(
    nats_url: str, tmp_path: Path
) -> None:
    """Without credentials nothing is attested: the quota counts the agent a start
    claims (docs/simulator.md), never the reply subject, which any requester sets as
    it likes; the global bound holds whatever is claimed."""
    world = unique_world("open")
    simulator = build("simulator", sim_index=make_index(tmp_path))
    async with running([simulator], url=nats_url, data=tmp_path):
        raw = await nats.connect(nats_url)
        try:

            async def start(agent: str, n: int) -> str:
                # A reply subject of its own each time: it must not split a quota.
                inbox = f"_INBOX.spoof{n}"
                sub = await raw.subscribe(f"{inbox}.x", max_msgs=1)
                body = encode(SimStart(task="book a flight", agent=agent))
                await raw.publish(rpc(world, "sim.start"), body, reply=f"{inbox}.x")
                msg = await sub.next_msg(timeout=5)
                reply = SIMULATOR_REPLY.decode(msg.data)
                if isinstance(reply, SimError):
                    return reply.name
                assert isinstance(reply, SimStarted)
                return "started"

            greedy = [await start("greedy", n) for n in range(20)]
            many = [await start(f"name{n}", 100 + n) for n in range(300)]
        finally:
            await raw.close()
    assert greedy == ["started"] * 16 + ["session_quota"] * 4
    # Claimed names are only claims: they reach the global bound, never beyond it.
    assert many.count("started") == 256 - 16
    assert set(many[240:]) == {"too_many_sessions"}

"""Hooks for agent loops: read the worldview at the start of a turn, report the turn's
output at its end, and learn what the world made of it.

``async with world.turn(query) as turn:`` calls ``before(query)``; the body reads
``turn.worldview.prompt``, runs the model and sets ``turn.output``; on a clean exit the
output goes to ``after`` and ``turn.extracted`` says which claims, risks and gaps were
read from it, once every one of them is applied (readable by the whole crew).

A turn that raises reports **nothing**: a half-finished or failed turn's text is not
evidence, and the exception propagates unchanged. A turn that leaves ``turn.output``
unset (a turn that only called tools, say) reports nothing either.

:func:`agent_step` is the decorator form, for ``async def step(query, worldview) ->
str``; the blocking SDK (:mod:`worldline.sync`) has the same three forms.
"""

from __future__ import annotations

import functools
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio

from worldline.protocols.errors import InvalidInput
from worldline.protocols.messages import Observe, Statement
from worldline.protocols.subjects import obs
from worldline.sdk.beliefs import _sniff
from worldline.sdk.crew import utc_now
from worldline.sdk.errors import BadRequest
from worldline.sdk.turns import Extracted, ExtractedStatement, Role, Turn

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from datetime import datetime

    from worldline.protocols.worldview import Worldview
    from worldline.sdk.client import World

__all__ = [
    "Extracted",
    "ExtractedStatement",
    "Turn",
    "agent_step",
    "observed",
    "reported",
    "turn",
]


def _preview(
    world: World, obs_id: str, text: str, source: str, role: Role
) -> list[ExtractedStatement]:
    """Run the extractor's pure core on the artifact, as the extractor will: its ids
    derive from the world, the agent, the observation id and the text only.

    The core loads at the first turn that reports, not with ``import worldline``
    (it is pure: no LMDB, no metrics, no numpy)."""
    from worldline.actors.extractor.core import handle as extract
    from worldline.actors.runtime.memory import MemoryState
    from worldline.actors.runtime.spec import Context

    observation = Observe(
        obs_id=obs_id,
        author=world.agent,
        at=utc_now(),
        source=source,
        text=text,
        role=role,
        media_type=_sniff(text),
    )
    ctx = Context(
        world=world.world,
        author=world.agent,
        subject=obs(world.world, world.agent),
        seq=0,
        now=observation.at,
    )
    try:
        step = extract(MemoryState(), observation, ctx)
    except InvalidInput as exc:
        raise BadRequest(str(exc)) from exc
    found = []
    for out in step.out:
        op = out.message
        assert isinstance(op, Statement)
        found.append(
            ExtractedStatement(
                belief_id=op.belief_id,
                evidence_id=op.evidence.id,
                type=op.type,
                direction=op.evidence.direction,
                text=op.text,
            )
        )
    return found


async def observed(
    world: World,
    text: str,
    *,
    source: str = "",
    role: Role = "artifact",
    wait: float | None = None,
    context: str = "",
    observed_at: datetime | None = None,
) -> Extracted:
    """Hand ``text`` to the extractor and wait until what it reads is applied.

    Args:
        world: a connected :class:`~worldline.sdk.client.World`.
        text: the artifact.
        source: where it came from.
        role: ``artifact`` (a document), ``output`` (an agent's own), ``tool``.
        wait: seconds to wait for every statement to be readable (default: the
            world's request timeout); 0 returns at once with ``applied=False``.
        context: what came just before it (the previous turn), which retrieval
            reads beside its statements (:meth:`World.observe`).
        observed_at: when the artifact says it happened (:meth:`World.observe`).

    Returns:
        The statements the extractor reads in it, and whether all are applied.

    Raises:
        BadRequest: the extractor would refuse the artifact (a JSON artifact of the
            wrong shape, too many statements); nothing is published.
        BusUnavailable: JetStream did not accept the observation.
    """
    # Refuse before publishing what the extractor would only dead-letter.
    _preview(world, "obs-preview", text, source, role)
    obs_id = await world.observe(
        text, source=source, role=role, context=context, observed_at=observed_at
    )
    statements = _preview(world, obs_id, text, source, role)
    pending = {s.evidence_id: s.belief_id for s in statements}
    limit = world.timeout if wait is None else wait
    with anyio.move_on_after(limit):
        while pending:
            for belief_id in dict.fromkeys(pending.values()):
                try:
                    reply = await world.trace(belief_id)
                except BadRequest:  # fusion has not created it yet
                    continue
                for step in reply.steps:
                    pending.pop(step.evidence.id, None)
            if pending:
                await anyio.sleep(0.02)
    return Extracted(obs_id=obs_id, statements=statements, applied=not pending)


async def reported(
    world: World, output: str, *, wait: float | None = None
) -> Extracted:
    """``after(output)``, then wait until what the extractor reads is applied
    (see :func:`observed`)."""
    return await observed(
        world, output, source=f"agent:{world.agent}", role="output", wait=wait
    )


@asynccontextmanager
async def turn(
    world: World,
    query: str,
    *,
    at: datetime | None = None,
    wait: float | None = None,
) -> AsyncIterator[Turn]:
    """``before(query)`` on entry; ``after(turn.output)`` on a clean exit.

    If the body raises, nothing is reported and the exception propagates; if it
    leaves ``turn.output`` unset, nothing is reported either.
    """
    current = Turn(query=query, worldview=await world.before(query, at=at))
    yield current
    if current.output is not None:
        current.extracted = await reported(world, current.output, wait=wait)


def agent_step(
    world: World, *, wait: float | None = None
) -> Callable[
    [Callable[[str, Worldview], Awaitable[str]]], Callable[[str], Awaitable[str]]
]:
    """Decorate ``async def step(query, worldview) -> str`` into the agent function
    ``async def step(query) -> str``: the worldview is read before each call and the
    returned text reported (and applied) after it; if the step raises, nothing is
    reported and the exception propagates."""

    def decorate(
        step: Callable[[str, Worldview], Awaitable[str]],
    ) -> Callable[[str], Awaitable[str]]:
        @functools.wraps(step)
        async def run(query: str) -> str:
            async with turn(world, query, wait=wait) as current:
                output = await step(query, current.worldview)
                current.output = output
            return output

        return run

    return decorate

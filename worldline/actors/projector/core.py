"""Projector core: a read replica of the world, and the answers served from it.

Dispatches the change feed to the belief replica
(:mod:`worldline.actors.projector.beliefs`) and the crew replica
(:mod:`worldline.actors.projector.views`), and answers ``get``, ``list``, ``read``,
``trace``, ``view``, ``before`` and ``search``. It selects and orders; it computes
no new math.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldline.actors.projector import (
    beliefs,
    calibration,
    contradictions,
    decision,
    history,
    pages,
    provenance,
    search,
    views,
)
from worldline.actors.runtime.spec import Step
from worldline.protocols.messages import (
    Before,
    BeliefChanged,
    BeliefEdgeChanged,
    ContradictionResolved,
    GetBelief,
    GetCalibration,
    GetView,
    ListBeliefs,
    ListContradictions,
    ProjectorInbox,
    ProjectorRpc,
    ReadWorld,
    SearchBeliefs,
    TraceBelief,
    ViewReply,
)

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Context, Reader
    from worldline.protocols.messages import Message

__all__ = ["finish", "handle", "newest_only", "serve"]


def handle(reader: Reader, change: ProjectorInbox, ctx: Context) -> Step:
    """Keep the change in the replica; crew changes also refresh agents' views."""
    match change:
        case BeliefChanged():
            writes = beliefs.apply_belief(reader, change, ctx)
            if writes:  # a resolution true or false joins the calibration record
                writes.update(calibration.record_writes(reader, ctx.world, change))
        case BeliefEdgeChanged():
            writes = beliefs.apply_edge(reader, change, ctx)
        case ContradictionResolved():
            writes = contradictions.apply_resolution(reader, change, ctx.world)
        case _:
            return views.apply_change(reader, change, ctx)
    if not writes:
        return Step()
    return views.refresh_all(reader, writes, ctx)


def finish(reader: Reader, ctx: Context) -> Step:
    """Once per batch and world: rebuild the views the batch made stale (put off
    during a backlog, :func:`views.refresh_stale`), and refit the recalibration
    when the batch changed the calibration record (:func:`calibration.refit`)."""
    stale = views.refresh_stale(reader, ctx)
    fit = calibration.refit(reader, ctx)
    if not fit.writes:
        return stale
    return Step(
        writes={**stale.writes, **fit.writes}, out=stale.out, deferred=stale.deferred
    )


def newest_only(
    change: ProjectorInbox,
) -> tuple[str, str, tuple[tuple[str, float], ...]] | None:
    """What a change makes obsolete, when several come in one batch: a belief's
    change carries its whole newest state, and the feed brings a belief's versions
    in order, so of several changes to one belief in a batch only the last needs
    applying. That also spares rebuilding every agent's view per change when a
    batch restates one belief many times.

    The key holds the belief's label and trust, so a change that moves either is
    never coalesced into a later one (``history.py`` keeps when they moved, for
    ``as_of`` reads; a coalesced change's time and version are read from the item
    it recorded). Applied one by one: edges and crew changes, a belief change
    whose evidence is split or that closes the belief (each may open or dissolve a
    contradiction, docs/belief-math.md, "Contradictions"), and a change no item of
    the belief's own evidence caused (a trust setting, an assessment), but a rival
    answer's re-reading with no trust on it (its rivals' items date it)."""
    if isinstance(change, BeliefChanged):
        belief = change.belief
        if "contradicted" in belief.flags or belief.status != "active":
            return None
        if (change.trust or not belief.slot) and not history.own(
            change, change.evidence
        ):
            return None
        trust = tuple(change.trust.items()) if change.trust else ()
        return belief.id, belief.label, trust
    return None


def serve(reader: Reader, request: ProjectorRpc, world: str) -> Message:
    """Answer a request from the replica."""
    match request:
        case GetBelief(belief_id=belief_id, at=at, as_of=as_of):
            return beliefs.get(reader, world, belief_id, at, as_of)
        case ListContradictions():
            return contradictions.listing(reader, world, request)
        case GetCalibration():
            return calibration.reply(reader, world, request)
        case ListBeliefs():
            return pages.list_beliefs(reader, world, request)
        case TraceBelief(belief_id=belief_id, as_of=as_of):
            return provenance.trace(reader, world, belief_id, as_of)
        case ReadWorld():
            # Paged and bounded in bytes (see worldline.actors.projector.pages).
            return pages.read_world(reader, world, request)
        case Before():
            # The decision scene in fewer reads, the same bytes (tests/core/
            # test_decision.py compares it with beliefs.decision_scene).
            return decision.before(reader, request, world)
        case SearchBeliefs():
            return search.search(reader, world, request)
        case GetView(agent=agent):
            return ViewReply(
                view=views.build_view(reader, world, agent),
                version=views.replica_version(reader, world),
            )

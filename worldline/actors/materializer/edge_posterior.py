"""Edge posteriors: fusion's :class:`EdgePosterior` for a belief edge with evidence of
its own, shown on the edge the materializer holds.

The edge as the last ``LinkBeliefs`` stated it stays under ``bedge/<w>/<id>``
(:mod:`worldline.actors.materializer.edges`); the newest posterior (by its
``cause_seq``) is kept beside it under ``bedgepost/<w>/<id>``. Every change of
either publishes the two merged (:func:`merged`): ``confidence`` becomes the posterior,
``stated`` the strength stated, with the evidence count, weight, uncertainty, flags,
the evidence and the trust. Each key depends only on the inputs it was written from,
so the state is the same whatever order the op and the posterior arrive in; the
change feed orders the merged edges by (``version``, ``posterior_seq``), which only
grows. Between a re-weighing ``LinkBeliefs`` and fusion's posterior for it, the edge
shows the new ``stated`` beside the posterior of the old prior, for one hop.

A posterior for an edge the materializer does not hold (its ``LinkBeliefs`` not
applied yet, or refused: fusion cannot see whether both ends exist) is kept and shown
once the edge is linked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.materializer.keys import belief_edge_key
from worldline.actors.runtime.errors import InvalidInput
from worldline.actors.runtime.spec import Outgoing, Step
from worldline.protocols.beliefs import BeliefEdge
from worldline.protocols.messages import BeliefEdgeChanged, EdgePosterior, encode
from worldline.protocols.subjects import state

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Context, Reader

__all__ = ["apply_posterior", "changed", "edge_posterior_key", "merged", "stored"]

_POSTERIOR: Final = msgspec.msgpack.Decoder(EdgePosterior)
_EDGE: Final = msgspec.msgpack.Decoder(BeliefEdge)


def edge_posterior_key(world: str, edge_id: str) -> bytes:
    return f"bedgepost/{world}/{edge_id}".encode()


def stored(reader: Reader, world: str, edge_id: str) -> EdgePosterior | None:
    """The newest posterior held for the edge, if any."""
    raw = reader.get(edge_posterior_key(world, edge_id))
    return None if raw is None else _POSTERIOR.decode(raw)


def merged(edge: BeliefEdge, posterior: EdgePosterior | None) -> BeliefEdgeChanged:
    """The change the feed carries for ``edge`` (as stated) with ``posterior``."""
    if posterior is None:
        return BeliefEdgeChanged(edge=edge)
    fused = posterior.edge
    shown = msgspec.structs.replace(
        edge,
        confidence=fused.confidence,
        stated=edge.confidence,
        evidence_count=fused.evidence_count,
        evidence_weight=fused.evidence_weight,
        uncertainty=fused.uncertainty,
        flags=fused.flags,
        posterior_seq=posterior.cause_seq,
    )
    return BeliefEdgeChanged(
        edge=shown, evidence=posterior.evidence, trust=posterior.trust
    )


def changed(world: str, change: BeliefEdgeChanged) -> Outgoing:
    """``change`` on the change feed; its id names the posterior too, so the merged
    edge of a new posterior is not taken for a repeat of the link's."""
    edge = change.edge
    suffix = f":p{edge.posterior_seq}" if edge.posterior_seq else ""
    return Outgoing(
        state(world, "belief_edge"),
        change,
        f"state:{world}:belief_edge:{edge.id}:{edge.version}{suffix}",
    )


def apply_posterior(reader: Reader, update: EdgePosterior, ctx: Context) -> Step:
    """Keep the newest posterior of the edge and publish the edge with it; an older
    one, or a repeat, is suppressed.

    Raises:
        InvalidInput: ``cause_seq`` is below 1 or beyond the op log's end
            (``ctx.batch_prepared``, when known): no op caused it, so fusion did not
            publish it.
    """
    seq = update.cause_seq
    ops_end = ctx.batch_prepared
    if seq < 1 or (isinstance(ops_end, int) and seq > ops_end):
        raise InvalidInput(
            f"posterior for belief edge {update.edge.id!r} in world {ctx.world!r} "
            f"has cause_seq {seq}, which no op of the log (sequences 1 to "
            f"{ops_end if isinstance(ops_end, int) else 'its end'}) has: only fusion "
            "publishes edge posteriors; record an op (`worldline evidence --edge`) "
            "instead"
        )
    held = stored(reader, ctx.world, update.edge.id)
    if held is not None and held.cause_seq >= seq:
        return Step()
    writes: dict[bytes, bytes | None] = {
        edge_posterior_key(ctx.world, update.edge.id): encode(update)
    }
    raw = reader.get(belief_edge_key(ctx.world, update.edge.id))
    if raw is None:
        return Step(writes=writes)  # shown once the edge is linked
    change = merged(_EDGE.decode(raw), update)
    return Step(writes=writes, out=[changed(ctx.world, change)])

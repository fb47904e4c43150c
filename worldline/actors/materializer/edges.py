"""Edges: typed links between entities (``AddEdge``, ``RemoveEdge``; an agent writes
edges from itself, or holds a grant on ``edge.<type>``) and links between beliefs
(``LinkBeliefs``, checked against the beliefs the op log has created, needing no
declared world). Removing an entity edge deletes it; a removed belief edge stays,
tombstoned, so it can still be traced. A belief edge with evidence of its own is
published with fusion's posterior for it
(:mod:`worldline.actors.materializer.edge_posterior`).

State keys: ``edge/<w>/<id>`` -> ``Edge``, ``bedge/<w>/<id>`` -> ``BeliefEdge``.
Outputs: ``EdgeChanged`` and ``BeliefEdgeChanged`` on the change feed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from worldline.actors.materializer import edge_posterior
from worldline.actors.materializer.authority import authorize_edge
from worldline.actors.materializer.keys import belief_edge_key, edge_key, known_key
from worldline.actors.materializer.reject import Reject
from worldline.actors.materializer.tx import require
from worldline.actors.runtime.spec import Outgoing
from worldline.protocols.messages import EdgeChanged, encode
from worldline.protocols.subjects import state
from worldline.protocols.world import Edge

if TYPE_CHECKING:
    from worldline.actors.materializer.tx import Tx
    from worldline.protocols.messages import AddEdge, LinkBeliefs, RemoveEdge
    from worldline.protocols.world import WorldDecl

__all__ = ["add_edge", "link_beliefs", "remove_edge", "save_edge"]

_EDGE = msgspec.msgpack.Decoder(Edge)


def save_edge(tx: Tx, edge: Edge, author: str, *, removed: bool = False) -> None:
    seq = tx.ctx.seq
    edge = msgspec.structs.replace(edge, version=seq, author=author)
    tx.put(edge_key(tx.world, edge.id), None if removed else encode(edge))
    tx.out.append(
        Outgoing(
            state(tx.world, "edge"),
            EdgeChanged(edge=edge, removed=removed),
            f"state:{tx.world}:edge:{edge.id}:{seq}",
        )
    )


def add_edge(tx: Tx, decl: WorldDecl, op: AddEdge) -> None:
    for end in (op.edge.source, op.edge.target):
        require(tx, end)
    authorize_edge(decl, op.author, op.edge)
    raw = tx.get(edge_key(tx.world, op.edge.id))
    if raw is not None:
        # Rewriting an edge needs authority over the edge it replaces too.
        authorize_edge(decl, op.author, _EDGE.decode(raw))
    save_edge(tx, op.edge, op.author)


def remove_edge(tx: Tx, decl: WorldDecl, op: RemoveEdge) -> None:
    raw = tx.get(edge_key(tx.world, op.edge_id))
    if raw is None:
        raise Reject("unknown_entity", f"no edge {op.edge_id} in world {tx.world!r}")
    edge = _EDGE.decode(raw)
    authorize_edge(decl, op.author, edge)
    save_edge(tx, edge, op.author, removed=True)


def link_beliefs(tx: Tx, op: LinkBeliefs) -> None:
    edge = op.edge
    if edge.source == edge.target:
        raise Reject("invalid", f"edge {edge.id} links belief {edge.source} to itself")
    for end in (edge.source, edge.target):
        if tx.get(known_key(tx.world, end)) is None:
            raise Reject(
                "unknown_entity",
                f"no belief {end} in world {tx.world!r} (edge {edge.id}); add it first",
            )
    key = belief_edge_key(tx.world, edge.id)
    raw = tx.get(key)
    if raw is None and edge.removed:
        raise Reject("unknown_entity", f"no belief edge {edge.id} to remove")
    seq = tx.ctx.seq
    edge = msgspec.structs.replace(edge, version=seq, author=op.author, at=op.at)
    tx.put(key, encode(edge))  # removed edges stay, tombstoned: still traceable
    posterior = edge_posterior.stored(tx, tx.world, edge.id)
    tx.out.append(
        edge_posterior.changed(tx.world, edge_posterior.merged(edge, posterior))
    )

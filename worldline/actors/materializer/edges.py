"""Edges: typed links between entities (``AddEdge``, ``RemoveEdge``; an agent writes
edges from itself, or holds a grant on ``edge.<type>``) and links between beliefs
(``LinkBeliefs``, checked against the beliefs the op log has created, needing no
declared world). Anyone may link a new belief edge; only its author (who first
linked the id), the operator, the admins and ``[trust] close`` may re-state or remove
it (``charter.edge_refusal``; the materializer decides, fusion records only what the
same rule allows). Removing an entity edge deletes it; a removed belief edge stays,
tombstoned, so it can still be traced. A belief edge with evidence of its own is
published with fusion's posterior for it
(:mod:`worldline.actors.materializer.edge_posterior`).

State keys: ``edge/<w>/<id>`` -> ``Edge``, ``bedge/<w>/<id>`` -> ``BeliefEdge``,
``bedgeby/<w>/<id>`` -> who first linked it.
Outputs: ``EdgeChanged`` and ``BeliefEdgeChanged`` on the change feed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from worldline.actors.belief_model import charter
from worldline.actors.materializer import edge_posterior
from worldline.actors.materializer.authority import authorize_edge
from worldline.actors.materializer.keys import (
    belief_edge_author_key,
    belief_edge_key,
    edge_key,
    known_key,
)
from worldline.actors.materializer.reject import Reject
from worldline.actors.materializer.tx import require
from worldline.actors.runtime.spec import Outgoing
from worldline.protocols.beliefs import BeliefEdge
from worldline.protocols.messages import EdgeChanged, encode
from worldline.protocols.subjects import state
from worldline.protocols.world import Edge

if TYPE_CHECKING:
    from worldline.actors.materializer.tx import Tx
    from worldline.protocols.messages import AddEdge, LinkBeliefs, RemoveEdge
    from worldline.protocols.world import WorldDecl

__all__ = ["add_edge", "link_beliefs", "remove_edge", "save_edge"]

_EDGE = msgspec.msgpack.Decoder(Edge)
_BEDGE = msgspec.msgpack.Decoder(BeliefEdge)


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


def link_beliefs(tx: Tx, op: LinkBeliefs, decl: WorldDecl | None) -> None:
    """Link a new belief edge (anyone may), or re-state one already linked: that
    needs authority over it (:func:`charter.edge_refusal` by ``decl``, the declaration
    in force if any: its author, who first linked the id, the operator, the admins,
    ``[trust] close``), else ``unauthorized`` and nothing changes. The first link of
    an id claims it even when it is refused for an unknown end: fusion, which cannot
    see the ends, records it, and both actors must agree on who linked each id
    first."""
    edge = op.edge
    if edge.source == edge.target:
        raise Reject("invalid", f"edge {edge.id} links belief {edge.source} to itself")
    key = belief_edge_key(tx.world, edge.id)
    raw = tx.get(key)
    owner = _owner(tx, edge.id, raw)
    claim: dict[bytes, bytes | None] = {}
    if owner is None:
        if edge.removed:
            raise Reject("unknown_entity", f"no belief edge {edge.id} to remove")
        claim[belief_edge_author_key(tx.world, edge.id)] = op.author.encode()
    else:
        refusal = charter.edge_refusal(decl, op.author, owner, edge_id=edge.id)
        if refusal is not None:
            raise Reject("unauthorized", refusal)
    for end in (edge.source, edge.target):
        if tx.get(known_key(tx.world, end)) is None:
            raise Reject(
                "unknown_entity",
                f"no belief {end} in world {tx.world!r} (edge {edge.id}); add it first",
                keep=claim,
            )
    if raw is None and edge.removed:
        raise Reject("unknown_entity", f"no belief edge {edge.id} to remove")
    tx.writes.update(claim)
    seq = tx.ctx.seq
    edge = msgspec.structs.replace(edge, version=seq, author=op.author, at=op.at)
    tx.put(key, encode(edge))  # removed edges stay, tombstoned: still traceable
    posterior = edge_posterior.stored(tx, tx.world, edge.id)
    tx.out.append(
        edge_posterior.changed(tx.world, edge_posterior.merged(edge, posterior))
    )


def _owner(tx: Tx, edge_id: str, raw: bytes | None) -> str | None:
    """Who linked ``edge_id`` first (None: nobody yet). A store written before
    first linkers were kept falls back to the edge's last author, as fusion does."""
    claimed = tx.get(belief_edge_author_key(tx.world, edge_id))
    if claimed is not None:
        return claimed.decode()
    return None if raw is None else _BEDGE.decode(raw).author

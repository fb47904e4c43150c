"""The world's declaration: the ``DeclareWorld`` op (:func:`declare`), seeding its
entities and edges, and :func:`load_decl`, which every other op reads first. Which
declarations are accepted (no world squatting: the operator on a secured bus, else an
admin the declaration names; re-declaring needs a current admin; a valid declaration:
its world, no reserved agent names, declared entity types, edges between its
entities, rule goal templates, value sizes) is
:func:`worldline.actors.belief_model.charter.accept`, the rule fusion applies too.

State keys: ``decl/<w>`` -> ``WorldDecl``. Output: ``WorldDeclared`` on the change
feed, then the seeded entities and edges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from worldline.actors.belief_model import charter
from worldline.actors.belief_model.charter import declared_types, encode_value
from worldline.actors.materializer.edges import save_edge
from worldline.actors.materializer.keys import decl_key, edge_key
from worldline.actors.materializer.reject import Reject
from worldline.actors.runtime.spec import Outgoing
from worldline.protocols.messages import WorldDeclared, encode
from worldline.protocols.subjects import state
from worldline.protocols.world import (
    Edge,
    Entity,
    FieldState,
    WorldDecl,
    entity_type,
)

if TYPE_CHECKING:
    from worldline.actors.materializer.tx import Tx
    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.messages import DeclareWorld
    from worldline.protocols.world import Value

__all__ = [
    "check_value_sizes",
    "declare",
    "declared_types",
    "encode_value",
    "load_decl",
]


def load_decl(reader: Reader, world: str) -> WorldDecl | None:
    # Every op reads the declaration; decoding it dominated the apply cost, so it is
    # decoded once per exact bytes (charter.charter_of, the cache fusion reads too).
    raw = reader.get(decl_key(world))
    return None if raw is None else charter.charter_of(raw).decl


def check_value_sizes(ref: str, fields: dict[str, Value]) -> None:
    """:func:`charter.check_value_sizes`, refusing with a :class:`Reject`."""
    try:
        charter.check_value_sizes(ref, fields)
    except charter.Refused as exc:
        raise Reject("invalid", exc.reason) from exc


def declare(tx: Tx, op: DeclareWorld, *, secured: bool) -> None:
    decl = op.declaration
    try:
        # The one acceptance rule, which fusion applies too (belief_model.charter).
        charter.accept(
            load_decl(tx, tx.world), decl, tx.world, op.author, secured=secured
        )
    except charter.Refused as exc:
        if exc.code == "unauthorized":
            raise Reject("unauthorized", exc.reason) from exc
        raise Reject("invalid", exc.reason) from exc
    tx.put(decl_key(tx.world), encode(decl))
    seq = tx.ctx.seq
    tx.out.append(
        Outgoing(
            state(tx.world, "declared"),
            WorldDeclared(declaration=decl, version=seq),
            f"state:{tx.world}:declared:{seq}",
        )
    )
    # Seeds fill what is missing; they never overwrite values agents have written.
    for seed in decl.entities:
        entity = tx.entity(seed.id) or Entity(id=seed.id, type=entity_type(seed.id))
        fields = dict(entity.fields)
        for name, value in seed.fields.items():
            fields.setdefault(
                name, FieldState(value=value, version=seq, author=op.author, at=op.at)
            )
        if fields != entity.fields or entity.version == 0:
            tx.save(msgspec.structs.replace(entity, fields=fields, version=seq))
    for seed_edge in decl.edges:
        if tx.get(edge_key(tx.world, seed_edge.id)) is None:
            save_edge(
                tx,
                Edge(
                    id=seed_edge.id,
                    type=seed_edge.type,
                    source=seed_edge.source,
                    target=seed_edge.target,
                ),
                op.author,
            )

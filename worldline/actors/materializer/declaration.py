"""The world's declaration: the ``DeclareWorld`` op (:func:`declare`), who may
declare a world first (no world squatting: the operator on a secured bus, else an
admin the declaration names; re-declaring needs a current admin), what a valid
declaration is (its world, no reserved agent names,
declared entity types, edges between its entities, rule goal templates, value
sizes), seeding its entities and edges, and :func:`load_decl`, which every other op
reads first.

State keys: ``decl/<w>`` -> ``WorldDecl``. Output: ``WorldDeclared`` on the change
feed, then the seeded entities and edges.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import msgspec

from worldline.actors.materializer.edges import save_edge
from worldline.actors.materializer.keys import decl_key, edge_key
from worldline.actors.materializer.propagation import fill_goal
from worldline.actors.materializer.reject import Reject
from worldline.actors.runtime.spec import Outgoing
from worldline.protocols.messages import WorldDeclared, encode
from worldline.protocols.subjects import state
from worldline.protocols.world import (
    AGENT,
    MAX_VALUE_BYTES,
    OPERATOR,
    RESERVED_AGENTS,
    WORK,
    Edge,
    Entity,
    FieldState,
    WorldDecl,
    agents_named,
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

_DECL = msgspec.msgpack.Decoder(WorldDecl)


def load_decl(reader: Reader, world: str) -> WorldDecl | None:
    raw = reader.get(decl_key(world))
    return None if raw is None else _decode_decl(raw)


@functools.lru_cache(maxsize=64)
def _decode_decl(raw: bytes) -> WorldDecl:
    # Every op reads the declaration; decoding it dominated the apply cost. The
    # decoded struct is frozen and keyed by its exact bytes, so caching is safe.
    return _DECL.decode(raw)


def declared_types(decl: WorldDecl) -> set[str]:
    return {*decl.environment.entity_types, AGENT, WORK}


def _check_declaration(decl: WorldDecl, world: str) -> None:
    if decl.world.id != world:
        raise Reject(
            "invalid",
            f"declaration is for world {decl.world.id!r}, not {world!r}; "
            "load it with --world matching [world] id",
        )
    reserved = sorted(agents_named(decl) & RESERVED_AGENTS)
    if reserved:
        raise Reject(
            "invalid",
            f"agent name(s) {', '.join(reserved)} are reserved for worldline's "
            f"actors and operator ({', '.join(sorted(RESERVED_AGENTS))}); rename "
            "those agents in the declaration",
        )
    types = declared_types(decl)
    refs = {e.id for e in decl.entities}
    for seed in decl.entities:
        if entity_type(seed.id) not in types:
            raise Reject(
                "invalid",
                f"entity {seed.id}: unknown entity type {entity_type(seed.id)!r}; "
                "declare it in [environment] entity_types "
                f"({', '.join(sorted(types))})",
            )
        check_value_sizes(seed.id, seed.fields)
    for edge in decl.edges:
        for end in (edge.source, edge.target):
            if end not in refs:
                raise Reject(
                    "invalid", f"edge {edge.id}: {end} is not among [[entities]]"
                )
    for rule in decl.rules:
        etype = rule.on.split(".", 1)[0]
        if etype != "*" and etype not in types:
            raise Reject(
                "invalid", f"rule {rule.id}: unknown entity type {etype!r} in on"
            )
        try:
            fill_goal(rule.goal, entity="e", field="f", value="v", agent="a")
        except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
            raise Reject(
                "invalid",
                f"rule {rule.id}: goal template {rule.goal!r} is not valid ({exc!r}); "
                "use only {entity}, {field}, {value} and {agent}",
            ) from exc


def check_value_sizes(ref: str, fields: dict[str, Value]) -> None:
    for name, value in fields.items():
        size = len(encode_value(value))
        if size > MAX_VALUE_BYTES:
            raise Reject(
                "invalid",
                f"{ref}.{name}: value is {size} bytes, over the {MAX_VALUE_BYTES}-byte "
                "limit; store large content as an artifact and reference it",
            )


def encode_value(value: Value) -> bytes:
    return msgspec.msgpack.encode(value)


def _check_first_declarer(
    decl: WorldDecl, world: str, author: str, *, secured: bool
) -> None:
    """Who may declare a world nobody has declared yet (no world squatting)."""
    if secured:
        if author != OPERATOR:
            raise Reject(
                "unauthorized",
                f"world {world!r} is not declared yet and this bus authenticates "
                f"its users: only the {OPERATOR} declares a world first "
                f"(`worldline world load FILE --world {world} --agent {OPERATOR} "
                f"--creds {OPERATOR}.creds`); its admins may re-declare it after",
            )
        return
    admins = decl.authority.admins
    if author not in admins:
        named = ", ".join(admins) if admins else "none"
        raise Reject(
            "unauthorized",
            f"world {world!r} is not declared yet: its first declaration must come "
            f"from an admin it names (admins: {named}), not {author!r}; declare it "
            "as one of them (--agent ADMIN), or add yourself to [authority] admins",
        )


def declare(tx: Tx, op: DeclareWorld, *, secured: bool) -> None:
    current = load_decl(tx, tx.world)
    if current is not None and op.author not in current.authority.admins:
        raise Reject(
            "unauthorized",
            f"only the world's admins ({', '.join(current.authority.admins)}) may "
            "re-declare it",
        )
    decl = op.declaration
    if current is None:
        _check_first_declarer(decl, tx.world, op.author, secured=secured)
    _check_declaration(decl, tx.world)
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

"""Entities and their fields: the ``SetField`` op (one field, optionally at an
expected version, else ``version_conflict`` with the current value) and the
``UpsertEntity`` op (create an entity of a declared type, or write several fields).
Both check authority, value sizes and versions, write through
:func:`worldline.actors.materializer.versions.write_fields` and propagate what changed.

State keys: ``entity/<w>/<ref>`` -> ``Entity``; ``unchanged/<w>/<seq>`` for a
``SetField`` that changed nothing (the version it kept, for ``op_status``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldline.actors.materializer import workload
from worldline.actors.materializer.authority import authorize
from worldline.actors.materializer.core import unchanged_key
from worldline.actors.materializer.declaration import check_value_sizes, declared_types
from worldline.actors.materializer.propagation import propagate
from worldline.actors.materializer.reject import Reject
from worldline.actors.materializer.tx import require
from worldline.actors.materializer.versions import write_fields
from worldline.protocols.world import WORK, Entity, entity_type

if TYPE_CHECKING:
    from worldline.actors.materializer.tx import Tx
    from worldline.protocols.messages import SetField, UpsertEntity
    from worldline.protocols.world import WorldDecl

__all__ = ["set_field", "upsert"]


def set_field(tx: Tx, decl: WorldDecl, op: SetField) -> None:
    entity = require(tx, op.entity)
    authorize(decl, op.author, entity, op.field)
    check_value_sizes(op.entity, {op.field: op.value})
    current = entity.fields.get(op.field)
    version = 0 if current is None else current.version
    if op.expect_version is not None and op.expect_version != version:
        raise Reject(
            "version_conflict",
            f"{op.entity}.{op.field} is at version {version}, not "
            f"{op.expect_version}; re-read it and write again",
            version=version,
            value=None if current is None else current.value,
        )
    if entity.type == WORK:  # the requester's own name, and the cap per pair
        before = workload.current(entity)
        after = {**before, op.field: op.value}
        workload.check(tx, decl, op.author, entity.id, before, after, announces=False)
    changes = write_fields(tx, entity, {op.field: op.value}, op.author, op.at)
    if not changes:
        # Nothing changed, so the field keeps its version: remember which, so the
        # writer is told the truth about the version it can expect next.
        tx.put(unchanged_key(tx.world, tx.ctx.seq), str(version).encode())
    propagate(tx, decl, changes, op.author, op.op_id, op.at)


def upsert(tx: Tx, decl: WorldDecl, op: UpsertEntity) -> None:
    etype = entity_type(op.entity)
    if etype not in declared_types(decl):
        raise Reject(
            "invalid",
            f"unknown entity type {etype!r}; declared types are "
            f"{', '.join(sorted(declared_types(decl)))}",
        )
    entity = tx.entity(op.entity) or Entity(id=op.entity, type=etype)
    if entity.type == WORK:
        raise Reject("invalid", "work requests are written with put_work")
    for name in op.fields or {"*": None}:
        authorize(decl, op.author, entity, name)
    check_value_sizes(op.entity, op.fields)
    changes = write_fields(tx, entity, dict(op.fields), op.author, op.at)
    propagate(tx, decl, changes, op.author, op.op_id, op.at)

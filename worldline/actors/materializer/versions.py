"""Per-field versions: :func:`write_fields` writes the fields whose value changes,
each stamped with the op's OPS sequence as its version, author and ``at``; a write
of the value already held changes nothing (no version, no feed, no propagation). The
changes it returns are what :mod:`worldline.actors.materializer.propagation` acts on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from worldline.actors.materializer import workload
from worldline.protocols.world import WORK, FieldState, Value

if TYPE_CHECKING:
    from datetime import datetime

    from worldline.actors.materializer.tx import Tx
    from worldline.protocols.world import Entity

__all__ = ["Change", "write_fields"]

Change = tuple[str, str, Value, int]  # (entity ref, field, value, depth)


def write_fields(
    tx: Tx, entity: Entity, values: dict[str, Value], author: str, at: datetime
) -> list[Change]:
    """Write the fields whose value changes (no-op writes change nothing)."""
    seq = tx.ctx.seq
    fields = dict(entity.fields)
    changed: list[Change] = []
    for name, value in values.items():
        current = fields.get(name)
        if current is not None and _same(current.value, value):
            continue
        fields[name] = FieldState(value=value, version=seq, author=author, at=at)
        changed.append((entity.id, name, value, 0))
    if changed or entity.version == 0:
        tx.save(msgspec.structs.replace(entity, fields=fields, version=seq))
    if changed and entity.type == WORK:  # who owes whom open work
        workload.index(tx, entity.id, workload.current(entity), _values(fields))
    return changed


def _values(fields: dict[str, FieldState]) -> dict[str, Value]:
    return {name: state.value for name, state in fields.items()}


def _same(a: Value, b: Value) -> bool:
    """Equal value and type: ``True``, ``1`` and ``1.0`` are different writes."""
    return type(a) is type(b) and a == b

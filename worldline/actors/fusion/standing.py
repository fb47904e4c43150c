"""The ``sources`` read: each source's declared trust and learned reliability, as
fusion weighs them (served by fusion from its own store; shard 0 answers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from worldline.actors.fusion import assess
from worldline.actors.fusion.core import decode_trust, trust_prefix
from worldline.protocols.messages import Sources, SourcesReply, SourceStanding

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Reader

__all__ = ["serve"]


def serve(reader: Reader, request: Sources, world: str) -> SourcesReply:
    """Every source with a declared trust or a learned reliability, least weighed
    first (the ones a reader most wants to see), at most ``request.limit``."""
    rows: dict[str, SourceStanding] = {}
    rounds, change = 0, 0.0
    for _, raw in reader.scan(assess.learned_prefix(world)):
        row = assess.decode(raw)
        rounds, change = row.rounds, row.change  # one assessment wrote every row
        rows[row.source] = SourceStanding(
            source=row.source,
            accuracy=row.accuracy,
            independence=row.independence,
            claims=row.claims,
            learned=row.factor,
            weight=row.factor,
        )
    for key, raw in reader.scan(trust_prefix(world)):
        name, setting = decode_trust(world, key, raw)
        held = rows.get(name, SourceStanding(source=name))
        weight = setting.trust * (1.0 if setting.locked else held.learned)
        rows[name] = msgspec.structs.replace(
            held, trust=setting.trust, locked=setting.locked, weight=weight
        )
    chosen = sorted(
        (r for r in rows.values() if not request.source or r.source == request.source),
        key=lambda r: (r.weight, r.source),
    )
    return SourcesReply(
        sources=chosen[: request.limit], total=len(chosen), rounds=rounds, change=change
    )

"""Every actor by name, so the CLI and supervisors can build their specs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from actors.extractor.service import spec as extractor
from actors.fusion.embedding import active as active_embedder
from actors.fusion.service import spec as fusion
from actors.materializer.service import spec as materializer
from actors.projector.service import spec as projector
from actors.simulator.service import spec as simulator

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from actors.runtime.spec import ActorSpec

__all__ = ["ACTORS", "build"]

ACTORS: Final[dict[str, Callable[[], ActorSpec]]] = {
    "extractor": extractor,
    "fusion": fusion,
    "materializer": materializer,
    "projector": projector,
    "simulator": simulator,
}


def build(
    name: str,
    *,
    replica: str = "0",
    shard: str = "0/1",
    sim_index: Path | None = None,
) -> ActorSpec:
    """The spec of actor ``name``; ``replica`` names a projector's own read replica,
    ``shard`` (``I/N``) the belief shard a fusion instance owns, ``sim_index`` the
    transition index a simulator serves sessions from."""
    if name in ("projector", "simulator"):
        # An unknown or uninstalled WORLDLINE_EMBEDDER fails here, at start-up.
        active_embedder()
    if name == "projector":
        return projector(replica)
    if name == "fusion":
        return fusion(shard)
    if name == "simulator":
        return simulator(sim_index)
    try:
        return ACTORS[name]()
    except KeyError:
        raise ValueError(
            f"unknown actor {name!r}: choose one of {', '.join(ACTORS)}"
        ) from None

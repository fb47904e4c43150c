"""Every actor by name, so the CLI and supervisors can build their specs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from worldline.actors.belief_model.embedding import active as active_embedder
from worldline.actors.extractor.service import spec as extractor
from worldline.actors.fusion.service import spec as fusion
from worldline.actors.materializer.service import spec as materializer
from worldline.actors.projector.service import spec as projector
from worldline.actors.simulator.service import spec as simulator

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from worldline.actors.runtime.spec import ActorSpec

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
    replica: str | None = None,
    shard: str = "0/1",
    partition: str = "0/1",
    sim_index: Path | None = None,
) -> ActorSpec:
    """The spec of actor ``name``.

    ``replica`` names a projector's own read replica (default ``0``) or a
    materializer replica (default: none, the single writer); ``shard`` (``I/N``) is
    the belief shard a fusion instance owns, ``partition`` (``I/N``) the worlds a
    materializer writes, ``sim_index`` the transition index a simulator serves
    sessions from."""
    if name in ("projector", "simulator"):
        # An unknown or uninstalled WORLDLINE_EMBEDDER fails here, at start-up.
        active_embedder()
    if name == "projector":
        return projector(replica or "0")
    if name == "materializer":
        return materializer(replica or "", partition)
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

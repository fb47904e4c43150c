"""worldline: one shared, evidence-kept world model for a crew of AI agents.

``async with worldline.connect(world="crew", agent="ada") as world:`` (the bus: the
URL passed first, else ``$WORLDLINE_NATS``, else the one a local ``worldline up``
recorded) then
``await world.add(...)``, ``await world.get(id)``, ``await world.list()``,
``await world.search("query")`` (ranked, with each hit's channel scores and trace).
Agent loops: ``async with world.turn(query) as turn:`` (:mod:`worldline.hooks`).
Scripts without an event loop: ``with worldline.sync.connect(...) as world:``
(:mod:`worldline.sync`). MCP agents: ``worldline mcp`` (:mod:`worldline.mcp.server`).

The package is laid out by audience: :mod:`worldline.sdk` is the agent's SDK (the
names above come from it), :mod:`worldline.ops` the operator's tools (``status``,
``creds``, ``replay``), :mod:`worldline.mcp` the MCP server, and :mod:`worldline.cli`
the ``worldline`` command over all three. Every error the SDK raises is a
:class:`WorldlineError`; ``__version__`` is the installed distribution's version.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worldline import hooks as hooks
    from worldline import sync as sync
    from worldline.protocols.messages import Belief, SearchHit, SearchReply
    from worldline.sdk.batch import AddItem, EvidenceItem, Loaded
    from worldline.sdk.client import World, connect
    from worldline.sdk.errors import (
        BadRequest,
        BusRefused,
        BusUnavailable,
        NotApplied,
        NoWorldline,
        PermissionDenied,
        Rejected,
        ServerError,
        SimulationError,
        WorldlineError,
    )
    from worldline.sdk.sim import MoveForecast, NoSimulator, WorldviewForecasts

    __version__: str

# Each name's module, imported on first use (PEP 562), so ``import worldline`` costs
# almost nothing and a name costs only what it needs; none of them loads the actors'
# runtime, LMDB, metrics or numpy (tests/test_light.py, docs/benchmarks.md).
_HOME = {
    "Belief": "worldline.protocols.messages",
    "SearchHit": "worldline.protocols.messages",
    "SearchReply": "worldline.protocols.messages",
    "AddItem": "worldline.sdk.batch",
    "EvidenceItem": "worldline.sdk.batch",
    "Loaded": "worldline.sdk.batch",
    "World": "worldline.sdk.client",
    "connect": "worldline.sdk.client",
    "MoveForecast": "worldline.sdk.sim",
    "NoSimulator": "worldline.sdk.sim",
    "WorldviewForecasts": "worldline.sdk.sim",
    **dict.fromkeys(
        (
            "BadRequest",
            "BusRefused",
            "BusUnavailable",
            "NotApplied",
            "NoWorldline",
            "PermissionDenied",
            "Rejected",
            "ServerError",
            "SimulationError",
            "WorldlineError",
        ),
        "worldline.sdk.errors",
    ),
}
_SUBMODULES = ("hooks", "sync")  # ``worldline.hooks`` after ``import worldline``


def __getattr__(name: str) -> Any:
    """Load ``worldline.NAME`` on first use and keep it."""
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    elif name == "__version__":
        value = _installed_version()
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *_SUBMODULES, *(n for n in globals() if n[:2] == "__")})


def _installed_version() -> str:
    """The installed distribution's version (pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("worldline")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


__all__ = [
    "AddItem",
    "BadRequest",
    "Belief",
    "BusRefused",
    "BusUnavailable",
    "EvidenceItem",
    "Loaded",
    "MoveForecast",
    "NoSimulator",
    "NoWorldline",
    "NotApplied",
    "PermissionDenied",
    "Rejected",
    "SearchHit",
    "SearchReply",
    "ServerError",
    "SimulationError",
    "World",
    "WorldlineError",
    "WorldviewForecasts",
    "__version__",
    "connect",
]

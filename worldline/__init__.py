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

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from worldline import hooks as hooks  # ``worldline.hooks`` after ``import worldline``
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

try:  # the installed distribution's version (pyproject.toml)
    __version__ = _version("worldline")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

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

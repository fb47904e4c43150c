"""The shell written once for every actor: bus, consume loop, store, errors, server.

The names below load on first use (PEP 562), so importing one light submodule (the
credentials in ``auth``, the connection in ``bus``) does not load the consume loop,
LMDB and the metrics: the SDK connects through ``bus`` (``tests/sdk/test_light.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worldline.actors.runtime.consume import run_actor, utcnow
    from worldline.actors.runtime.errors import (
        ActorError,
        BusUnavailable,
        ConfigDrift,
        EmbeddedServerError,
        InvalidInput,
        StoreError,
    )
    from worldline.actors.runtime.spec import (
        ActorSpec,
        Context,
        Input,
        Outgoing,
        Reader,
        Service,
        Step,
    )
    from worldline.actors.runtime.supervise import run_actors

_HOME = {
    "run_actor": "consume",
    "utcnow": "consume",
    "ActorError": "errors",
    "BusUnavailable": "errors",
    "ConfigDrift": "errors",
    "EmbeddedServerError": "errors",
    "InvalidInput": "errors",
    "StoreError": "errors",
    "ActorSpec": "spec",
    "Context": "spec",
    "Input": "spec",
    "Outgoing": "spec",
    "Reader": "spec",
    "Service": "spec",
    "Step": "spec",
    "run_actors": "supervise",
}

__all__ = [
    "ActorError",
    "ActorSpec",
    "BusUnavailable",
    "ConfigDrift",
    "Context",
    "EmbeddedServerError",
    "Input",
    "InvalidInput",
    "Outgoing",
    "Reader",
    "Service",
    "Step",
    "StoreError",
    "run_actor",
    "run_actors",
    "utcnow",
]


def __getattr__(name: str) -> Any:
    """``worldline.actors.runtime.NAME``: import NAME's module on first use."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)

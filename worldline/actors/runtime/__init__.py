"""The shell written once for every actor: bus, consume loop, store, errors, server."""

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

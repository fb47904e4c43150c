"""The runtime's errors: defined in :mod:`worldline.protocols.errors`, so the SDK can
subclass them without loading the runtime; re-exported here for the actors."""

from worldline.protocols.errors import (
    ActorError,
    BusUnavailable,
    ConfigDrift,
    CredentialsRefused,
    EmbeddedServerError,
    InvalidInput,
    StoreError,
    StoreFull,
)

__all__ = [
    "ActorError",
    "BusUnavailable",
    "ConfigDrift",
    "CredentialsRefused",
    "EmbeddedServerError",
    "InvalidInput",
    "StoreError",
    "StoreFull",
]

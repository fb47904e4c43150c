"""One root error for the actor runtime, a few subclasses, and messages that say what to
do.

Nothing here imports nats or lmdb: pure cores raise :class:`InvalidInput` too, and the
SDK's ``BusUnavailable`` subclasses the one here without loading the runtime (it is
re-exported as :mod:`worldline.actors.runtime.errors`).
"""

from __future__ import annotations

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


class ActorError(Exception):
    """Root of every error the worldline runtime raises on purpose."""


class InvalidInput(ActorError, ValueError):
    """Raised by a pure core when a message is well-formed but cannot be accepted.

    The runtime terminates the message and publishes it, with this reason, to the
    actor's dead-letter subject. It is never retried.
    """


class BusUnavailable(ActorError, ConnectionError):
    """Raised when no NATS server can be reached at the given URL."""


class CredentialsRefused(BusUnavailable):
    """Raised when the server turned the credentials (or their absence) away: asking
    again cannot help, so an actor waiting for its server stops at once."""


class ConfigDrift(ActorError):
    """Raised when a stream or durable on the server differs from its declaration and
    the server refused the update (some fields, like retention, are fixed)."""


class StoreError(ActorError):
    """Raised when an actor's LMDB store cannot be opened or written."""


class StoreFull(StoreError):
    """Raised when a write failed for want of room (the disk is full, or the LMDB map
    is at its ceiling): the batch is retried until there is room, never dead-lettered.
    """


class EmbeddedServerError(ActorError):
    """Raised when the embedded nats-server cannot be found or does not start."""

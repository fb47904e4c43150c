"""Values in key/value buckets: an agent's presence (``wl-presence``) and a
materializer partition's lease (``wl-leases``). Decoders:
:mod:`worldline.protocols.messages`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from worldline.protocols.base import Message, Token

__all__ = ["Lease", "Presence"]


class Presence(Message, tag="presence.v1", kw_only=True, frozen=True):
    """Ephemeral session state (KV bucket with TTL): never in the log or the hash."""

    agent: Token
    status: Annotated[str, msgspec.Meta(max_length=256)] = ""
    task: Annotated[str, msgspec.Meta(max_length=1024)] = ""
    at: datetime


class Lease(Message, tag="lease.v1", kw_only=True, frozen=True):
    """Who may write for one materializer partition (KV bucket ``wl-leases``).

    The holder renews it every second; a standby that sees it unchanged for the
    lease time takes it over with a compare-and-set, starting a new ``term``.
    ``published`` is, per input stream, the last sequence whose outputs the holder
    has published: standbys follow the log up to it, so they stay hot without
    publishing anything themselves.
    """

    holder: Token
    term: Annotated[int, msgspec.Meta(ge=1)]
    # msgspec copies a mutable default per instance (ruff cannot see that Message
    # is a msgspec Struct from another module).
    published: dict[str, Annotated[int, msgspec.Meta(ge=0)]] = {}  # noqa: RUF012
    # Times a replica found this key unreadable (junk written over it) and took it
    # back by compare-and-set, and what it found the last time: carried by every
    # later renewal and takeover, so ``worldline status`` shows the event.
    repairs: Annotated[int, msgspec.Meta(ge=0)] = 0
    repaired: Annotated[str, msgspec.Meta(max_length=512)] = ""

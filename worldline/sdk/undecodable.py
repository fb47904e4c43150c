"""Reading bus data that may be junk: on an open bus any client can make the server
write for it (an op published with a reply subject gets its PubAck JSON delivered
there: into an agent's inbox stream, over a ``wl-views``, ``wl-presence`` or
``wl-leases`` key) or answer a request first. Readers skip what does not decode,
naming it in a warning, and go on with the rest (issue 23)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgspec
import nats.errors

from worldline.protocols.decode import decode_payload
from worldline.protocols.messages import (
    INBOX,
    PRESENCE_VALUE,
    AgentView,
    InboxMessage,
    Presence,
    ViewReply,
)
from worldline.protocols.subjects import INBOX as INBOX_STREAM
from worldline.protocols.subjects import VIEWS
from worldline.sdk.errors import BusUnavailable

if TYPE_CHECKING:
    from nats.aio.msg import Msg

__all__ = ["decode_presence", "decode_reply", "readable_inbox", "view_or_none"]

log = logging.getLogger("worldline.sdk")
_VIEW_VALUE = msgspec.msgpack.Decoder(ViewReply)


def decode_reply(decoder: Any, data: bytes, subject: str) -> Any:
    """The answer to a request on ``subject``.

    Raises:
        BusUnavailable: it is no worldline reply (on an open bus any client may
            answer a request first), said in one line instead of a decode error.
    """
    reply, reason = decode_payload(decoder, data)
    if reply is None:
        raise BusUnavailable(
            f"the answer on {subject} is no worldline reply ({reason}; {len(data)} "
            f"bytes {data[:48]!r}): another client may be answering there; retry"
        )
    return reply


def decode_presence(key: str, value: bytes) -> Presence | None:
    """A presence entry, or None (logged) when its bytes are not one: an agent may
    write anything on its own key, and one bad entry must not break ``who`` for the
    whole world."""
    presence, reason = decode_payload(PRESENCE_VALUE, value)
    if presence is None:
        log.warning("presence of %s does not decode, skipped: %s", key, reason)
    return presence  # type: ignore[no-any-return]


def view_or_none(agent: str, revision: int, value: bytes) -> AgentView | None:
    """The view a ``wl-views`` value holds, or None (logged) for any other bytes:
    junk on the key (a PubAck delivered there as a reply, say) must not break
    ``view``, ``watch`` or the MCP reads; the projector's next write replaces it."""
    reply, reason = decode_payload(_VIEW_VALUE, value)
    if reply is None:
        log.warning(
            "stored view of %s (revision %d of %s) is not a view, skipped: %s",
            agent,
            revision,
            VIEWS.bucket,
            reason,
        )
        return None
    return reply.view  # type: ignore[no-any-return]


async def readable_inbox(
    msgs: list[Msg], agent: str, world: str
) -> tuple[list[tuple[InboxMessage, int, Msg]], list[int]]:
    """The inbox messages among ``msgs`` (with their stream sequences), and the
    stream sequences of the rest: bytes that are no inbox message, each named in a
    warning and acknowledged, so it does not come back."""
    items: list[tuple[InboxMessage, int, Msg]] = []
    skipped: list[int] = []
    for m in msgs:
        seq = m.metadata.sequence.stream
        message, reason = decode_payload(INBOX, m.data)
        if message is not None:
            items.append((message, seq, m))
            continue
        skipped.append(seq)
        log.warning(
            "inbox of %s in %s: skipped the message at %s stream sequence %d: "
            "not an inbox message (%s, %d bytes %r); acknowledged so it does "
            "not come back",
            agent,
            world,
            INBOX_STREAM.name,
            seq,
            reason,
            len(m.data),
            m.data[:48],
        )
        try:
            await m.ack_sync()
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("could not acknowledge it (%s); it comes back", exc)
    return items, skipped

"""Agents' inboxes as the materializer keeps them: one :class:`InboxRecord` per
message (delivery is JetStream's job, through each agent's own durable), an
:class:`InboxSummary` per agent (the pending count and last lines views show), and
:func:`ack`, the ``AckInbox`` op. Messages are posted by
:meth:`worldline.actors.materializer.tx.Tx.post`.

State keys: ``inbox/<w>/<agent>/<message id>`` -> ``InboxRecord``,
``inboxsum/<w>/<agent>`` -> ``InboxSummary``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.materializer import workload
from worldline.actors.materializer.keys import inbox_key, summary_key
from worldline.actors.materializer.reject import Reject
from worldline.protocols.messages import encode

if TYPE_CHECKING:
    from worldline.actors.materializer.tx import Tx
    from worldline.protocols.messages import AckInbox

__all__ = ["RECENT", "InboxRecord", "InboxSummary", "ack"]

RECENT: Final = 5  # inbox lines kept in an agent's summary


class InboxRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The materializer's record of one inbox message (delivery is JetStream's job)."""

    id: str
    line: str  # one-line summary for views
    acked: bool = False


_RECORD = msgspec.msgpack.Decoder(InboxRecord)


class InboxSummary(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pending: int = 0
    recent: list[str] = msgspec.field(default_factory=list)


_SUMMARY = msgspec.msgpack.Decoder(InboxSummary)


def ack(tx: Tx, op: AckInbox) -> None:
    records = []
    for message_id in dict.fromkeys(op.message_ids):  # an id named twice acks once
        raw = tx.get(inbox_key(tx.world, op.author, message_id))
        if raw is None:
            raise Reject(
                "unknown_entity",
                f"no message {message_id} in {op.author}'s inbox; nothing was acked",
            )
        records.append(_RECORD.decode(raw))
    fresh = [r for r in records if not r.acked]
    for record in fresh:
        key = inbox_key(tx.world, op.author, record.id)
        tx.put(key, encode(msgspec.structs.replace(record, acked=True)))
        workload.note_read(tx, op.author, record.id)
    if fresh:
        raw = tx.get(summary_key(tx.world, op.author))
        summary = InboxSummary() if raw is None else _SUMMARY.decode(raw)
        tx.put(
            summary_key(tx.world, op.author),
            encode(
                InboxSummary(
                    pending=max(0, summary.pending - len(fresh)), recent=summary.recent
                )
            ),
        )
        tx.inboxes.add(op.author)

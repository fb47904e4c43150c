"""What an actor's store takes in: one fetched message (:class:`Delivery`), the items
of a batch unpacked (and coalesced), and the dead letter for input it cannot accept.

:func:`delivery` (a stream message as the log holds it, header included, made a
delivery) and :func:`decode_payload` (its payload decoded, or why not) are the one
way the log is read: the consume loop, the store, ``worldline export`` and
``worldline replay`` all go through them, so a replay refuses exactly what the live
actors refused.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any, Final

import msgspec

from worldline.protocols.decode import decode_payload
from worldline.protocols.messages import DeadLetter, decode_batch
from worldline.protocols.subjects import batch_subject

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Input

__all__ = [
    "MAX_LETTER_PAYLOAD",
    "MAX_LETTER_REASON",
    "SUPERSEDED",
    "Delivery",
    "coalesced",
    "dead_letter",
    "decode_payload",
    "delivery",
    "refusal",
    "unbatched",
]

log = logging.getLogger("worldline.store")


class Delivery(msgspec.Struct, frozen=True):
    """One fetched message, stripped of its nats object so it can cross threads."""

    seq: int
    subject: str
    data: bytes
    batch: bool = False  # a batch of outputs (header Wl-Batch): unpacked here


def delivery(seq: int, subject: str, data: bytes, batch: str | None) -> Delivery:
    """The delivery of the stream message at ``seq``: ``batch`` is its ``Wl-Batch``
    header as the log holds it (None: no such header). Any value, even one that is no
    count, makes it a batch, which the store unpacks and dead-letters what is no
    batch or what the batch may not carry, whatever the input (an op with the header
    is dead-lettered: ops never travel in batches)."""
    return Delivery(seq, subject, data, batch=batch is not None)


def refusal(decoder: Any, d: Delivery) -> tuple[Any, str | None]:
    """What an input decoding with ``decoder`` makes of ``d`` before its handler:
    the message, or None and why the store dead-letters it (the first item's reason,
    for a batch: a batch, even a good one, is never one message)."""
    if d.batch:
        reasons = [bad for _, bad in unbatched(d) if bad is not None]
        return None, reasons[
            0
        ] if reasons else "a batch: its items are handled one by one"
    return decode_payload(decoder, d.data)


MAX_LETTER_PAYLOAD: Final = 4 * 1024  # bytes of the input a dead letter carries
MAX_LETTER_REASON: Final = 4 * 1024  # characters of the reason it carries


def dead_letter(actor: str, d: Delivery, reason: str, now: Any) -> DeadLetter:
    """The dead letter for ``d``, the one way every dead letter is made. It carries
    an excerpt of the input, not a copy: a longer input is cut to its first
    :data:`MAX_LETTER_PAYLOAD` bytes, with its full size and sha256 recorded (the
    whole input stays in its own stream at ``stream_seq``, so nothing is lost); the
    reason is cut to :data:`MAX_LETTER_REASON` characters. A letter is a few KiB
    whatever the input: before issue 23 each carried up to 512 KiB, so an agent's
    1 GiB of junk ops cost another 1 GiB in WL_DLQ."""
    payload = d.data
    if len(payload) <= MAX_LETTER_PAYLOAD:
        return DeadLetter(
            actor=actor,
            subject=d.subject,
            stream_seq=d.seq,
            reason=reason[:MAX_LETTER_REASON],
            payload=payload,
            at=now,
        )
    return DeadLetter(
        actor=actor,
        subject=d.subject,
        stream_seq=d.seq,
        reason=reason[:MAX_LETTER_REASON],
        payload=payload[:MAX_LETTER_PAYLOAD],
        at=now,
        payload_bytes=len(payload),
        payload_sha256=hashlib.sha256(payload).hexdigest(),
    )


def unbatched(d: Delivery) -> list[tuple[Delivery, str | None]]:
    """The items of batch ``d``, each as a delivery at ``d``'s sequence, with the
    reason to dead-letter it instead (a batch that does not decode; an item on a
    subject the batch cannot carry: another world or channel)."""
    try:
        items = decode_batch(d.data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        return [(d, f"undecodable: not a worldline batch ({exc})")]
    if not items:  # no actor publishes one
        return [(d, "invalid: an empty batch")]
    out: list[tuple[Delivery, str | None]] = []
    for subject, payload in items:
        item = Delivery(d.seq, subject, payload)
        if batch_subject(subject) != d.subject:
            out.append((item, f"invalid: a batch on {d.subject} cannot carry it"))
        else:
            out.append((item, None))
    return out


SUPERSEDED: Final = object()


def coalesced(inp: Input[Any], parts: list[tuple[Delivery, str | None]]) -> list[Any]:
    """Per item of a batch: its decoded message, :data:`SUPERSEDED` when a later
    item has the same :attr:`Input.coalesce` key, or None (not decoded here: the
    handler path decodes it, and reports what does not decode)."""
    if inp.coalesce is None:
        return [None] * len(parts)
    decoded: list[Any] = []
    keys: list[Any] = []
    for item, bad in parts:
        message = key = None
        if bad is None:
            message, _ = decode_payload(inp.decoder, item.data)
        if message is not None:
            try:
                key = inp.coalesce(message)
            except Exception:  # a bug in the core: handle the item on its own
                log.exception("coalesce failed on %s", item.subject)
        decoded.append(message)
        keys.append(key)
    seen: set[Any] = set()
    for n in range(len(parts) - 1, -1, -1):
        key = keys[n]
        if key is None:
            continue
        if key in seen:
            decoded[n] = SUPERSEDED
        seen.add(key)
    return decoded

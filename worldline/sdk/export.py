"""Reading a world's whole op log back: ``export`` and ``backup`` (what
``worldline export`` writes and ``worldline replay`` reads). Mixed into
:class:`worldline.sdk.client.World` under the crew verbs."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from worldline.protocols.decode import decode_payload
from worldline.protocols.messages import OPS_INBOX, OpsInbox, encode
from worldline.protocols.subjects import OPS, ops
from worldline.sdk.oplog import read_log

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from nats.aio.client import Client as NATS
    from nats.js import JetStreamContext

__all__ = ["ExportMixin", "ExportRecord", "RawRecord", "export_record"]

log = logging.getLogger("worldline.sdk")


class ExportRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One line of ``worldline export``: an op with its place in the log."""

    seq: int
    subject: str  # as the actors read it (bytes that are not UTF-8 shown as U+FFFD)
    op: OpsInbox
    # The subject's bytes, when they are not valid UTF-8 (JSON: base64)
    subject_bytes: bytes | None = None
    # The op's bytes as the log holds them, when ``op`` (encoded again, or read
    # back from this line's JSON) would not give the same bytes: an offset time, a
    # NaN, a field this version does not know. Replay applies these.
    payload: bytes | None = None

    def raw(self) -> bytes:
        """The op's bytes as the log holds them."""
        return encode(self.op) if self.payload is None else self.payload


class RawRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One line of ``worldline export`` for an op that does not decode: kept as its
    bytes (the actors dead-lettered it; replay does the same), so a backup holds the
    whole log."""

    seq: int
    subject: str  # as the actors read it (bytes that are not UTF-8 shown as U+FFFD)
    payload: bytes  # the message as the log holds it (JSON: base64)
    reason: str  # why the actors dead-lettered it
    subject_bytes: bytes | None = None  # the subject's bytes, when not valid UTF-8
    batch: str | None = None  # its Wl-Batch header, if it had one (ops never do)

    def raw(self) -> bytes:
        """The message's bytes as the log holds them."""
        return self.payload


class ExportMixin:
    """The op log read back in order; needs ``_nc``, ``_js`` and ``world``."""

    _nc: NATS
    _js: JetStreamContext
    world: str

    async def export(self) -> AsyncIterator[ExportRecord]:
        """Every op of this world that decodes, in log order (replayable). For a
        backup that keeps the ops that do not decode too, use :meth:`backup`."""
        async for record in self.backup():
            if isinstance(record, ExportRecord):
                yield record
            else:
                log.warning(
                    "skipping undecodable op at seq %d: %s", record.seq, record.reason
                )

    async def backup(self) -> AsyncIterator[ExportRecord | RawRecord]:
        """Every op of this world in log order, each exactly once: those that do not
        decode as :class:`RawRecord` (see ``worldline export``).

        Raises:
            BusUnavailable: the server holds no op log, or the read could not get
                every op of the world up to the last one it held when the read
                began (named: see :func:`worldline.sdk.oplog.read_log`): nothing
                is cut silently; run it again.
        """
        async for seq, subject, data, header in read_log(
            self._nc,
            self._js,
            OPS.name,
            ops(self.world, "*"),
            what=f"export of {self.world!r}",
        ):
            yield export_record(seq, subject, data, header)


_OP_JSON = msgspec.json.Decoder(OpsInbox)


def export_record(
    seq: int, subject: str, data: bytes, batch: str | None = None
) -> ExportRecord | RawRecord:
    """The export line of one op as the log holds it (``batch``: its ``Wl-Batch``
    header), read as the actors read it: what they dead-letter before any handler
    (no op, or a batch) is a :class:`RawRecord`."""
    # The actors' own reading (loaded by an export, never by ``import worldline``).
    from worldline.actors.runtime.bus import raw_subject, valid_subject
    from worldline.actors.runtime.deliveries import delivery, refusal

    subject_bytes = None if valid_subject(subject) else raw_subject(subject)
    if subject_bytes is not None:
        # What the actors read (their pull decodes with U+FFFD), so a replay of the
        # line takes the same path theirs did.
        subject = subject_bytes.decode(errors="replace")
    op, reason = refusal(OPS_INBOX, delivery(seq, subject, data, batch))
    if reason is not None:
        return RawRecord(
            seq=seq,
            subject=subject,
            payload=data,
            reason=reason,
            subject_bytes=subject_bytes,
            batch=batch,
        )
    exact = encode(op) == data
    if exact:  # and it survives this line's JSON (a NaN comes back as null, an
        # integer key of a field value as a string)
        again, _ = decode_payload(_OP_JSON, msgspec.json.encode(op))
        exact = again == op
    return ExportRecord(
        seq=seq,
        subject=subject,
        op=op,
        subject_bytes=subject_bytes,
        payload=None if exact else data,
    )

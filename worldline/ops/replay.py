"""Rebuild a world's state from its op log in fresh LMDB stores, through the same cores
and the same store code the live actors use, and hash it.

The live materializer's hash of the same world must match byte for byte: versions are
OPS sequences and every time is the op's own, so nothing depends on when or in which
batches the live actors happened to apply the log. Every record is applied as the log
holds it, through the code the consume loop uses
(:func:`worldline.actors.runtime.deliveries.delivery`: its bytes and its ``Wl-Batch``
header, then the store's decoding), so what the live actors dead-lettered (no op, a
batch header on an op, a forged author) is dead-lettered here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from worldline.actors.fusion.service import spec as fusion_spec
from worldline.actors.materializer.core import last_op_key
from worldline.actors.materializer.service import spec as materializer_spec
from worldline.actors.runtime.deliveries import Delivery, delivery
from worldline.actors.runtime.memory import state_hash
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import OPS_INBOX
from worldline.protocols.subjects import DERIVED_CHANNEL, channel_of
from worldline.sdk.errors import BadRequest
from worldline.sdk.export import ExportRecord, RawRecord

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path


__all__ = ["ReplayResult", "read_export", "replay"]

BATCH = 1000  # ops per LMDB transaction, as a live actor would fetch them


@dataclass(frozen=True)
class ReplayResult:
    """What the replay rebuilt."""

    hash: str
    ops: int  # records replayed (raw ones included)
    last_seq: int  # the highest sequence among them
    # the last op the rebuilt materializer applied or rejected in the world (what the
    # live one answers as ``applied``: a dead-lettered op does not move it)
    applied: int = 0
    raw: int = 0  # records that did not decode, dead-lettered as the live actors did
    # the hash and last-op marker right after the record at ``at`` (see replay)
    hash_at: str = ""
    applied_at: int = 0


def replay(
    records: Iterable[ExportRecord | RawRecord],
    data: Path,
    world: str,
    *,
    secured: bool | None = None,
    at: int = 0,
) -> ReplayResult:
    """Apply ``records`` (in log order) to fresh fusion and materializer stores in
    ``data`` and return the materializer's hash of ``world``.

    ``secured``: whether the live bus authenticated authors (it decides who may
    declare a world first, as it did for the live actors); default, as the actors
    decide it, whether this process has credentials in ``$WORLDLINE_CREDS``.
    ``at``: a sequence (the live world's ``applied`` when the log was read) after
    whose record the state is hashed too (``hash_at``, ``applied_at``), so a world
    written to while it was read can be compared where it stood.

    Raises:
        BadRequest: ``data`` already holds a store (a replay starts from nothing).
    """
    if data.exists() and any(data.iterdir()):
        raise BadRequest(f"{data} is not empty; replay needs a fresh folder")
    rebuild = _Rebuild(data, secured)
    count = last_seq = raw = 0
    hash_at, applied_at = "", 0
    try:
        batch: list[Delivery] = []
        for record in records:
            header = None
            if isinstance(record, RawRecord):
                header = record.batch
                raw += 1
            batch.append(delivery(record.seq, record.subject, record.raw(), header))
            count += 1
            last_seq = max(last_seq, record.seq)
            if len(batch) == BATCH or record.seq == at:
                rebuild.apply(batch)
                batch = []
            if record.seq == at:
                hash_at, applied_at = rebuild.hash(world)
        rebuild.apply(batch)
        digest, applied = rebuild.hash(world)
    finally:
        rebuild.close()
    return ReplayResult(
        hash=digest,
        ops=count,
        last_seq=last_seq,
        applied=applied,
        raw=raw,
        hash_at=hash_at,
        applied_at=applied_at,
    )


_EXPORT_LINE = msgspec.json.Decoder(ExportRecord)
_RAW_LINE = msgspec.json.Decoder(RawRecord)


class _ExactLine(msgspec.Struct, kw_only=True):
    """An export line whose ``op`` its JSON cannot hold (a NaN where a number must
    be), read from the bytes it carries."""

    seq: int
    subject: str
    payload: bytes
    subject_bytes: bytes | None = None


_EXACT_LINE = msgspec.json.Decoder(_ExactLine)


def read_export(lines: Iterable[bytes]) -> list[ExportRecord | RawRecord]:
    """The records of an export file (``worldline export``), raw ones included.

    Raises:
        msgspec.MsgspecError: a line is neither an op nor a raw record.
    """
    records: list[ExportRecord | RawRecord] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            records.append(_EXPORT_LINE.decode(line))
        except msgspec.ValidationError:
            try:
                # An op that did not decode when it was exported: kept as its bytes.
                records.append(_RAW_LINE.decode(line))
            except msgspec.ValidationError:
                exact = _EXACT_LINE.decode(line)
                records.append(
                    ExportRecord(
                        seq=exact.seq,
                        subject=exact.subject,
                        op=OPS_INBOX.decode(exact.payload),
                        subject_bytes=exact.subject_bytes,
                        payload=exact.payload,
                    )
                )
    return records


class _Rebuild:
    """Fusion and materializer stores wired as the bus wires them: ops feed both, and
    fusion's committed posteriors feed the materializer's second input."""

    def __init__(self, data: Path, secured: bool | None) -> None:
        self.fusion_input = fusion_spec(secured=secured).inputs[0]
        self.ops_input, self.posterior_input = materializer_spec(secured=secured).inputs
        self.fusion = Store(data / "fusion", actor="fusion")
        self.materializer = Store(data / "materializer", actor="materializer")
        self.now = datetime.now(UTC)  # only dead letters carry it; they are not state
        self.derived_seq = 0

    def apply(self, batch: list[Delivery]) -> None:
        if not batch:
            return
        fused = self.fusion.apply_batch(self.fusion_input, batch, self.now)
        applied = self.materializer.apply_batch(self.ops_input, batch, self.now)
        posteriors = []
        for item in fused.outbox:
            if channel_of(item.subject) == DERIVED_CHANNEL:
                self.derived_seq += 1
                posteriors.append(
                    Delivery(self.derived_seq, item.subject, item.payload)
                )
        keys = [i.key for i in applied.outbox]
        if posteriors:
            result = self.materializer.apply_batch(
                self.posterior_input, posteriors, self.now
            )
            keys += [i.key for i in result.outbox]
        # Nothing is published: the outboxes are emptied as if JetStream had taken them.
        self.materializer.clear_outbox(keys)
        self.fusion.clear_outbox([i.key for i in fused.outbox])

    def hash(self, world: str) -> tuple[str, int]:
        """The rebuilt materializer's hash of ``world`` and its last-op marker."""
        with self.materializer.reader() as reader:
            digest = state_hash(reader, world=world)
            marker = reader.get(last_op_key(world))
        return digest, 0 if marker is None else int(marker)

    def close(self) -> None:
        self.fusion.close()
        self.materializer.close()

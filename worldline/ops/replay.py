"""Rebuild a world's state from its op log in fresh LMDB stores, through the same cores
and the same store code the live actors use, and hash it.

The live materializer's hash of the same world must match byte for byte: versions are
OPS sequences and every time is the op's own, so nothing depends on when or in which
batches the live actors happened to apply the log. Every record is applied as the log
holds it, through the code the consume loop uses
(:func:`worldline.actors.runtime.deliveries.delivery`: its bytes and its ``Wl-Batch``
header, then the store's decoding), so what the live actors dead-lettered (no op, a
batch header on an op, a forged author) is dead-lettered here too.

Speed: a long log is rebuilt in two processes at once (:class:`_Pipelined`): fusion
in a child process of its own, fed the same batches, while this one applies them to
the materializer; each batch's posteriors come back and are applied right after that
batch's ops, exactly where the one-process rebuild applies them (so the stores, and
the hash, are byte for byte the same). Fusion runs ahead of the materializer by up to
:data:`AHEAD` batches. A log shorter than :data:`PIPELINE_FROM` records is rebuilt in
this process alone (:class:`_Rebuild`): starting a process costs more than it saves.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING

import msgspec

from worldline.actors.fusion.service import spec as fusion_spec
from worldline.actors.materializer.core import last_op_key
from worldline.actors.materializer.service import spec as materializer_spec
from worldline.actors.runtime.auth import CREDS_ENV
from worldline.actors.runtime.deliveries import Delivery, delivery
from worldline.actors.runtime.memory import state_hash
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import OPS_INBOX
from worldline.protocols.subjects import DERIVED_CHANNEL, channel_of
from worldline.sdk.errors import BadRequest
from worldline.sdk.export import ExportRecord, RawRecord

if TYPE_CHECKING:
    from collections.abc import Iterable

    from worldline.actors.runtime.outbox import BatchResult


__all__ = ["ReplayResult", "read_export", "replay"]

BATCH = 1000  # ops per LMDB transaction, as a live actor would fetch them
PIPELINE_FROM = 20_000  # records from which fusion is rebuilt in a process of its own
AHEAD = 8  # batches fusion's process may run ahead of the materializer
_WAIT = 1.0  # seconds between checks that fusion's process still runs


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
    pipelined: bool | None = None,
) -> ReplayResult:
    """Apply ``records`` (in log order) to fresh fusion and materializer stores in
    ``data`` and return the materializer's hash of ``world``.

    ``secured``: whether the live bus authenticated authors (it decides who may
    declare a world first, as it did for the live actors); default, as the actors
    decide it, whether this process has credentials in ``$WORLDLINE_CREDS``.
    ``at``: a sequence (the live world's ``applied`` when the log was read) after
    whose record the state is hashed too (``hash_at``, ``applied_at``), so a world
    written to while it was read can be compared where it stood.
    ``pipelined``: fusion in a process of its own (the same result, sooner, on a
    machine with a second core); default, when the log holds at least
    :data:`PIPELINE_FROM` records.

    Raises:
        BadRequest: ``data`` already holds a store (a replay starts from nothing).
    """
    if data.exists() and any(data.iterdir()):
        raise BadRequest(f"{data} is not empty; replay needs a fresh folder")
    if secured is None:  # as the actors decide it (here, for fusion's process too)
        secured = bool(os.environ.get(CREDS_ENV))
    if pipelined is None:
        records = iter(records)
        head = list(itertools.islice(records, PIPELINE_FROM))
        pipelined = len(head) == PIPELINE_FROM
        records = itertools.chain(head, records)
    rebuild: _Rebuild = (
        _Pipelined(data, secured) if pipelined else _Rebuild(data, secured)
    )
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

    def __init__(self, data: Path, secured: bool) -> None:
        self.ops_input, self.posterior_input = materializer_spec(secured=secured).inputs
        self.materializer = Store(
            data / "materializer", actor="materializer", durable=False
        )
        self.now = datetime.now(UTC)  # only dead letters carry it; they are not state
        self.derived_seq = 0
        self.fusion = _Fusion(data / "fusion", secured, self.now)

    def apply(self, batch: list[Delivery]) -> None:
        if not batch:
            return
        self._fuse(batch)
        applied = self.materializer.apply_batch(self.ops_input, batch, self.now)
        self._finish(applied, self._fused())

    def _fuse(self, batch: list[Delivery]) -> None:
        self.fusion.apply(batch)

    def _fused(self) -> list[tuple[str, bytes]]:
        """The posteriors of the oldest batch handed to fusion, in its order."""
        return self.fusion.take()

    def _finish(self, applied: BatchResult, fused: list[tuple[str, bytes]]) -> None:
        keys = [i.key for i in applied.outbox]
        posteriors = []
        for subject, payload in fused:
            self.derived_seq += 1
            posteriors.append(Delivery(self.derived_seq, subject, payload))
        if posteriors:
            result = self.materializer.apply_batch(
                self.posterior_input, posteriors, self.now
            )
            keys += [i.key for i in result.outbox]
        # Nothing is published: the outboxes are emptied as if JetStream had taken them.
        self.materializer.clear_outbox(keys)

    def hash(self, world: str) -> tuple[str, int]:
        """The rebuilt materializer's hash of ``world`` and its last-op marker."""
        with self.materializer.reader() as reader:
            digest = state_hash(reader, world=world)
            marker = reader.get(last_op_key(world))
        return digest, 0 if marker is None else int(marker)

    def close(self) -> None:
        try:
            self.fusion.close()
        finally:
            self.materializer.close()


class _Fusion:
    """Fusion's store, fed batches in log order: the posteriors each one commits
    (the items on the derived channel of its outbox) are taken in the same order."""

    def __init__(self, folder: Path, secured: bool, now: datetime) -> None:
        self.input = fusion_spec(secured=secured).inputs[0]
        self.store = Store(folder, actor="fusion", durable=False)
        self.now = now
        self.done: list[list[tuple[str, bytes]]] = []

    def apply(self, batch: list[Delivery]) -> None:
        fused = self.store.apply_batch(self.input, batch, self.now)
        self.done.append(
            [
                (item.subject, item.payload)
                for item in fused.outbox
                if channel_of(item.subject) == DERIVED_CHANNEL
            ]
        )
        self.store.clear_outbox([i.key for i in fused.outbox])

    def take(self) -> list[tuple[str, bytes]]:
        return self.done.pop(0)

    def close(self) -> None:
        self.store.close()


# A batch on its way to fusion's process, and its posteriors back: msgpack arrays
# (seq, subject, data, batch) and (subject, payload), each framed by its length (4
# bytes, big-endian); an empty frame ends the work.
_WIRE_IN = msgspec.msgpack.Decoder(list[tuple[int, str, bytes, bool]])
_WIRE_OUT = msgspec.msgpack.Decoder(list[tuple[str, bytes]])
_END = b""


def _write_frame(out: IO[bytes], frame: bytes) -> None:
    out.write(len(frame).to_bytes(4, "big"))
    out.write(frame)
    out.flush()


def _read_frame(source: IO[bytes]) -> bytes | None:
    """The next frame (None: the other side closed its end)."""
    head = source.read(4)
    if len(head) < 4:
        return None
    size = int.from_bytes(head, "big")
    frame = source.read(size)
    return frame if len(frame) == size else None


class _Pipelined(_Rebuild):
    """:class:`_Rebuild` with fusion in a child process (``python -m
    worldline.ops.replay``, so nothing of the caller's program is run again
    there): batch ``k+1`` (up to :data:`AHEAD` ahead) is fused there while this
    process applies batch ``k`` and its posteriors to the materializer, in the
    order :class:`_Rebuild` applies them. Two threads carry the frames, so
    neither side ever waits on a full pipe the other is not reading."""

    def __init__(self, data: Path, secured: bool) -> None:
        self.ops_input, self.posterior_input = materializer_spec(secured=secured).inputs
        self.now = datetime.now(UTC)
        self.derived_seq = 0
        self.sent: list[list[Delivery]] = []  # handed to fusion, not yet applied here
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        root = str(Path(__file__).resolve().parents[2])  # where worldline is
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": root if not path else f"{root}:{path}"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "worldline.ops.replay",
             str(data / "fusion"), "1" if secured else "0", self.now.isoformat()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            env=env,
        )  # fmt: skip
        self.outgoing: queue.Queue[bytes] = queue.Queue(maxsize=AHEAD)
        self.incoming: queue.Queue[bytes | None] = queue.Queue()
        self.writer = threading.Thread(target=self._write, daemon=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.writer.start()
        self.reader.start()
        self.materializer = Store(
            data / "materializer", actor="materializer", durable=False
        )

    def _write(self) -> None:
        assert self.process.stdin is not None
        try:
            while True:
                frame = self.outgoing.get()
                _write_frame(self.process.stdin, frame)
                if frame == _END:
                    break
        except OSError:  # the child is gone: the reader sees it too
            pass
        with contextlib.suppress(OSError):
            self.process.stdin.close()

    def _read(self) -> None:
        assert self.process.stdout is not None
        while (frame := _read_frame(self.process.stdout)) is not None:
            self.incoming.put(frame)
        self.incoming.put(None)

    def apply(self, batch: list[Delivery]) -> None:
        if not batch:
            return
        self._fuse(batch)
        while len(self.sent) > AHEAD:
            self._apply_oldest()

    def _fuse(self, batch: list[Delivery]) -> None:
        wire = [(d.seq, d.subject, d.data, d.batch) for d in batch]
        frame = msgspec.msgpack.encode(wire)
        while True:
            try:
                self.outgoing.put(frame, timeout=_WAIT)
                break
            except queue.Full:
                self._check()
        self.sent.append(batch)

    def _apply_oldest(self) -> None:
        batch = self.sent[0]
        applied = self.materializer.apply_batch(self.ops_input, batch, self.now)
        self._finish(applied, self._fused())
        self.sent.pop(0)

    def _fused(self) -> list[tuple[str, bytes]]:
        frame = self.incoming.get()
        if frame is None:
            self._check(ended=True)
            raise AssertionError("unreachable")
        return _WIRE_OUT.decode(frame)

    def _check(self, *, ended: bool = False) -> None:
        if ended or self.process.poll() is not None:
            code = self.process.wait()
            self.errors.seek(0)
            why = self.errors.read().decode(errors="replace").strip()
            raise RuntimeError(
                f"replay: fusion's process ended (exit code {code}): {why[-4000:]}"
            )

    def hash(self, world: str) -> tuple[str, int]:
        while self.sent:
            self._apply_oldest()
        return super().hash(world)

    def close(self) -> None:
        try:
            with contextlib.suppress(queue.Full):
                self.outgoing.put(_END, timeout=_WAIT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.writer.join(timeout=5)
            self.reader.join(timeout=5)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            for pipe in (self.process.stdin, self.process.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            self.errors.close()
            self.materializer.close()


def _fusion_main(argv: list[str]) -> int:
    """Fusion's side of :class:`_Pipelined` (the child process): each batch that
    comes in on stdin is applied, and its posteriors go out on stdout, until an
    empty frame (or the end of stdin) comes."""
    folder, secured, now = argv
    fusion = _Fusion(Path(folder), secured == "1", datetime.fromisoformat(now))
    source, out = sys.stdin.buffer, sys.stdout.buffer
    try:
        while frame := _read_frame(source):
            fusion.apply([Delivery(*d) for d in _WIRE_IN.decode(frame)])
            _write_frame(out, msgspec.msgpack.encode(fusion.take()))
    finally:
        fusion.close()
    return 0


if __name__ == "__main__":
    sys.exit(_fusion_main(sys.argv[1:]))

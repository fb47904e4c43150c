"""An actor's LMDB store: its state, the last applied stream sequence, and an outbox.

A fetched batch is applied in one write transaction that also records the last applied
stream sequence per durable and the messages to publish (the outbox). So a crash at any
point neither loses nor doubles an effect: on restart, already-applied sequences are
skipped, and outbox entries that were committed but not yet published are sent again
(their Nats-Msg-Id lets JetStream drop the duplicate).

Write transactions live entirely inside one synchronous call (run in a worker thread by
the runtime), never across an ``await``: py-lmdb binds them to their thread.
"""

from __future__ import annotations

import hashlib
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import lmdb
import msgspec

from actors.runtime.errors import InvalidInput, StoreError
from actors.runtime.spec import Context, Input, Reader, Step
from protocols.messages import DeadLetter, decode_batch, encode
from protocols.subjects import author_of, batch_subject, dlq, world_of

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

__all__ = ["BatchResult", "Delivery", "OutboxItem", "Store"]

log = logging.getLogger("worldline.store")

_MAP_SIZE = 8 << 30  # address space reserved, not disk used; LMDB grows the file lazily
_APPLIED = b"applied/"
_OUTBOX_NEXT = b"outbox-next"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One fetched message, stripped of its nats object so it can cross threads."""

    seq: int
    subject: str
    data: bytes
    batch: bool = False  # a batch of outputs (header Wl-Batch): unpacked here


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """A committed message waiting to be published."""

    key: bytes
    subject: str
    msg_id: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class BatchResult:
    """Per delivery, whether it was accepted (ack) or dead-lettered (term)."""

    accepted: list[bool]
    outbox: list[OutboxItem]


class _TxnReader:
    """A :class:`Reader` over an open LMDB transaction (sees the batch's own writes)."""

    def __init__(self, txn: Any, db: Any) -> None:
        self._txn = txn
        self._db = db

    def get(self, key: bytes) -> bytes | None:
        value = self._txn.get(key, db=self._db)
        return None if value is None else bytes(value)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        cursor = self._txn.cursor(db=self._db)
        if not cursor.set_range(prefix):
            return
        for key, value in cursor:
            if not bytes(key).startswith(prefix):
                return
            yield bytes(key), bytes(value)


# (world, author) by subject: a batch's messages mostly share a few subjects.
_places: dict[str, tuple[str, str]] = {}
_PLACES = 4096


class Store:
    """One actor's LMDB environment with three databases: state, meta and outbox."""

    def __init__(self, path: Path, *, actor: str) -> None:
        self.path = path
        self.actor = actor
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._env = lmdb.open(str(path), map_size=_MAP_SIZE, max_dbs=4)
            self._state = self._env.open_db(b"state")
            self._meta = self._env.open_db(b"meta")
            self._outbox = self._env.open_db(b"outbox")
        except (OSError, lmdb.Error) as exc:
            raise StoreError(
                f"{actor}: cannot open LMDB store at {path}: {exc}. Check that the "
                "folder is writable and that no other process of this actor uses it."
            ) from exc

    def close(self) -> None:
        self._env.close()

    def size_bytes(self) -> int:
        info = self._env.info()
        stat = self._env.stat()
        return int(info["last_pgno"] + 1) * int(stat["psize"])

    @contextmanager
    def reader(self) -> Iterator[Reader]:
        """A consistent read-only view of the state (a read transaction)."""
        with self._env.begin(db=self._state) as txn:
            yield _TxnReader(txn, self._state)

    def applied_seq(self, durable: str) -> int:
        with self._env.begin(db=self._meta) as txn:
            raw = txn.get(_APPLIED + durable.encode(), db=self._meta)
        return 0 if raw is None else int(bytes(raw))

    def apply_batch(
        self,
        inp: Input[Any],
        deliveries: list[Delivery],
        now: Any,
        *,
        publish: bool = True,
    ) -> BatchResult:
        """Decode, handle and commit a batch in one write transaction.

        Deliveries at or below the durable's last applied sequence are skipped (a
        redelivery after a crash between commit and ack). Input that does not decode, or
        that the handler rejects, is dead-lettered: recorded as applied, with a
        :class:`DeadLetter` in the outbox. Nothing is lost, nothing is applied twice.

        ``publish=False`` applies the state changes but stages no outputs: a standby
        replica following what its active replica has already published.
        """
        durable_key = _APPLIED + inp.consumer.durable.encode()
        accepted: list[bool] = []
        items: list[OutboxItem] = []
        try:
            with self._env.begin(write=True) as txn:
                reader = _TxnReader(txn, self._state)
                raw = txn.get(durable_key, db=self._meta)
                applied = 0 if raw is None else int(bytes(raw))
                raw_next = txn.get(_OUTBOX_NEXT, db=self._meta)
                next_key = 0 if raw_next is None else int(bytes(raw_next))

                # The batch's outputs go into the outbox as one entry (one put now,
                # one delete once published), under this key.
                key = next_key.to_bytes(8, "big")

                def stage(subject: str, msg_id: str, payload: bytes) -> None:
                    if publish:
                        items.append(OutboxItem(key, subject, msg_id, payload))

                def reject(d: Delivery, reason: str, msg_id: str, on: str) -> None:
                    letter = dead_letter(self.actor, d, reason, now)
                    stage(
                        dlq(_world_or_unknown(on), self.actor),
                        msg_id,
                        encode(letter),
                    )

                # The context of each world's last handled message, for inp.finish.
                touched: dict[str, Context] = {}
                for d in deliveries:
                    if inp.skip_applied and d.seq <= applied:
                        accepted.append(True)
                        continue
                    applied = max(applied, d.seq)
                    msg_id = f"dlq:{inp.consumer.durable}:{d.seq}"
                    if d.batch:
                        ok = True
                        parts = _unbatched(d)
                        decoded = _coalesced(inp, parts)
                        for part, (item, bad) in enumerate(parts):
                            message = decoded[part]
                            if message is _SUPERSEDED:
                                continue  # a later item of the batch replaces it
                            reason = bad or self._handle_one(
                                inp, reader, txn, item, now, stage, touched, message
                            )
                            if reason is not None:
                                ok = False
                                # filed under the batch's world, not the
                                # item's claim
                                reject(item, reason, f"{msg_id}.{part}", d.subject)
                        accepted.append(ok)
                        continue
                    reason = self._handle_one(inp, reader, txn, d, now, stage, touched)
                    if reason is None:
                        accepted.append(True)
                        continue
                    accepted.append(False)
                    reject(d, reason, msg_id, d.subject)
                if inp.finish is not None:
                    for world in sorted(touched):
                        self._finish(inp.finish, reader, txn, touched[world], stage)
                if items:
                    txn.put(key, encode_entry(items), db=self._outbox)
                    txn.put(_OUTBOX_NEXT, str(next_key + 1).encode(), db=self._meta)
                txn.put(durable_key, str(applied).encode(), db=self._meta)
        except lmdb.Error as exc:
            raise StoreError(
                f"{self.actor}: LMDB write failed at {self.path}: {exc}"
            ) from exc
        return BatchResult(accepted, items)

    def _handle_one(
        self,
        inp: Input[Any],
        reader: _TxnReader,
        txn: Any,
        d: Delivery,
        now: Any,
        stage: Any,
        touched: dict[str, Context],
        message: Any = None,
    ) -> str | None:
        """Handle one delivery (``message``: its payload already decoded) inside the
        batch transaction; return a reject reason."""
        if message is None:
            try:
                message = inp.decoder.decode(d.data)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                return f"undecodable: {exc}"
            except RecursionError:
                return "undecodable: nested too deeply to decode"
        try:
            place = _places.get(d.subject)
            if place is None:
                if len(_places) >= _PLACES:
                    _places.clear()
                place = _places[d.subject] = (world_of(d.subject), author_of(d.subject))
            ctx = Context(place[0], place[1], d.subject, d.seq, now)
            step = inp.handle(reader, message, ctx)
        except InvalidInput as exc:
            return f"invalid: {exc}"
        except Exception as exc:
            # A bug in a core must neither kill the actor nor lose the input.
            log.exception(
                "%s: handler failed on %s seq %d", self.actor, d.subject, d.seq
            )
            return f"internal error in {self.actor}: {exc!r}"
        self._commit_step(txn, step, stage)
        touched[ctx.world] = ctx
        return None

    def _finish(
        self,
        finish: Callable[[Reader, Context], Step],
        reader: _TxnReader,
        txn: Any,
        ctx: Context,
        stage: Any,
    ) -> None:
        """The input's once-per-batch work for one world. Its inputs are already
        applied: if it fails (a bug), it is logged and the batch commits without it."""
        try:
            step = finish(reader, ctx)
        except Exception:
            log.exception("%s: the batch's finish failed for %s", self.actor, ctx.world)
            return
        self._commit_step(txn, step, stage)

    def _commit_step(self, txn: Any, step: Step, stage: Any) -> None:
        for key, value in step.writes.items():
            if value is None:
                txn.delete(key, db=self._state)
            else:
                txn.put(key, value, db=self._state)
        for out in step.out:
            payload = encode(out.message) if out.payload is None else out.payload
            stage(out.subject, out.msg_id, payload)

    def pending_outbox(self) -> list[OutboxItem]:
        """Committed messages not yet confirmed published (after a crash, say)."""
        with self._env.begin(db=self._outbox) as txn:
            return [
                item
                for key, value in txn.cursor(db=self._outbox)
                for item in decode_entry(bytes(key), bytes(value))
            ]

    def clear_outbox(self, keys: list[bytes]) -> None:
        """Forget outbox entries once JetStream has acknowledged them (``keys`` of
        :class:`OutboxItem` s: the items of one batch share theirs)."""
        if not keys:
            return
        with self._env.begin(write=True, db=self._outbox) as txn:
            for key in dict.fromkeys(keys):
                txn.delete(key, db=self._outbox)


MAX_LETTER_PAYLOAD = 512 * 1024  # bytes of the input a dead letter carries


def dead_letter(actor: str, d: Delivery, reason: str, now: Any) -> DeadLetter:
    """The dead letter for ``d``. An input too big to travel again inside a letter
    (the bus caps a message at 1 MiB) is cut, with its size and sha256 recorded; the
    whole input stays in its own stream at ``stream_seq``, so nothing is lost."""
    payload = d.data
    if len(payload) <= MAX_LETTER_PAYLOAD:
        return DeadLetter(
            actor=actor,
            subject=d.subject,
            stream_seq=d.seq,
            reason=reason,
            payload=payload,
            at=now,
        )
    return DeadLetter(
        actor=actor,
        subject=d.subject,
        stream_seq=d.seq,
        reason=reason[:4096],
        payload=payload[:MAX_LETTER_PAYLOAD],
        at=now,
        payload_bytes=len(payload),
        payload_sha256=hashlib.sha256(payload).hexdigest(),
    )


def _unbatched(d: Delivery) -> list[tuple[Delivery, str | None]]:
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


_SUPERSEDED: Final = object()


def _coalesced(inp: Input[Any], parts: list[tuple[Delivery, str | None]]) -> list[Any]:
    """Per item of a batch: its decoded message, :data:`_SUPERSEDED` when a later
    item has the same :attr:`Input.coalesce` key, or None (not decoded here: the
    handler path decodes it, and reports what does not decode)."""
    if inp.coalesce is None:
        return [None] * len(parts)
    decoded: list[Any] = []
    keys: list[Any] = []
    for item, bad in parts:
        message = key = None
        if bad is None:
            try:
                message = inp.decoder.decode(item.data)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                message = None
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
            decoded[n] = _SUPERSEDED
        seen.add(key)
    return decoded


_Entry = list[tuple[str, str, bytes]]  # (subject, msg_id, payload) per output
_ENTRY: Final = msgspec.msgpack.Decoder(_Entry)
_ITEM: Final = msgspec.msgpack.Decoder(tuple[str, str, bytes])


def encode_entry(items: list[OutboxItem]) -> bytes:
    """One outbox entry holding a batch's outputs, in order."""
    return msgspec.msgpack.encode([(i.subject, i.msg_id, i.payload) for i in items])


def decode_entry(key: bytes, raw: bytes) -> list[OutboxItem]:
    """The outputs an outbox entry holds. Stores written before outputs were kept
    per batch hold one output per entry, a bare (subject, msg_id, payload)."""
    try:
        entry = _ENTRY.decode(raw)
    except msgspec.ValidationError:
        entry = [_ITEM.decode(raw)]
    return [OutboxItem(key, *output) for output in entry]


def _world_or_unknown(subject: str) -> str:
    try:
        return world_of(subject)
    except ValueError:
        return "unknown"

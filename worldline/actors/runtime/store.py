"""An actor's LMDB store: its state, the last applied stream sequence, and an outbox.

Longer than 500 lines because :class:`Store` is one idea: the single write transaction
a batch is applied in (skip, decode, handle, finish, commit, stage the outbox) and the
environment it runs in; cut in two, one transaction's steps would live in two files.

A fetched batch is applied in one write transaction that also records the last applied
stream sequence per durable and the messages to publish (the outbox). So a crash at any
point neither loses nor doubles an effect: on restart, already-applied sequences are
skipped, and outbox entries that were committed but not yet published are sent again
(their Nats-Msg-Id lets JetStream drop the duplicate).

Write transactions live entirely inside one synchronous call (run in a worker thread by
the runtime), never across an ``await``: py-lmdb binds them to their thread.

Room (the map size, growing it, no room on disk) is ``room.py``; what comes in
(deliveries, batches unpacked, dead letters) is ``deliveries.py``; an outbox entry's
encoding is ``outbox.py``. No key a handler writes may exceed LMDB's limit (511
bytes): such a message is dead-lettered with the reason, never retried.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from functools import partial
from itertools import takewhile
from operator import gt
from typing import TYPE_CHECKING, Any

import lmdb
import msgspec

from worldline.actors.runtime.deliveries import (
    SUPERSEDED,
    Delivery,
    coalesced,
    dead_letter,
    decode_payload,
    unbatched,
)
from worldline.actors.runtime.errors import InvalidInput, StoreError, StoreFull
from worldline.actors.runtime.outbox import (
    BatchResult,
    OutboxItem,
    decode_entry,
    encode_entry,
)
from worldline.actors.runtime.room import (
    MAX_MAP_SIZE,
    Gate,
    configured_map_size,
    no_room,
)
from worldline.actors.runtime.spec import Context, Input, Reader, Step, Upgrade
from worldline.protocols.messages import encode
from worldline.protocols.subjects import author_of, dlq, world_of

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from pathlib import Path

__all__ = ["Store"]

log = logging.getLogger("worldline.store")

_APPLIED = b"applied/"
# ``deferred/<durable>/<world>``: a world whose finish put work off (Step.deferred)
_DEFERRED = b"deferred/"
_OUTBOX_NEXT = b"outbox-next"


class _TxnReader:
    """A :class:`Reader` over an open LMDB transaction (sees the batch's own writes)."""

    def __init__(self, txn: Any, db: Any) -> None:
        self._txn = txn
        self._db = db

    def get(self, key: bytes) -> bytes | None:
        # bytes already: transactions are begun without ``buffers``
        value: bytes | None = self._txn.get(key, db=self._db)
        return value

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        cursor = self._txn.cursor(db=self._db)
        if not cursor.set_range(prefix):
            return iter(())
        pairs: Iterator[tuple[bytes, bytes]] = cursor.iternext()
        end = _after(prefix)
        if end is None:
            return pairs  # no key sorts after every key with this prefix
        # Cut in C at the first key past the prefix's range: (end,) > (key, value)
        # while key < end.
        return takewhile(partial(gt, (end,)), pairs)


def _after(prefix: bytes) -> bytes | None:
    """The least key above every key that starts with ``prefix`` (None: none is,
    the prefix being empty or all 0xff bytes)."""
    stem = prefix.rstrip(b"\xff")
    if not stem:
        return None
    return stem[:-1] + bytes([stem[-1] + 1])


# (world, author) by subject: a batch's messages mostly share a few subjects.
_places: dict[str, tuple[str, str]] = {}
_PLACES = 4096


class Store:
    """One actor's LMDB environment with three databases: state, meta and outbox."""

    def __init__(
        self,
        path: Path,
        *,
        actor: str,
        map_size: int | None = None,
        max_map_size: int | None = None,
        durable: bool = True,
    ) -> None:
        """Open (or create) the store at ``path``.

        Args:
            path: the store's folder.
            actor: the actor instance, for messages.
            map_size: bytes of address space to map at first (default: see
                :func:`configured_map_size`); the file grows as it fills.
            max_map_size: the ceiling the map doubles up to when full (default
                1 TiB, or ``map_size`` if larger).
            durable: flush each commit to disk before it returns (LMDB's
                ``sync``). False only for a store that is rebuilt from nothing
                when a run stops half way (``worldline replay``'s scratch
                stores): commits are flushed once, by :meth:`close`.

        Raises:
            StoreError: the folder cannot be created or the store opened, or
                ``WORLDLINE_LMDB_MAP_SIZE`` is not a size.
        """
        self.path = path
        self.actor = actor
        self.durable = durable
        self._gate = Gate()
        self._map_size = configured_map_size() if map_size is None else map_size
        self._max_map_size = max(max_map_size or MAX_MAP_SIZE, self._map_size)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"{actor}: cannot create the LMDB store folder {path}: {exc}. Check "
                "that its parent exists and is writable."
            ) from exc
        self._open()

    def _open(self) -> None:
        try:
            self._env = lmdb.open(
                str(self.path),
                map_size=self._map_size,
                max_dbs=4,
                sync=self.durable,
            )
            self._state = self._env.open_db(b"state")
            self._meta = self._env.open_db(b"meta")
            self._outbox = self._env.open_db(b"outbox")
        except (OSError, lmdb.Error) as exc:
            raise StoreError(
                f"{self.actor}: cannot open LMDB store at {self.path}: {exc}. Check "
                "that the folder is writable and that no other process of this actor "
                "uses it."
            ) from exc
        self.max_key_size = int(self._env.max_key_size())

    def close(self) -> None:
        if not self.durable:
            self._env.sync(True)  # what the commits left unflushed
        self._env.close()

    @property
    def map_size(self) -> int:
        """Bytes of address space the store maps now (grows when full)."""
        return int(self._env.info()["map_size"])

    def size_bytes(self) -> int:
        with self._gate.txn():
            info = self._env.info()
            stat = self._env.stat()
        return int(info["last_pgno"] + 1) * int(stat["psize"])

    @contextmanager
    def _begin(self, **kwargs: Any) -> Iterator[Any]:
        with self._gate.txn(), self._env.begin(**kwargs) as txn:
            yield txn

    @contextmanager
    def reader(self) -> Iterator[Reader]:
        """A consistent read-only view of the state (a read transaction)."""
        with self._begin(db=self._state) as txn:
            yield _TxnReader(txn, self._state)

    def upgrade(self, step: Upgrade) -> int:
        """Run an actor's state upgrade to its end: call ``step`` in a write
        transaction, commit what it returns, again until it returns None. Each
        step's writes commit together, so a crash mid-upgrade resumes where the
        last committed step left off. Returns the steps committed."""
        steps = 0
        while True:
            with self._begin(write=True, db=self._state) as txn:
                writes = step(_TxnReader(txn, self._state))
                if writes is None:
                    return steps
                for key, value in writes.items():
                    if value is None:
                        txn.delete(key, db=self._state)
                    else:
                        txn.put(key, value, db=self._state)
            steps += 1

    def applied_seq(self, durable: str) -> int:
        with self._begin(db=self._meta) as txn:
            raw = txn.get(_APPLIED + durable.encode(), db=self._meta)
        return 0 if raw is None else int(bytes(raw))

    def _grow(self, exc: lmdb.Error) -> None:
        """Double the map after ``MDB_MAP_FULL`` (once no transaction is open), or
        raise :class:`StoreFull` at the ceiling."""
        with self._gate.exclusive():
            size = int(self._env.info()["map_size"])
            if size >= self._max_map_size:
                raise StoreFull(
                    f"{self.actor}: the LMDB map at {self.path} is full at its "
                    f"ceiling of {size:,} bytes ({exc}); the batch is retried. Raise "
                    f"the ceiling (Store(max_map_size=...)) or free space in the store"
                ) from exc
            new = min(size * 2, self._max_map_size)
            self._env.set_mapsize(new)
            self._map_size = new
        log.warning(
            "%s: LMDB map full at %s bytes; grown to %s", self.actor, f"{size:,}",
            f"{new:,}",
        )  # fmt: skip

    def _reopen(self, exc: lmdb.Error) -> None:
        """Reopen an environment LMDB marked unusable after a failed write (a
        failed meta page write on a full disk, say), instead of failing every
        later batch until a restart."""
        log.warning("%s: reopening the LMDB store after: %s", self.actor, exc)
        with self._gate.exclusive():
            self._env.close()
            self._open()

    def apply_batch(
        self,
        inp: Input[Any],
        deliveries: list[Delivery],
        now: Any,
        *,
        publish: bool = True,
        refuse: Mapping[int, str] | None = None,
        pending: int = 0,
    ) -> BatchResult:
        """Decode, handle and commit a batch in one write transaction.

        Deliveries at or below the durable's last applied sequence are skipped (a
        redelivery after a crash between commit and ack). Input that does not decode, or
        that the handler rejects, is dead-lettered: recorded as applied, with a
        :class:`DeadLetter` in the outbox. Nothing is lost, nothing is applied twice.

        ``publish=False`` applies the state changes but stages no outputs: a standby
        replica following what its active replica has already published.
        ``refuse`` maps stream sequences to a reason: those deliveries are
        dead-lettered with it, unhandled (a message the store cannot apply).
        ``pending``: deliveries still waiting on the durable after this batch
        (``Context.pending`` for the input's finish, which may defer its work while
        it is above 0; with 0, every world deferred before is finished too).

        A full map is grown and the batch tried again, here.

        Raises:
            StoreFull: no room (full disk, or the map at its ceiling): retry later.
            StoreError: any other LMDB failure; nothing of the batch was committed.
        """
        while True:
            try:
                return self._apply_batch(
                    inp, deliveries, now, publish, refuse or {}, pending
                )
            except (lmdb.MapFullError, lmdb.MapResizedError) as exc:
                self._grow(exc)
            except lmdb.PanicError as exc:
                self._reopen(exc)
                raise StoreError(
                    f"{self.actor}: LMDB write failed at {self.path}: {exc}; the "
                    "store was reopened"
                ) from exc
            except (lmdb.Error, OSError) as exc:
                if no_room(exc):
                    raise StoreFull(
                        f"{self.actor}: no room to write the LMDB store at "
                        f"{self.path} ({exc}); the batch is retried until there is: "
                        "free or add disk space"
                    ) from exc
                raise StoreError(
                    f"{self.actor}: LMDB write failed at {self.path}: {exc}"
                ) from exc

    def _apply_batch(
        self,
        inp: Input[Any],
        deliveries: list[Delivery],
        now: Any,
        publish: bool,
        refuse: Mapping[int, str],
        pending: int,
    ) -> BatchResult:
        durable = inp.consumer.durable
        durable_key = _APPLIED + durable.encode()
        accepted: list[bool] = []
        items: list[OutboxItem] = []
        with self._begin(write=True) as txn:
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
                msg_id = f"dlq:{durable}:{d.seq}"  # the dead letter's, if any
                refused = refuse.get(d.seq) if refuse else None
                if refused is not None:
                    accepted.append(False)
                    reject(d, refused, msg_id, d.subject)
                    continue
                if d.batch:
                    ok = True
                    parts = unbatched(d)
                    decoded = coalesced(inp, parts)
                    for part, (item, bad) in enumerate(parts):
                        message = decoded[part]
                        if message is SUPERSEDED:
                            continue  # a later item of the batch replaces it
                        reason = bad or self._handle_one(
                            inp,
                            reader,
                            txn,
                            item,
                            now,
                            stage,
                            touched,
                            message,
                            pending=pending,
                        )
                        if reason is not None:
                            ok = False
                            # filed under the batch's world, not the
                            # item's claim
                            reject(item, reason, f"{msg_id}.{part}", d.subject)
                    accepted.append(ok)
                    continue
                reason = self._handle_one(
                    inp, reader, txn, d, now, stage, touched, pending=pending
                )
                if reason is None:
                    accepted.append(True)
                    continue
                accepted.append(False)
                reject(d, reason, msg_id, d.subject)
            if inp.finish is not None:
                self._finish_worlds(
                    inp, reader, txn, touched, applied, now, pending, stage
                )
            if items:
                txn.put(key, encode_entry(items), db=self._outbox)
                txn.put(_OUTBOX_NEXT, str(next_key + 1).encode(), db=self._meta)
            txn.put(durable_key, str(applied).encode(), db=self._meta)
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
        *,
        pending: int = 0,
    ) -> str | None:
        """Handle one delivery (``message``: its payload already decoded) inside the
        batch transaction; return a reject reason."""
        if message is None:
            message, undecodable = decode_payload(inp.decoder, d.data)
            if undecodable is not None:
                return undecodable
        try:
            place = _places.get(d.subject)
            if place is None:
                if len(_places) >= _PLACES:
                    _places.clear()
                place = _places[d.subject] = (world_of(d.subject), author_of(d.subject))
            ctx = Context(place[0], place[1], d.subject, d.seq, now, pending=pending)
            step = inp.handle(reader, message, ctx)
        except InvalidInput as exc:
            return f"invalid: {exc}"
        except Exception as exc:
            # A bug in a core must neither kill the actor nor lose the input.
            log.exception(
                "%s: handler failed on %s seq %d", self.actor, d.subject, d.seq
            )
            return f"internal error in {self.actor}: {exc!r}"
        too_long = self._unfit_key(step)
        if too_long is not None:
            return f"invalid: {too_long}"
        self._commit_step(txn, step, stage)
        touched[ctx.world] = ctx
        return None

    def _unfit_key(self, step: Step) -> str | None:
        """Why LMDB would refuse a key of ``step`` (deterministically: retrying the
        batch would fail forever), or None."""
        for key in step.writes:
            if not 0 < len(key) <= self.max_key_size:
                shown = key[:80].decode(errors="replace")
                return (
                    f"{self.actor} would store a key of {len(key)} bytes "
                    f"({shown!r}...), over LMDB's limit of {self.max_key_size}: "
                    "use shorter names and ids"
                )
        return None

    def _finish_worlds(
        self,
        inp: Input[Any],
        reader: _TxnReader,
        txn: Any,
        touched: dict[str, Context],
        applied: int,
        now: Any,
        pending: int,
        stage: Any,
    ) -> None:
        """Run the input's finish for every world the batch touched and every world
        whose finish deferred its work before (so a deferral ends with the backlog,
        and a world no later message touches is not left waiting)."""
        assert inp.finish is not None
        prefix = _DEFERRED + inp.consumer.durable.encode() + b"/"
        held = {
            bytes(key)[len(prefix) :].decode()
            for key in _prefixed_keys(txn, self._meta, prefix)
        }
        for world in sorted(touched.keys() | held):
            last = touched.get(world)
            if last is None:  # deferred before, nothing of it in this batch
                last = Context(world, "", "", applied, now)
            ctx = msgspec.structs.replace(last, pending=pending)
            deferred = self._finish(inp.finish, reader, txn, ctx, stage)
            key = prefix + world.encode()
            if deferred and world not in held:
                txn.put(key, b"", db=self._meta)
            elif deferred is False and world in held:
                txn.delete(key, db=self._meta)

    def has_deferred(self, inp: Input[Any]) -> bool:
        """Whether a finish of ``inp`` put work off that is not done yet."""
        prefix = _DEFERRED + inp.consumer.durable.encode() + b"/"
        with self._begin(db=self._meta) as txn:
            return next(_prefixed_keys(txn, self._meta, prefix), None) is not None

    def finish_deferred(self, inp: Input[Any], now: Any) -> BatchResult:
        """Finish, with nothing pending, every world whose finish of ``inp`` put work
        off: the durable is idle (a fetch found nothing), so the backlog is over.
        One write transaction, like a batch without deliveries.

        Raises:
            StoreFull, StoreError: as :meth:`apply_batch`.
        """
        return self.apply_batch(inp, [], now, pending=0)

    def _finish(
        self,
        finish: Callable[[Reader, Context], Step],
        reader: _TxnReader,
        txn: Any,
        ctx: Context,
        stage: Any,
    ) -> bool | None:
        """The input's once-per-batch work for one world; whether it deferred some
        (None: it failed). Its inputs are already applied: if it fails (a bug), it
        is logged and the batch commits without it."""
        try:
            step = finish(reader, ctx)
        except Exception:
            log.exception("%s: the batch's finish failed for %s", self.actor, ctx.world)
            return None
        too_long = self._unfit_key(step)
        if too_long is not None:
            log.error("%s: the batch's finish for %s: %s", self.actor, ctx.world,
                      too_long)  # fmt: skip
            return None
        self._commit_step(txn, step, stage)
        return step.deferred

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
        with self._begin(db=self._outbox) as txn:
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
        with self._begin(write=True, db=self._outbox) as txn:
            for key in dict.fromkeys(keys):
                txn.delete(key, db=self._outbox)


def _prefixed_keys(txn: Any, db: Any, prefix: bytes) -> Iterator[bytes]:
    cursor = txn.cursor(db=db)
    if not cursor.set_range(prefix):
        return
    for key in cursor.iternext(values=False):
        if not bytes(key).startswith(prefix):
            return
        yield bytes(key)


def _world_or_unknown(subject: str) -> str:
    try:
        return world_of(subject)
    except ValueError:
        return "unknown"

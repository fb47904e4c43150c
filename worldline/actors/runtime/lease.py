"""One active writer per materializer partition, hot standbys, and a lease in KV.

Every replica of a partition follows the log into its own LMDB store. Only the holder
of the partition's lease (key ``materializer.p<I>of<N>`` in bucket ``wl-leases``)
publishes what it applies (the change feed, inboxes, dead letters) and answers the
partition's requests. A standby applies the log only up to the sequences the holder
says it has published (``Lease.published``) and drops its own outputs, since the
holder already sent them: it stays seconds behind, so a takeover is quick, and it
never sends anything twice beyond the JetStream de-duplication window.

The protocol (all writes are compare-and-set on the key's revision):

- The holder renews every :data:`RENEW_EVERY` seconds. It may publish only while its
  last renewal was sent less than :data:`VALID_FOR` seconds ago (its own clock).
- A standby takes the lease over when it has seen the same revision for
  :data:`LEASE_TTL` seconds (its own clock), starting a new ``term``. Since
  ``VALID_FOR < LEASE_TTL`` and the standby can only have seen that revision after
  the holder's renewal, the old holder has stopped publishing before the new one
  starts (clocks that run at the same rate suffice; no synchronized time needed).
- A replica that finds itself named holder (a restart, or a renewal whose reply was
  lost) renews in the same term and first publishes what it committed but had not yet
  sent. A replica that takes over a term from someone else discards such leftovers:
  the previous holder published everything up to its watermark, and the new holder
  applies, and publishes, everything after its own applied sequence, which is at
  most that watermark.
- A value that does not decode (anything a client managed to write over the key,
  such as a PubAck delivered there as a reply) is junk, not a reason to stop: it is
  logged (once per revision, at most once a :data:`JUNK_LOG_EVERY` seconds, the
  lines left out counted), and taken back by compare-and-set on its revision. The
  holder whose own lease is still valid by its clock takes it back at once, in its
  term (nobody can have taken over since its last renewal); any other replica treats
  it like a lease that stopped changing, and takes it with a new term once the lease
  time has passed since the last lease it read (junk is no renewal: junk written
  again and again over a dead holder's lease does not keep the standbys waiting).
  The lease then counts the repair (``Lease.repairs``, ``Lease.repaired``), which
  ``worldline status`` shows.

:func:`decide` is the pure rule; :class:`LeaseGate` runs it against the bucket.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal

import anyio
import msgspec
import nats.errors
import nats.js.errors

from worldline.actors.runtime.bus import describe
from worldline.actors.runtime.declare import answered
from worldline.protocols.messages import LEASE_VALUE, Lease, encode
from worldline.protocols.subjects import LEASES

if TYPE_CHECKING:
    from anyio.abc import TaskStatus
    from nats.js import JetStreamContext
    from nats.js.kv import KeyValue

__all__ = [
    "LEASE_TTL",
    "RENEW_EVERY",
    "VALID_FOR",
    "Action",
    "LeaseGate",
    "Unreadable",
    "decide",
    "read_lease",
]

log = logging.getLogger("worldline.lease")

LEASE_TTL = 4.0  # seconds a standby waits on an unchanged lease before taking it
VALID_FOR = 2.5  # seconds after sending a renewal that the holder may still publish
RENEW_EVERY = 0.5  # seconds between renewals (and between a standby's looks)
JUNK_LOG_EVERY = 10.0  # seconds between warnings about junk on the lease key

Action = Literal["create", "renew", "take", "wait"]


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A lease value that does not decode: junk written over the key."""

    detail: str  # what was found (revision, size, first bytes, why), for logs


def decide(
    me: str,
    current: Lease | Unreadable | None,
    unchanged_for: float,
    ttl: float,
    *,
    valid: bool = False,
) -> Action:
    """What replica ``me`` does on seeing ``current`` unchanged for ``unchanged_for``
    seconds: create the lease, renew its own, take over a stale one, or wait.

    ``valid``: ``me`` holds the lease and its last renewal is still valid by its own
    clock. Only then is an unreadable value taken back at once (``renew``: nobody can
    have taken over since that renewal); otherwise junk is a lease that stopped
    changing, taken over after ``ttl`` like any other."""
    if current is None:
        return "create"
    if isinstance(current, Unreadable):
        if valid:
            return "renew"
        return "take" if unchanged_for >= ttl else "wait"
    if current.holder == me:
        return "renew"
    if unchanged_for >= ttl:
        return "take"
    return "wait"


Activate = Callable[[bool], Awaitable[dict[str, int]]]


class LeaseGate:
    """This replica's view of its partition's lease, kept fresh by :meth:`run`.

    Consume loops ask :attr:`active` before publishing and :meth:`follow_limit`
    while standing by; :meth:`note_published` advances the watermark the holder
    advertises.
    """

    def __init__(
        self,
        key: str,
        holder: str,
        *,
        ttl: float = LEASE_TTL,
        valid_for: float = VALID_FOR,
        renew_every: float = RENEW_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not valid_for < ttl:
            raise ValueError("a lease must expire for its holder before others")
        self.key = key
        self.holder = holder
        self.ttl = ttl
        self.valid_for = valid_for
        self.renew_every = renew_every
        self._clock = clock
        self._current: Lease | Unreadable | None = None
        self._known: Lease | None = None  # the last lease that was readable
        self._revision = 0
        self._seen_at = 0.0
        self._valid_until = 0.0
        self._holding = False  # activated and not demoted since
        self._stranded = False  # a batch committed outputs it could not send
        self._published: dict[str, int] = {}
        # per warning about junk: when it was last logged, how many since were not
        self._junk_logged: dict[str, tuple[float, int]] = {}
        self._changed = anyio.Event()
        self.term = 0

    @property
    def active(self) -> bool:
        """May this replica publish now?"""
        return self._holding and self._clock() < self._valid_until

    @property
    def seen_term(self) -> int:
        """The term of the last readable lease seen (0 before any): one more at
        each takeover, whoever took over."""
        return 0 if self._known is None else self._known.term

    def follow_limit(self, stream: str) -> int:
        """The last sequence of ``stream`` a standby may apply: what the holder has
        published. Zero when there is no other holder to follow."""
        # Over junk, the last readable lease: its holder published that much.
        current = self._known
        if current is None or current.holder == self.holder:
            return 0
        return current.published.get(stream, 0)

    def strand(self) -> None:
        """A batch committed while the lease had lapsed: its outputs wait in the
        outbox until the next renewal in this term sends them (or a new holder's
        term makes them obsolete)."""
        self._stranded = True

    def note_published(self, stream: str, seq: int) -> None:
        """The outputs of ``stream`` up to ``seq`` are published (holder only)."""
        if seq > self._published.get(stream, 0):
            self._published[stream] = seq

    async def wait_changed(self, at_most: float) -> None:
        """Sleep until the lease or this replica's role changes (or ``at_most`` s)."""
        with anyio.move_on_after(at_most):
            await self._changed.wait()

    async def wait_active(self, want: bool) -> None:
        """Return once :attr:`active` equals ``want``."""
        while self.active != want:
            await self.wait_changed(self.renew_every)

    def _junk_log(self, now: float, message: str, *args: object) -> None:
        """A warning about junk on the key, at most one of each ``message`` a
        :data:`JUNK_LOG_EVERY` seconds (junk written again and again is counted,
        not logged each time)."""
        last, quiet = self._junk_logged.get(message, (-JUNK_LOG_EVERY, 0))
        if now - last < JUNK_LOG_EVERY:
            self._junk_logged[message] = (last, quiet + 1)
            return
        more = f" ({quiet} more such lines not logged)" if quiet else ""
        log.warning(message + more, *args)
        self._junk_logged[message] = (now, 0)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def run(
        self,
        js: JetStreamContext,
        activate: Activate,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Hold, renew or watch the lease until cancelled; report started after the
        first look (so a lone replica is already active when its actor reports
        ready).

        ``activate(same_term)`` runs before this replica first publishes in a term:
        it settles leftovers (publish them in the same term, drop them otherwise) and
        returns the watermark per stream that the new holder starts from.
        """
        # Inside the start-up retry: a cluster may still be electing its leader.
        kv = await answered(
            f"{self.holder}: lease bucket {LEASES.bucket}",
            partial(js.key_value, LEASES.bucket),
        )
        started = False
        while True:
            try:
                await self._tick(kv, activate)
            except (nats.errors.Error, TimeoutError, OSError, ValueError) as exc:
                log.warning("%s: lease %s: %s", self.holder, self.key, describe(exc))
            if self._holding and self._clock() >= self._valid_until:
                log.warning(
                    "%s: lease %s not renewed in time; pausing writes",
                    self.holder,
                    self.key,
                )
                self._holding = False
                self._notify()
            if not started:
                started = True
                task_status.started()
            await anyio.sleep(self.renew_every)

    async def _tick(self, kv: KeyValue, activate: Activate) -> None:
        current, revision = await _read(kv, self.key)
        now = self._clock()
        valid = self.active
        if revision != self._revision or current != self._current:
            if isinstance(current, Unreadable):  # once per revision, not per look
                self._junk_log(
                    now,
                    "%s: lease %s is unreadable (%s); %s",
                    self.holder,
                    self.key,
                    current.detail,
                    "taking it back now"
                    if valid
                    else f"taking it over if it stays so for {self.ttl:g}s",
                )
            else:
                self._known = current
            # Junk is no renewal: the lease time keeps running from the last lease
            # this replica read (else junk written every few seconds over a dead
            # holder's lease would keep every standby waiting forever).
            if not isinstance(current, Unreadable) or self._known is None:
                self._seen_at = now
            self._revision, self._current = revision, current
            self._notify()
        action = decide(
            self.holder, current, now - self._seen_at, self.ttl, valid=valid
        )
        if action == "wait":
            if self._holding:  # someone else holds it now
                log.warning(
                    "%s: lease %s taken by %s; standing by",
                    self.holder,
                    self.key,
                    current.holder if isinstance(current, Lease) else "?",
                )
                self._holding = False
                self._notify()
            return
        same_term = action == "renew"
        known = self._known
        if action == "create":
            term = 1
        elif same_term:
            term = current.term if isinstance(current, Lease) else self.term
        else:
            term = max(known.term if known is not None else 0, self.term) + 1
        repairs, repaired = (
            (0, "") if known is None else (known.repairs, known.repaired)
        )
        if isinstance(current, Unreadable):
            repairs, repaired = repairs + 1, current.detail[:512]
        # The advertised watermark may lag what was published (a standby then
        # follows a little less far), never lead it.
        lease = Lease(
            holder=self.holder,
            term=term,
            published=dict(self._published),
            repairs=repairs,
            repaired=repaired,
        )
        sent = self._clock()
        try:
            if action == "create":
                revision = await kv.create(self.key, encode(lease))
            else:
                revision = await kv.update(self.key, encode(lease), last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return  # someone wrote first; the next look sees who
        if isinstance(current, Unreadable):
            self._junk_log(
                sent,
                "%s: lease %s taken back from an unreadable value (term %d)",
                self.holder,
                self.key,
                term,
            )
        self._current, self._known = lease, lease
        self._revision, self._seen_at = revision, sent
        self._valid_until = sent + self.valid_for
        if self._holding and not self._stranded:
            return
        # Holding from now on (first time, or again after a pause): settle what was
        # committed but not sent before anything else is published.
        self._stranded = False
        self._published = dict(await activate(same_term))
        log.info("%s: holds lease %s (term %d)", self.holder, self.key, term)
        self.term = term
        self._holding = True
        self._notify()


async def _read(kv: KeyValue, key: str) -> tuple[Lease | Unreadable | None, int]:
    try:
        entry = await kv.get(key)
    except nats.js.errors.NotFoundError:  # never created, or deleted by an operator
        return None, 0
    revision = entry.revision or 0
    if entry.value is None:
        return None, revision
    return read_lease(entry.value, revision), revision


def read_lease(value: bytes, revision: int) -> Lease | Unreadable:
    """The lease ``value`` (at ``revision``) holds, or what makes it junk."""
    try:
        return LEASE_VALUE.decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        return Unreadable(
            f"revision {revision} of {LEASES.bucket} holds {len(value)} bytes "
            f"that are no lease ({value[:48]!r}: {exc})"[:512]
        )

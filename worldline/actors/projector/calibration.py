"""The world's calibration record, kept by the projector from the change feed, and
the answer to ``calibration`` (docs/belief-math.md, "Calibration").

A belief resolved true or false arrives as a ``BeliefChanged`` whose belief carries
``outcome`` and ``closed_confidence`` (the confidence fusion read just before the
close). The projector keeps one :class:`Entry` per such belief under
``calib/<world>/<belief id>``, with the sources, evidence kinds and agents behind it,
and the record's size and an order-free digest under ``calcount/<world>``: the same
resolutions give the same bytes in any order of arrival. From :data:`MIN_RECORDS`
entries on, reads apply a recalibration (a
:class:`~worldline.actors.belief_model.calibration.Calibrator`) fitted on the record:
a pure function of the entries, fitted when a batch changes the record (:func:`refit`,
once per batch) and kept under ``calfit/<world>`` with the (size, digest) it was
fitted on, so a read never fits. The math is
:mod:`worldline.actors.belief_model.calibration`'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import defaultdict
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.belief_model import calibration as math
from worldline.actors.runtime.spec import Step
from worldline.protocols.calibration import FORECAST_SLOT
from worldline.protocols.messages import (
    CalibrationBin,
    CalibrationGroup,
    CalibrationReply,
    encode,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from worldline.actors.projector.worldview import Scene
    from worldline.actors.runtime.spec import Context, Reader
    from worldline.protocols.messages import BeliefChanged, GetCalibration

__all__ = [
    "MIN_RECORDS",
    "Entry",
    "calibrated",
    "calibrator",
    "entry_key",
    "record_writes",
    "refit",
    "reply",
]

MIN_RECORDS: Final = math.MIN_RECORDS
FIT_LIMIT: Final = 2000  # entries a fit reads at most (a fit of 2,000 takes ~0.1 s)
_FITS_KEPT: Final = 64  # fits kept in memory, by (world, record size, digest)
_FITS: dict[tuple[str, int, int], math.Calibrator] = {}
DIRECTED: Final = frozenset({"supports", "refutes"})


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One resolved belief in the record: its confidence just before, the outcome,
    and who and what stood behind it. ``sources`` and ``agents`` map each name to
    (items the outcome bore out, directed items): a supporting item of a belief
    resolved true agrees, a refuting one disagrees; neutral items count for
    neither."""

    belief_id: str
    confidence: float
    outcome: bool
    forecast: bool = False  # an outcome of a recorded forecast
    kinds: tuple[str, ...] = ()
    sources: dict[str, tuple[int, int]] = msgspec.field(default_factory=dict)
    agents: dict[str, tuple[int, int]] = msgspec.field(default_factory=dict)


class Fit(msgspec.Struct, frozen=True, kw_only=True):
    """The recalibration fitted on the record of (``count`` entries, ``digest``)."""

    count: int
    digest: int
    calibrator: math.Calibrator


_ENTRY: Final = msgspec.msgpack.Decoder(Entry)
_FIT: Final = msgspec.msgpack.Decoder(Fit)
_COUNT: Final = msgspec.msgpack.Decoder(tuple[int, int])
_IDENTITY: Final = math.Calibrator(method="identity")


def entry_key(world: str, belief_id: str) -> bytes:
    return f"calib/{world}/{belief_id}".encode()


def _count_key(world: str) -> bytes:
    """(entries on record, their digest)."""
    return f"calcount/{world}".encode()


def _fit_key(world: str) -> bytes:
    return f"calfit/{world}".encode()


def entry_of(change: BeliefChanged) -> Entry | None:
    """The record ``change`` adds, or None when its belief is not resolved true or
    false."""
    belief = change.belief
    if belief.outcome is None or belief.closed_confidence is None:
        return None
    sources: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    agents: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    kinds: set[str] = set()
    for item in change.evidence:
        kinds.add(item.kind)
        if item.direction not in DIRECTED:
            continue
        agreed = (item.direction == "supports") == belief.outcome
        for table, name in (
            (sources, item.voice or item.source),
            (agents, item.author),
        ):
            if name:
                table[name][0] += int(agreed)
                table[name][1] += 1
    agents.setdefault(belief.author, [0, 0])  # who added it, with or without items
    return Entry(
        belief_id=belief.id,
        confidence=belief.closed_confidence,
        outcome=belief.outcome,
        forecast=belief.slot.startswith(FORECAST_SLOT),
        kinds=tuple(sorted(kinds)),
        sources={k: (v[0], v[1]) for k, v in sorted(sources.items())},
        agents={k: (v[0], v[1]) for k, v in sorted(agents.items())},
    )


def record_writes(
    reader: Reader, world: str, change: BeliefChanged
) -> dict[bytes, bytes | None]:
    """The writes that keep ``change``'s resolution on record: its entry, and the
    record's size and digest (an XOR of the entries' hashes, so the same entries
    give the same digest in any order of arrival)."""
    entry = entry_of(change)
    if entry is None:
        return {}
    key = entry_key(world, entry.belief_id)
    payload = encode(entry)
    held = reader.get(key)
    if held == payload:
        return {}
    raw = reader.get(_count_key(world))
    count, digest = (0, 0) if raw is None else _COUNT.decode(raw)
    if held is not None:  # restated: its old hash leaves the digest
        count, digest = count - 1, digest ^ _hash(held)
    count, digest = count + 1, digest ^ _hash(payload)
    return {key: payload, _count_key(world): msgspec.msgpack.encode((count, digest))}


def _hash(payload: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "big")


def refit(reader: Reader, ctx: Context) -> Step:
    """Once per batch (the projector's ``finish``): when the batch changed the
    record of ``ctx.world`` and it holds :data:`MIN_RECORDS` entries or more, the
    fit on it, kept with the (size, digest) it was fitted on. A pure function of
    the record, so batches and arrival orders leave the same bytes."""
    raw = reader.get(_count_key(ctx.world))
    if raw is None:
        return Step()
    count, digest = _COUNT.decode(raw)
    if count < MIN_RECORDS:
        return Step()
    held = reader.get(_fit_key(ctx.world))
    if held is not None:
        kept = _FIT.decode(held)
        if (kept.count, kept.digest) == (count, digest):
            return Step()
    fitted = Fit(count=count, digest=digest, calibrator=_fitted(reader, ctx.world))
    return Step(writes={_fit_key(ctx.world): encode(fitted)})


def calibrator(reader: Reader, world: str) -> math.Calibrator:
    """The recalibration the world's reads apply: identity until :data:`MIN_RECORDS`
    resolutions are on record, then the fit on them that :func:`refit` keeps. A
    store written before fits were kept (one key, ``calfit/``) is fitted here, once
    per change of the record: kept in memory by (world, size, digest)."""
    held = reader.get(_fit_key(world))
    if held is not None:
        return _FIT.decode(held).calibrator
    raw = reader.get(_count_key(world))
    if raw is None:
        return _IDENTITY
    count, digest = _COUNT.decode(raw)
    if count < MIN_RECORDS:
        return _IDENTITY
    cache_key = (world, count, digest)
    fitted = _FITS.get(cache_key)
    if fitted is None:
        fitted = _fitted(reader, world)
        if len(_FITS) >= _FITS_KEPT:
            _FITS.pop(next(iter(_FITS)))
        _FITS[cache_key] = fitted
    return fitted


def _fitted(reader: Reader, world: str) -> math.Calibrator:
    """The fit on at most :data:`FIT_LIMIT` entries, those whose belief ids hash
    lowest: a sample no arrival order changes."""
    entries = sorted(
        _entries(reader, world),
        key=lambda e: hashlib.blake2b(e.belief_id.encode()).digest(),
    )
    return math.fit([_record(e) for e in entries[:FIT_LIMIT]])


def calibrated(scene: Scene, fitted: math.Calibrator) -> Scene:
    """``scene`` with each belief's confidence (and effective confidence) mapped
    through ``fitted``: monotone, so the order of what it shows is kept."""

    def mapped(p: float | None) -> float | None:
        return None if p is None else math.apply(fitted, p)

    shown = [
        msgspec.structs.replace(
            b,
            confidence=mapped(b.confidence),
            effective_confidence=mapped(b.effective_confidence),
        )
        for b in scene.beliefs
    ]
    return dataclasses.replace(scene, beliefs=shown)


def _entries(reader: Reader, world: str) -> list[Entry]:
    return [_ENTRY.decode(raw) for _, raw in reader.scan(entry_key(world, ""))]


def _record(entry: Entry) -> math.Record:
    return math.Record(confidence=entry.confidence, outcome=entry.outcome)


def reply(reader: Reader, world: str, request: GetCalibration) -> CalibrationReply:
    """The world's calibration: the whole record, then by source, evidence kind and
    agent (each group's largest first, ``request.limit`` at most)."""
    entries = _entries(reader, world)
    by_source: dict[str, list[Entry]] = defaultdict(list)
    by_kind: dict[str, list[Entry]] = defaultdict(list)
    by_agent: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        for name in entry.sources:
            by_source[name].append(entry)
        for kind in entry.kinds:
            by_kind[kind].append(entry)
        for name in entry.agents:
            by_agent[name].append(entry)
    fit = calibrator(reader, world)
    forecasts = [e for e in entries if e.forecast]

    def groups(
        table: Mapping[str, list[Entry]], votes: str | None
    ) -> tuple[CalibrationGroup, ...]:
        ranked = sorted(table.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        return tuple(
            _group(name, members, request.bins, votes)
            for name, members in ranked[: request.limit]
        )

    return CalibrationReply(
        world=_group("world", entries, request.bins, None),
        by_source=groups(by_source, "sources"),
        by_kind=groups(by_kind, None),
        by_agent=groups(by_agent, "agents"),
        forecasts=_group("forecasts", forecasts, request.bins, None)
        if forecasts
        else None,
        method=fit.method,
        fitted_on=fit.records,
        min_records=MIN_RECORDS,
    )


def _group(
    name: str, entries: Iterable[Entry], bins: int, votes: str | None
) -> CalibrationGroup:
    entries = list(entries)
    records = [_record(e) for e in entries]
    report = math.report(records, bins)
    agreement: float | None = None
    if votes is not None:
        agreed = directed = 0
        for entry in entries:
            a, d = getattr(entry, votes).get(name, (0, 0))
            agreed, directed = agreed + a, directed + d
        agreement = agreed / directed if directed else None
    n = len(records)
    return CalibrationGroup(
        name=name,
        count=n,
        brier=report.brier,
        ece=report.ece,
        mean_confidence=sum(r.confidence for r in records) / n if n else 0.0,
        frequency=sum(r.outcome for r in records) / n if n else 0.0,
        bins=tuple(
            CalibrationBin(
                lo=b.lo,
                hi=b.hi,
                count=b.count,
                mean_confidence=b.mean_confidence,
                frequency=b.frequency,
            )
            for b in report.bins
        ),
        agreement=agreement,
    )

"""Live and replay read one hostile log alike, as a property (issue 23).

The live side is the consume loop's path without the bus: each log entry (subject,
bytes, ``Wl-Batch`` header as the log holds it) becomes a delivery through
``deliveries.delivery`` and is applied by fusion's and the materializer's stores in
batches of random sizes, fusion's posteriors routed to the materializer. The replay
side is ``worldline export`` then ``worldline replay --from``: each entry made an
export line by ``sdk.export.export_record``, written as JSON, read back by
``read_export`` and applied by ``replay``. The two hashes must be equal, whatever the
log holds: valid ops, ops under a batch header (any value), a batch of ops, forged
authors, truncated msgpack, random bytes, a PubAck's JSON, an op with an offset time
and a field nobody knows, a NaN in a field value.

Before the fix (replay ignored headers and rebuilt ops from their decoded form) the
first op under a batch header made the two differ. The long run is
``WORLDLINE_REPLAY_EXAMPLES=500 python -m pytest
tests/reliability/test_replay_hostile.py -s``.
"""

from __future__ import annotations

import itertools
import math
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta, timezone
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reliability.test_replay_property import AGENTS, NOW, T0, WORLD, _op, _record
from worldline.actors.fusion.service import spec as fusion_spec
from worldline.actors.materializer.service import spec as materializer_spec
from worldline.actors.runtime.deliveries import Delivery, delivery
from worldline.actors.runtime.memory import state_hash
from worldline.actors.runtime.store import Store
from worldline.ops.replay import read_export, replay
from worldline.protocols.messages import DeadLetter, encode, encode_batch
from worldline.protocols.subjects import DERIVED_CHANNEL, channel_of, ops
from worldline.sdk.export import RawRecord, export_record

EXAMPLES = int(os.environ.get("WORLDLINE_REPLAY_EXAMPLES", "30"))


@dataclass(frozen=True)
class Entry:
    """One message of the op log as the server holds it."""

    kind: str  # what the generator made (for the tally and failure reports)
    subject: str
    data: bytes
    batch: str | None = None  # its Wl-Batch header


HEADERS = st.sampled_from(["2", "1", "0", "x", "", "  3 "])


@st.composite
def _entry(draw: st.DrawFn, seq: int) -> Entry:
    kind_of_op, fields = draw(_op())
    author = draw(st.sampled_from(AGENTS))
    sender = draw(st.sampled_from([author, author, author, *AGENTS]))
    at = T0 + timedelta(minutes=draw(st.integers(0, 24 * 60)))
    record = _record(seq, author, sender, at, kind_of_op, fields)
    subject, data = record.subject, encode(record.op)
    kind = draw(
        st.sampled_from(
            ["op"] * 6
            + ["batch-header", "batch-of-ops", "truncated", "junk", "puback"]
            + ["offset", "nan"]
        )
    )
    match kind:
        case "batch-header":  # a valid op, published with a batch header
            return Entry(kind, subject, data, draw(HEADERS))
        case "batch-of-ops":  # a well-formed batch of ops: ops never travel so
            return Entry(kind, subject, encode_batch([(subject, data)]), "1")
        case "truncated":
            cut = draw(st.integers(0, max(0, len(data) - 1)))
            return Entry(kind, subject, data[:cut])
        case "junk":
            return Entry(kind, subject, draw(st.binary(max_size=64)))
        case "puback":
            return Entry(kind, subject, b'{"stream":"WL_OPS","seq":%d}' % seq)
        case "offset":  # another client's encoding: bytes the op cannot rebuild
            body = msgspec.to_builtins(record.op)
            offset = timezone(timedelta(hours=draw(st.integers(-12, 12))))
            body["at"] = at.astimezone(offset).isoformat()
            body["x_unknown"] = {"n": draw(st.integers(-(2**63), 2**63))}
            return Entry(kind, subject, msgspec.msgpack.encode(body))
        case "nan":  # a field value JSON cannot hold, set by the admin
            fields = {"entity": "project:p1", "field": "notes", "value": math.nan}
            nan = _record(seq, "ada", "ada", at, "set_field", fields)
            return Entry(kind, nan.subject, encode(nan.op))
    return Entry(kind, subject, data)


@st.composite
def hostile_logs(draw: st.DrawFn) -> tuple[list[Entry], list[int]]:
    """The declaration, then a hostile mix; and the live batch sizes."""
    declare = _record(1, "ada", "ada", T0, "declare", {})
    entries = [Entry("op", declare.subject, encode(declare.op))]
    count = draw(st.integers(8, 50))
    entries += [draw(_entry(seq)) for seq in range(2, count + 2)]
    cuts = draw(st.sets(st.integers(1, len(entries) - 1)))
    bounds = [0, *sorted(cuts), len(entries)]
    return entries, [b - a for a, b in itertools.pairwise(bounds)]


def _live(
    entries: list[Entry], sizes: list[int], data: Path, *, secured: bool = False
) -> tuple[str, int]:
    """The hash the live actors reach (on a bus that authenticates authors, with
    ``secured``), and how many entries they dead-lettered."""
    fusion_input = fusion_spec(secured=secured).inputs[0]
    ops_input, posterior_input = materializer_spec(secured=secured).inputs
    fusion = Store(data / "fusion", actor="fusion")
    materializer = Store(data / "materializer", actor="materializer")
    derived_seq = letters = 0
    try:
        start = 0
        for size in sizes:
            batch = [
                delivery(seq, e.subject, e.data, e.batch)
                for seq, e in enumerate(entries[start : start + size], start + 1)
            ]
            start += size
            fused = fusion.apply_batch(fusion_input, batch, NOW)
            applied = materializer.apply_batch(ops_input, batch, NOW)
            letters += applied.accepted.count(False)
            posteriors = []
            for item in fused.outbox:
                if channel_of(item.subject) == DERIVED_CHANNEL:
                    derived_seq += 1
                    posteriors.append(Delivery(derived_seq, item.subject, item.payload))
            outboxes = [fused.outbox, applied.outbox]
            if posteriors:
                outboxes.append(
                    materializer.apply_batch(posterior_input, posteriors, NOW).outbox
                )
            for item in itertools.chain(*outboxes):
                if channel_of(item.subject) == "dlq":
                    letter = msgspec.msgpack.decode(item.payload, type=DeadLetter)
                    assert not letter.reason.startswith("internal error"), letter
            fusion.clear_outbox([i.key for i in fused.outbox])
            materializer.clear_outbox([i.key for o in outboxes[1:] for i in o])
        with materializer.reader() as reader:
            return state_hash(reader, world=WORLD), letters
    finally:
        fusion.close()
        materializer.close()


def _replayed(
    entries: list[Entry], data: Path, *, secured: bool = False
) -> tuple[str, int]:
    """The hash ``worldline replay --from`` reaches from an export of the log."""
    lines = [
        msgspec.json.encode(export_record(seq, e.subject, e.data, e.batch))
        for seq, e in enumerate(entries, 1)
    ]
    records = read_export(lines)
    result = replay(records, data, WORLD, secured=secured)
    assert result.ops == len(entries)
    return result.hash, sum(isinstance(r, RawRecord) for r in records)


def test_live_and_replay_read_a_hostile_log_alike() -> None:
    tally: Counter[str] = Counter()

    @settings(
        database=None,
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(hostile_logs())
    def check(log: tuple[list[Entry], list[int]]) -> None:
        entries, sizes = log
        with tempfile.TemporaryDirectory(prefix="wl-replay-hostile-") as tmp:
            live, letters = _live(entries, sizes, Path(tmp) / "live")
            replayed, raw = _replayed(entries, Path(tmp) / "replayed")
        if live != replayed:
            print(f"\nbatch sizes {sizes}")
            for seq, e in enumerate(entries, 1):
                print(f"{seq:3d} {e.kind:12s} {e.subject} {e.batch!r} {e.data[:60]!r}")
        assert live == replayed
        tally["logs"] += 1
        tally["entries"] += len(entries)
        tally["dead-lettered"] += letters
        tally["raw"] += raw
        tally.update(e.kind for e in entries)

    check()
    print(
        f"\nhostile replay property: {tally['logs']} logs, {tally['entries']} entries "
        f"({tally['op']} ops, {tally['batch-header']} under a batch header, "
        f"{tally['batch-of-ops']} batches of ops, {tally['truncated']} truncated, "
        f"{tally['junk']} junk, {tally['puback']} PubAcks, {tally['offset']} offset "
        f"times, {tally['nan']} NaNs); the materializer dead-lettered "
        f"{tally['dead-lettered']}, the export kept {tally['raw']} as bytes; live "
        "== replay every time"
    )


def test_an_op_under_a_batch_header_is_dead_lettered_by_both() -> None:
    """The attack of issue 23, alone: an AddBelief published with ``Wl-Batch: 2``."""
    declare = _record(1, "ada", "ada", T0, "declare", {})
    fields = {"belief_id": "b1", "text": "Pilots convert", "type": "claim"}
    add = _record(2, "ada", "ada", T0, "add_belief", fields)
    entries = [
        Entry("op", declare.subject, encode(declare.op)),
        Entry("batch-header", ops(WORLD, "ada"), encode(add.op), "2"),
    ]
    with tempfile.TemporaryDirectory(prefix="wl-replay-hostile-") as tmp:
        live, letters = _live(entries, [2], Path(tmp) / "live")
        replayed, raw = _replayed(entries, Path(tmp) / "replayed")
        clean, _ = _live(entries[:1], [1], Path(tmp) / "clean")
    assert letters == 1
    assert raw == 1
    assert live == replayed == clean  # as if the op had never been published


def test_replay_of_a_secured_bus_refuses_the_first_declarations_it_refused() -> None:
    """On a bus that authenticates authors only the operator declares a world first:
    ada's declaration was refused live, and ``replay(secured=True)`` (what ``worldline
    replay --creds`` does) refuses it too; read as an open bus's log it is accepted."""
    declare = _record(1, "ada", "ada", T0, "declare", {})
    fields = {"entity": "project:p1", "field": "phase", "value": "sla"}
    write = _record(2, "ada", "ada", T0, "set_field", fields)
    entries = [
        Entry("op", declare.subject, encode(declare.op)),
        Entry("op", write.subject, encode(write.op)),
    ]
    with tempfile.TemporaryDirectory(prefix="wl-replay-secured-") as tmp:
        live, _ = _live(entries, [2], Path(tmp) / "live", secured=True)
        replayed, _ = _replayed(entries, Path(tmp) / "replayed", secured=True)
        opened, _ = _replayed(entries, Path(tmp) / "open")
    assert live == replayed
    assert opened != live

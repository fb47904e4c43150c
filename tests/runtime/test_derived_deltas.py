"""Posteriors carry what changed (issue 18, part 4): fusion's ``PosteriorUpdate``
names the evidence its op added (none for a trust change or a close) and the
materializer merges it into what it holds; a posterior from before (the whole
``evidence`` list, still in ``WL_DERIVED``) applies as it did. The materializer then
holds exactly fusion's evidence, so a replay hashes as before, and a trust burst costs
the derived stream bytes per belief touched, not per evidence item those beliefs
hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import msgspec
import pytest

from worldline.actors.fusion import core as fusion
from worldline.actors.materializer import core as materializer
from worldline.actors.runtime.errors import InvalidInput
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.actors.runtime.store import Store
from worldline.ops.replay import replay
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import (
    FUSION_INBOX,
    MATERIALIZER_INBOX,
    AddBelief,
    AddEvidence,
    BeliefChanged,
    CloseBelief,
    OpsInbox,
    PosteriorUpdate,
    SetTrust,
    encode,
)
from worldline.protocols.subjects import derived, ops
from worldline.sdk.export import ExportRecord

if TYPE_CHECKING:
    from pathlib import Path

W: Final = "w1"
AT: Final = datetime(2026, 1, 1, tzinfo=UTC)
_CHANGED = msgspec.msgpack.Decoder(BeliefChanged)


def item(belief: int, n: int, source: str | None = None) -> Evidence:
    return Evidence(
        id=f"ev-{belief}-{n:04d}",
        belief_id=f"b-{belief}",
        direction="refutes" if n % 3 == 0 else "supports",
        kind="citation",
        source=source or f"src-{n}",
        observed_at=AT + timedelta(minutes=n),
        text=f"listing {n} of book {belief}",
        author="ada",
    )


def add(belief: int) -> AddBelief:
    return AddBelief(
        op_id=f"op-add-{belief}",
        author="ada",
        at=AT,
        belief_id=f"b-{belief}",
        text=f"Book {belief} is by author {belief % 7}.",
        type="claim",
    )


def cite(e: Evidence) -> AddEvidence:
    return AddEvidence(op_id=f"op-{e.id}", author="ada", at=AT, evidence=e)


def trust(source: str, value: float, n: int = 0) -> SetTrust:
    return SetTrust(
        # The operator sets trust: any agent but it (and an admin) may only lower
        # its own (docs/crew.md, "Sources and trust").
        op_id=f"op-trust-{source}-{n}",
        author="operator",
        at=AT,
        source=source,
        trust=value,
    )


def log(beliefs: int, items: int) -> list[OpsInbox]:
    """Each belief, cited ``items`` times by distinct sources plus once by ``shared``;
    then trust changes on ``shared`` and on one source, and a close."""
    out: list[OpsInbox] = []
    for b in range(beliefs):
        out.append(add(b))
        out += [cite(item(b, n)) for n in range(items)]
        out.append(cite(item(b, items, source="shared")))
    out += [trust("shared", 0.3), trust("src-1", 2.0), trust("shared", 1.5, 1)]
    out.append(CloseBelief(op_id="op-close", author="ada", at=AT, belief_id="b-0",
                           how="retracted", reason="wrong edition"))  # fmt: skip
    return out


def fuse(
    oplog: list[OpsInbox], memory: MemoryState | None = None, first: int = 1
) -> tuple[MemoryState, list[PosteriorUpdate]]:
    """Run the fusion core over ``oplog`` (sequences from ``first``); its posteriors,
    each encoded and decoded as the materializer's inbox reads it."""
    memory = MemoryState() if memory is None else memory
    updates: list[PosteriorUpdate] = []
    for seq, op in enumerate(oplog, start=first):
        ctx = Context(world=W, author=op.author, subject=ops(W, op.author), seq=seq,
                      now=AT)  # fmt: skip
        step = fusion.handle(memory, FUSION_INBOX.decode(encode(op)), ctx)
        for out in memory.apply(step):
            if isinstance(out.message, PosteriorUpdate):
                decoded = MATERIALIZER_INBOX.decode(encode(out.message))
                assert isinstance(decoded, PosteriorUpdate)
                updates.append(decoded)
    return memory, updates


def materialize(
    updates: list[PosteriorUpdate], memory: MemoryState | None = None
) -> MemoryState:
    memory = MemoryState() if memory is None else memory
    subject = derived(W, "posterior", "0")
    for n, update in enumerate(updates, start=1):
        ctx = Context(world=W, author="fusion", subject=subject, seq=n, now=AT)
        assert isinstance(update, PosteriorUpdate)
        memory.apply(materializer.handle(memory, update, ctx))
    return memory


def whole(fused: MemoryState, update: PosteriorUpdate) -> PosteriorUpdate:
    """``update`` as fusion published it before: with the belief's whole evidence
    list (fusion's, which has not changed since this update unless a later one
    added to it: this is only used on the last update of each belief)."""
    raw = fused.get(fusion.belief_key(W, update.belief.id))
    assert raw is not None
    evidence = fusion.decode_fused(raw).evidence
    return PosteriorUpdate(belief=update.belief, cause=update.cause,
                           cause_seq=update.cause_seq, evidence=evidence,
                           trust=update.trust)  # fmt: skip


def held(memory: MemoryState, belief: int) -> BeliefChanged:
    raw = memory.get(materializer.belief_key(W, f"b-{belief}"))
    assert raw is not None
    return _CHANGED.decode(raw)


def test_the_materializer_merges_what_each_posterior_added_into_fusions_list() -> None:
    oplog = log(beliefs=3, items=40)
    fused, updates = fuse(oplog)
    assert all(u.delta and not u.evidence for u in updates)
    assert [len(u.added) for u in updates if u.cause.startswith("op-ev-")] == [1] * (
        3 * 41
    )
    assert all(not u.added for u in updates if not u.cause.startswith("op-ev-"))
    state = materialize(updates)
    for b in range(3):
        raw = fused.get(fusion.belief_key(W, f"b-{b}"))
        assert raw is not None
        mine = fusion.decode_fused(raw)
        record = held(state, b)
        assert record.evidence == mine.evidence  # each with its recorded_seq
        assert len(record.evidence) == record.belief.evidence_count == 41
        assert record.trust == {"shared": 1.5, "src-1": 2.0}
    assert held(state, 0).belief.status == "retracted"

    # The same records as whole-list posteriors (what fusion sent before) make.
    last = {u.belief.id: u for u in updates}
    before = materialize([whole(fused, u) for u in last.values()])
    assert before.data == state.data


def test_posteriors_from_before_still_apply_and_deltas_build_on_them() -> None:
    """A stream written before the change holds whole-list posteriors: they decode and
    apply as they did, and the deltas fusion sends now build on them."""
    first = log(beliefs=2, items=5)[:-4]  # adds and citations, no trust, no close
    fused, updates = fuse(first)
    old = [whole(fused, u) for u in {u.belief.id: u for u in updates}.values()]
    wire = [msgspec.msgpack.decode(encode(u), type=PosteriorUpdate) for u in old]
    assert all(not u.delta and u.evidence for u in wire)
    state = materialize(wire)
    more: list[OpsInbox] = [cite(item(0, 99)), trust("src-2", 0.1)]
    fused, later = fuse(more, fused, first=len(first) + 1)
    state = materialize(later, state)
    assert (
        held(state, 0).evidence
        == fusion.decode_fused(fused.get(fusion.belief_key(W, "b-0")) or b"").evidence
    )
    assert len(held(state, 0).evidence) == 7
    assert held(state, 1).trust == {"src-2": 0.1}


def test_a_delta_whose_predecessor_is_missing_is_refused_with_the_fix() -> None:
    _, updates = fuse(log(beliefs=1, items=3)[:-4])
    state = materialize(updates[:2])  # the add and the first citation only
    with pytest.raises(InvalidInput, match=r"missing here.*`worldline replay`"):
        materialize(updates[3:], state)
    bad = {"kind": "derived.posterior.v1", "belief": msgspec.to_builtins(
        updates[1].belief), "cause": "op-x", "cause_seq": 2, "delta": True,
        "evidence": [msgspec.to_builtins(updates[1].added[0])]}  # fmt: skip
    with pytest.raises(msgspec.ValidationError, match="`added`"):
        MATERIALIZER_INBOX.decode(msgspec.msgpack.encode(bad))


def test_replay_rebuilds_fusions_evidence_in_the_materializer(tmp_path: Path) -> None:
    """``worldline replay`` (fusion's committed posteriors into the materializer, in
    batches) holds each belief with fusion's whole evidence list: the records, so the
    hash, whole-list posteriors gave."""
    oplog = log(beliefs=4, items=30)
    records = [
        ExportRecord(seq=seq, subject=ops(W, op.author), op=op)
        for seq, op in enumerate(oplog, start=1)
    ]
    result = replay(records, tmp_path / "a", W)
    again = replay(records, tmp_path / "b", W)
    assert result.hash == again.hash
    assert result.applied == len(oplog)
    fusion_store = Store(tmp_path / "a" / "fusion", actor="fusion")
    mat_store = Store(tmp_path / "a" / "materializer", actor="materializer")
    try:
        with fusion_store.reader() as f, mat_store.reader() as m:
            for b in range(4):
                raw = m.get(materializer.belief_key(W, f"b-{b}"))
                mine = f.get(fusion.belief_key(W, f"b-{b}"))
                assert raw is not None
                assert mine is not None
                record = _CHANGED.decode(raw)
                assert record.evidence == fusion.decode_fused(mine).evidence
                assert len(record.evidence) == 31
    finally:
        fusion_store.close()
        mat_store.close()


def _derived_bytes(oplog: list[OpsInbox], burst: list[OpsInbox]) -> tuple[int, int]:
    """(posteriors, encoded bytes) fusion publishes for ``burst`` after ``oplog``."""
    fused, _ = fuse(oplog)
    _, updates = fuse(burst, fused, first=len(oplog) + 1)
    return len(updates), sum(len(encode(u)) for u in updates)


def test_a_trust_burst_costs_bytes_per_belief_touched_not_per_evidence_item() -> None:
    """A burst of trust changes on a source 10 beliefs cite: the posteriors it
    publishes weigh the same whether each belief holds 5 evidence items or 121
    (with whole lists they grew about 20 times), and twice the beliefs cost twice."""
    burst: list[OpsInbox] = [trust("shared", 0.2 + n / 10, n) for n in range(5)]
    few = _derived_bytes(log(beliefs=10, items=4), burst)
    many = _derived_bytes(log(beliefs=10, items=120), burst)
    more = _derived_bytes(log(beliefs=20, items=4), burst)
    assert few[0] == many[0] == 5 * 10
    assert more[0] == 5 * 20
    assert many[1] < 1.1 * few[1]
    assert 1.8 * few[1] < more[1] < 2.2 * few[1]
    per_posterior = many[1] / many[0]
    # One evidence item alone encodes to about 130 bytes: a whole list of 121 would
    # be over 15 KB per posterior.
    assert per_posterior < 1000, per_posterior

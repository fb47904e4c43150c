"""Fusion's index by source (issue 18, part 4): a trust change re-reads only the
beliefs its source bears on, the keys stay bounded, and a store written before the
index is indexed by the upgrade."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.belief_model import reliability
from worldline.actors.fusion import assess, sources, standing
from worldline.actors.fusion import core as fusion
from worldline.actors.fusion import upgrade as fusion_upgrade
from worldline.actors.registry import build
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context, Reader, Step
from worldline.actors.runtime.store import Store
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import (
    AddBelief,
    AddEvidence,
    OpsInbox,
    OpVerdict,
    PosteriorUpdate,
    SetTrust,
    Sources,
)
from worldline.protocols.subjects import ops

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import pytest

W: Final = "w1"
AT: Final = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def ctx(agent: str, seq: int) -> Context:
    return Context(world=W, author=agent, subject=ops(W, agent), seq=seq, now=AT)


def add(belief_id: str, author: str = "ada") -> AddBelief:
    return AddBelief(
        op_id=f"op-{belief_id}",
        author=author,
        at=AT,
        belief_id=belief_id,
        text=f"Claim {belief_id} holds.",
        type="claim",
    )


def cite(belief_id: str, source: str, n: int, author: str = "ada") -> AddEvidence:
    item = Evidence(
        id=f"ev-{belief_id}-{n}",
        belief_id=belief_id,
        direction="supports",
        kind="citation",
        source=source,
        observed_at=AT,
        author=author,
    )
    return AddEvidence(
        op_id=f"op-ev-{belief_id}-{n}", author=author, at=AT, evidence=item
    )


def trust(source: str, value: float, author: str = "operator") -> SetTrust:
    return SetTrust(
        op_id=f"op-trust-{source}-{value}",
        author=author,
        at=AT,
        source=source,
        trust=value,
    )


class Counting(MemoryState):
    """A state that counts the belief records handlers read (by get or by scan)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[bytes] = Counter()

    def get(self, key: bytes) -> bytes | None:
        if key.startswith(b"belief/"):
            self.reads[key] += 1
        return super().get(key)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key, value in super().scan(prefix):
            if key.startswith(b"belief/"):
                self.reads[key] += 1
            yield key, value


def world(state: MemoryState, log: list[OpsInbox], start: int = 1) -> int:
    for seq, op in enumerate(log, start=start):
        state.apply(fusion.handle(state, op, ctx(op.author, seq)))
    return start + len(log)


def bookstore_log(beliefs: int, stores: int) -> list[OpsInbox]:
    """``beliefs`` claims, each cited by two of ``stores`` stores."""
    log: list[OpsInbox] = []
    for b in range(beliefs):
        log.append(add(f"b{b:04d}"))
        log.append(cite(f"b{b:04d}", f"store-{b % stores}", 0))
        log.append(cite(f"b{b:04d}", f"store-{(b * 7 + 3) % stores}", 1))
    return log


def posteriors(out: list[object]) -> dict[str, PosteriorUpdate]:
    found = {}
    for item in out:
        message = getattr(item, "message", None)
        if isinstance(message, PosteriorUpdate):
            found[message.belief.id] = message
    return found


def test_a_trust_change_re_reads_exactly_the_beliefs_of_its_source() -> None:
    state = Counting()
    log = bookstore_log(300, 40)
    # Unrelated beliefs: another author's, cited by sources nobody trusts here.
    log += [add("zz-other", author="bob"), cite("zz-other", "wiki", 0, author="bob")]
    seq = world(state, log)
    bears = {
        op.evidence.belief_id
        for op in log
        if isinstance(op, AddEvidence) and op.evidence.source == "store-5"
    }
    assert 5 < len(bears) < 300  # a few of the world's beliefs, not all of them
    state.reads.clear()
    step = fusion.handle(state, trust("store-5", 0.2), ctx("operator", seq))
    emitted = posteriors(list(step.out))
    assert set(emitted) == bears
    assert all(p.trust == {"store-5": 0.2} for p in emitted.values())
    # Each belief the source bears on is read once (its record), the rest never.
    read = {key.decode().rsplit("/", 1)[1] for key in state.reads}
    assert read == bears
    assert all(n == 1 for n in state.reads.values())
    verdicts = [o.message for o in step.out if isinstance(o.message, OpVerdict)]
    assert [v.outcome for v in verdicts] == ["applied"]


def test_agent_trust_reaches_every_belief_that_agent_gave_evidence_to() -> None:
    state = Counting()
    log: list[OpsInbox] = [add("b1"), add("b2"), add("b3", author="bob")]
    log += [cite("b1", "lab", 0), cite("b3", "lab", 0, author="bob")]
    log += [cite("b2", "wiki", 0, author="bob")]
    seq = world(state, log)
    state.reads.clear()
    step = fusion.handle(state, trust("agent:bob", 0.5), ctx("operator", seq))
    assert set(posteriors(list(step.out))) == {"b2", "b3"}
    assert {k.decode().rsplit("/", 1)[1] for k in state.reads} == {"b2", "b3"}
    # A source whose name extends another's is another source.
    state.apply(fusion.handle(state, cite("b1", "agent:bob/x", 1), ctx("ada", seq + 1)))
    step = fusion.handle(state, trust("agent:bob", 0.4), ctx("operator", seq + 2))
    assert set(posteriors(list(step.out))) == {"b2", "b3"}


def test_the_index_gives_the_posteriors_a_whole_world_scan_gives() -> None:
    """Same emitted posteriors, in the same order, as re-reading every belief."""
    state = MemoryState()
    seq = world(state, bookstore_log(120, 9))
    step = fusion.handle(state, trust("store-4", 2.5), ctx("operator", seq))
    got = [o.message for o in step.out if isinstance(o.message, PosteriorUpdate)]
    expected = []
    for _, raw in state.scan(f"belief/{W}/".encode()):
        fused = fusion.decode_fused(raw)
        if any(e.source == "store-4" for e in fused.evidence):
            expected.append(fused.belief.id)
    assert [p.belief.id for p in got] == expected
    assert all(p.belief.confidence is not None for p in got)


def test_index_keys_are_bounded_whatever_the_source() -> None:
    long_source = "https://example.org/" + "ä/" * 400
    item = Evidence(
        id="e1",
        belief_id="b" * 600,
        direction="supports",
        kind="citation",
        source=long_source,
        observed_at=AT,
        author="x" * 300,
    )
    writes = sources.index_writes("w" * 200, item.belief_id, [item])
    assert len(writes) == 2
    assert all(len(key) <= 511 for key in writes)
    assert set(writes.values()) == {item.belief_id.encode()}  # read back whole
    assert sources.source_prefix(W, "a/b") != sources.source_prefix(W, "a%2Fb")


def _unindexed(state: MemoryState) -> dict[bytes, bytes]:
    """``state`` as a store written before the index: no ``bysrc/`` keys."""
    return {k: v for k, v in state.data.items() if not k.startswith(sources.PREFIX)}


def test_the_upgrade_indexes_a_store_written_before_the_index() -> None:
    current = MemoryState()
    world(current, bookstore_log(200, 13))
    old = MemoryState()
    old.data = _unindexed(current)
    assert len(old.data) < len(current.data)
    steps = 0
    while (writes := fusion_upgrade.upgrade(old)) is not None:
        for key, value in writes.items():
            if value is None:
                old.data.pop(key, None)
            else:
                old.data[key] = value
        steps += 1
    assert steps == 1
    assert old.data.pop(fusion_upgrade.FORMAT_KEY) == fusion_upgrade.FORMAT
    assert old.data == current.data


def test_the_upgrade_resumes_in_chunks_on_a_real_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    current = MemoryState()
    world(current, bookstore_log(150, 11))
    store = Store(tmp_path / "fusion", actor="fusion")
    try:
        # An old store's contents, straight to LMDB (one step that writes them).
        pending: list[dict[bytes, bytes | None]] = [dict(_unindexed(current))]

        def load(_: Reader) -> dict[bytes, bytes | None] | None:
            return pending.pop() if pending else None

        assert store.upgrade(load) == 1
        monkeypatch.setattr(fusion_upgrade, "CHUNK", 50)
        spec = build("fusion")
        assert spec.upgrade is fusion_upgrade.upgrade
        steps = store.upgrade(spec.upgrade)
        assert steps >= 8  # about three index keys a belief (450), 50 a step
        assert store.upgrade(spec.upgrade) == 0  # current now: nothing to do
        with store.reader() as reader:
            got = dict(reader.scan(b""))
        assert got.pop(fusion_upgrade.FORMAT_KEY) == fusion_upgrade.FORMAT
        assert {k: v for k, v in got.items() if k.startswith(b"bysrc/")} == {
            k: v for k, v in current.data.items() if k.startswith(b"bysrc/")
        }
        assert fusion_upgrade.CURSOR_KEY not in got
    finally:
        store.close()


def test_sharded_fusion_indexes_only_its_own_beliefs() -> None:
    log = bookstore_log(80, 7)
    shards = [MemoryState(), MemoryState()]
    whole = MemoryState()
    emitted: list[str] = []
    for seq, op in enumerate([*log, trust("store-2", 0.3)], start=1):
        whole.apply(fusion.handle(whole, op, ctx(op.author, seq)))
        for i, state in enumerate(shards):
            out = state.apply(
                fusion.handle(state, op, ctx(op.author, seq), shard=(i, 2))
            )
            if isinstance(op, SetTrust):
                emitted += [
                    o.message.belief.id
                    for o in out
                    if isinstance(o.message, PosteriorUpdate)
                ]
    union = {**shards[0].data, **shards[1].data}
    assert union == whole.data
    assert sorted(emitted) == sorted(
        v.decode()
        for k, v in whole.data.items()
        if k.startswith(sources.source_prefix(W, "store-2"))
    )


def test_trust_keys_are_bounded_and_the_upgrade_moves_an_overlong_one() -> None:
    long_source = "ü" * 256  # a valid source name of 512 bytes
    state = MemoryState()
    world(state, [add("b1"), cite("b1", long_source, 0)])
    step = fusion.handle(state, trust(long_source, 0.25), ctx("operator", 3))
    assert all(len(key) <= 511 for key in step.writes)
    state.apply(step)
    (emitted,) = posteriors(list(step.out)).values()
    assert emitted.trust == {long_source: 0.25}
    # A store written before keys were bounded kept a 450-byte source whole.
    old_source = "s" * 450
    old_key = f"trust/{W}/{old_source}".encode()
    raw = msgspec.msgpack.encode(
        fusion.TrustSetting(trust=0.5, locked=True, author="x")
    )
    old = MemoryState()
    old.data = {old_key: raw}
    writes = fusion_upgrade.upgrade(old)
    assert writes is not None
    assert writes[old_key] is None
    assert writes[fusion.trust_key(W, old_source)] == raw
    assert len(fusion.trust_key(W, old_source)) <= 511
    # A short source keeps its key: stores written before need nothing moved.
    assert fusion.trust_key(W, "lab") == f"trust/{W}/lab".encode()


def test_the_sources_reply_reports_the_assessments_fixed_point() -> None:
    """The learned table and the ``sources`` reply carry how the last assessment's
    fixed point ended: its rounds and the largest change in its last round (at most
    the tolerance, once converged); before any assessment both are 0."""
    state = MemoryState()
    assert standing.serve(state, Sources(), W).rounds == 0
    claims = [
        reliability.Claim(f"q{i}", "t" if i % 4 else f"x{h}", f"s{h}")
        for i in range(12)
        for h in range(3)
    ]
    result = reliability.estimate(claims)
    state.apply(Step(writes=assess.writes(state, W, assess.table(claims))))
    reply = standing.serve(state, Sources(), W)
    assert reply.rounds == result.rounds > 0
    assert reply.change == result.change <= reliability.Params().tolerance
    row = assess.learned(state, W, "s0")
    assert row is not None
    assert (row.rounds, row.change) == (reply.rounds, reply.change)

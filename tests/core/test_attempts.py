"""The plan after a batch fails to commit (actors/runtime/attempts.py): retried in
place, split to isolate what the store cannot apply, never skipped."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from worldline.actors.runtime.attempts import BACKOFF_MAX, FIRST_RETRY, BatchAttempts


def _run(
    seqs: list[int], poison: set[int], *, full_for: int = 0
) -> tuple[list[int], dict[int, str], list[float], int]:
    """Drive the plan against a store that fails any part holding a poison sequence
    (unless refused) and has no room for the first ``full_for`` attempts. Returns the
    sequences committed (in order), the refused ones, the waits, and the attempts."""
    plan = BatchAttempts(seqs)
    committed: list[int] = []
    waits: list[float] = []
    tries = 0
    while (part := plan.next()) is not None:
        tries += 1
        assert tries < 10_000, "the plan does not end"
        lo, hi = part
        chunk = seqs[lo:hi]
        if tries <= full_for:
            waits.append(plan.failed("MDB_MAP_FULL", no_room=True).wait)
            continue
        if any(s in poison and s not in plan.refuse for s in chunk):
            waits.append(plan.failed("mdb_put: MDB_BAD_VALSIZE", no_room=False).wait)
            continue
        committed += [s for s in chunk if s not in plan.refuse]
        plan.committed()
    return committed, plan.refuse, waits, tries


def test_one_poison_in_a_full_batch_is_dead_lettered_and_the_rest_commits() -> None:
    seqs = list(range(1001, 1257))  # 256 deliveries
    committed, refused, waits, tries = _run(seqs, {1100})
    assert committed == [s for s in seqs if s != 1100]  # in stream order
    assert set(refused) == {1100}
    assert refused[1100] == "unstorable: mdb_put: MDB_BAD_VALSIZE"
    # One wait (the second chance of the whole batch), then splitting without waits.
    assert [w for w in waits if w] == [FIRST_RETRY]
    assert tries < 40  # bisection: about 2 x log2(256) parts, not 256


def test_a_passing_fault_costs_one_retry_and_no_dead_letter() -> None:
    plan = BatchAttempts([5, 6, 7])
    assert plan.next() == (0, 3)
    assert plan.failed("EIO", no_room=False).wait == FIRST_RETRY
    assert plan.next() == (0, 3)  # the same batch, whole
    plan.committed()
    assert plan.next() is None
    assert plan.refuse == {}


def test_no_room_is_retried_with_back_off_and_never_dead_lettered() -> None:
    seqs = [1, 2, 3, 4]
    committed, refused, waits, _ = _run(seqs, set(), full_for=12)
    assert committed == seqs
    assert refused == {}
    assert waits[:4] == [0.5, 1.0, 2.0, 4.0]
    assert max(waits) == BACKOFF_MAX


def test_a_store_that_cannot_even_dead_letter_waits_instead_of_dropping() -> None:
    plan = BatchAttempts([9])
    plan.failed("broken", no_room=False)  # second chance
    assert plan.failed("broken", no_room=False).action.startswith("dead-lettering")
    assert plan.refuse == {9: "unstorable: broken"}
    # Even the dead letter does not commit: back off, keep it, never skip it.
    assert plan.failed("broken", no_room=False).wait > 0
    assert plan.next() == (0, 1)


@given(
    st.integers(min_value=1, max_value=300),
    st.sets(st.integers(min_value=0, max_value=299), max_size=6),
)
def test_every_delivery_is_committed_or_dead_lettered_once_in_order(
    n: int, poison_at: set[int]
) -> None:
    seqs = list(range(100, 100 + n))
    poison = {seqs[i] for i in poison_at if i < n}
    committed, refused, _, _ = _run(seqs, poison)
    assert set(refused) == poison
    assert committed == [s for s in seqs if s not in poison]

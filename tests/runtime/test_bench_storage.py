"""Smoke test of the storage benchmark (``bench/storage.py``): a tiny run through its
real entry point measures every stream and store, and the numbers add up. Nothing is
compared against a threshold: the sizes are what they are."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# bench/ holds scripts, not a package: import the script as its own module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import storage

pytestmark = pytest.mark.nats


def test_quick_run_measures_every_store(capsys: pytest.CaptureFixture[str]) -> None:
    results = storage.main(["--quick", "--beliefs", "60", "--observations", "8"])
    assert (results.beliefs, results.evidence, results.observations) == (60, 3, 8)
    # 60 beliefs of 4 ops each, plus the extractor's statements of 8 artifacts.
    assert results.ops > 240
    assert results.streams["WL_OPS"]["messages"] == results.ops
    assert results.log_bytes > 0
    assert set(results.stores) == {
        "extractor",
        "fusion",
        "materializer",
        "projector-0",
        "simulator",
    }
    for name in ("fusion", "materializer", "projector-0"):
        use = results.stores[name]
        assert use.used_bytes <= use.file_bytes
        assert 0 <= use.free_pages * use.page_size < use.used_bytes
        belief = use.prefixes["state"]["belief"]
        assert belief.count >= 60  # every belief, and the extractor's
        assert belief.value_bytes > belief.count * 100
    assert results.ratio == results.store_bytes / results.log_bytes
    # Posteriors carry only the evidence their op added (issue 18): no repeats.
    assert 0 < results.posterior_delta_bytes == results.posterior_bytes
    assert results.posterior_repeated_bytes == 0
    out = capsys.readouterr().out
    assert f"= {results.ratio:.2f}x" in out
    assert "state/belief" in out


def test_counts_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        storage.parse(["--beliefs", "0"])
    assert exc.value.code == 2
    assert "--beliefs must be at least 1" in capsys.readouterr().err


def test_measure_store_splits_keys_by_prefix(tmp_path: Path) -> None:
    from worldline.actors.runtime.store import Store

    store = Store(tmp_path / "s", actor="test", map_size=1 << 20)
    with store._begin(write=True) as txn:  # a store with known contents
        txn.put(b"belief/w/a", b"x" * 10, db=store._state)
        txn.put(b"belief/w/b", b"x" * 5000, db=store._state)  # on overflow pages
        txn.put(b"tok/w/s/1", b"a", db=store._state)
    store.close()
    use = storage.measure_store(tmp_path / "s")
    belief = use.prefixes["state"]["belief"]
    assert (belief.count, belief.key_bytes, belief.value_bytes) == (2, 20, 5010)
    assert belief.overflow_values == 1
    assert belief.overflow_bytes == 2 * use.page_size
    assert use.prefixes["state"]["tok"].count == 1
    assert use.pages["state"]["overflow_pages"] == 2

"""A store's prefix scan (issue 24 made it stop in C at the prefix's end): exactly
the keys that start with the prefix, in order, whatever bytes end it."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.runtime.store import Store

# Few byte values, 0x00 and 0xff among them: prefixes share and end in them often.
_BYTES = st.binary(min_size=0, max_size=4).map(
    lambda raw: bytes(b"\x00\x01\x7f\xfe\xff"[x % 5] for x in raw)
)


@settings(max_examples=60, deadline=None)
@given(
    keys=st.sets(_BYTES.filter(bool), min_size=1, max_size=20),
    prefixes=st.lists(_BYTES, min_size=1, max_size=6),
)
def test_a_scan_holds_every_key_with_the_prefix_and_no_other(
    keys: set[bytes], prefixes: list[bytes]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "s", actor="test")
        try:
            with store._begin(write=True, db=store._state) as txn:
                for key in keys:
                    txn.put(key, b"v" + key, db=store._state)
            with store.reader() as reader:
                for prefix in [*prefixes, b"", *sorted(keys)]:
                    want = sorted((k, b"v" + k) for k in keys if k.startswith(prefix))
                    assert list(reader.scan(prefix)) == want, prefix
        finally:
            store.close()

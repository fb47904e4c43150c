"""A dead letter carries an excerpt of its input, not a copy (issue 23, F15): an
agent's junk ops of ~1 MiB each once cost as much again in WL_DLQ (each letter held
up to 512 KiB of its input, and an op is dead-lettered twice, by fusion and by
materializer-ops). Now a letter holds the first 4 KiB, the input's size and its
sha256; the input stays in its own stream at ``stream_seq``."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.registry import build
from worldline.actors.runtime.deliveries import (
    MAX_LETTER_PAYLOAD,
    MAX_LETTER_REASON,
    Delivery,
    dead_letter,
)
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import DeadLetter
from worldline.protocols.subjects import dlq, ops

if TYPE_CHECKING:
    from pathlib import Path

AT: Final = datetime(2026, 3, 1, tzinfo=UTC)
WORLD: Final = "letters"
JUNK: Final = bytes(range(256)) * (900 * 4)  # 900 KiB that decode as no op


def test_a_900_kib_junk_op_makes_dead_letters_of_a_few_kib(tmp_path: Path) -> None:
    digest = hashlib.sha256(JUNK).hexdigest()
    for actor in ("fusion", "materializer"):
        store = Store(tmp_path / actor, actor=actor)
        try:
            inp = build(actor).inputs[0]  # the op log
            result = store.apply_batch(
                inp, [Delivery(7, ops(WORLD, "spock"), JUNK)], AT
            )
        finally:
            store.close()
        assert result.accepted == [False]
        (item,) = [i for i in result.outbox if i.subject == dlq(WORLD, actor)]
        assert len(item.payload) < 8 * 1024, len(item.payload)
        letter = msgspec.msgpack.decode(item.payload, type=DeadLetter)
        assert letter.reason.startswith("undecodable")
        assert letter.stream_seq == 7
        assert letter.payload == JUNK[:MAX_LETTER_PAYLOAD]
        assert letter.payload_bytes == len(JUNK)
        assert letter.payload_sha256 == digest


def test_a_small_input_travels_whole_and_a_long_reason_is_cut() -> None:
    small = Delivery(3, ops(WORLD, "ada"), b"\x00" * MAX_LETTER_PAYLOAD)
    letter = dead_letter("fusion", small, "invalid: " + "x" * 100_000, AT)
    assert letter.payload == small.data
    assert (letter.payload_bytes, letter.payload_sha256) == (0, "")
    assert len(letter.reason) == MAX_LETTER_REASON
    one_more = Delivery(4, ops(WORLD, "ada"), b"\x00" * (MAX_LETTER_PAYLOAD + 1))
    cut = dead_letter("fusion", one_more, "undecodable: no", AT)
    assert cut.payload == one_more.data[:MAX_LETTER_PAYLOAD]
    assert cut.payload_bytes == MAX_LETTER_PAYLOAD + 1

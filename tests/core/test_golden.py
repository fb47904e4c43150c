"""Golden bytes for the wire contract: every message, encoded, byte for byte.

Each message class in :mod:`protocols.messages` has one fixed sample below, and its
encoding is stored in ``tests/golden/<kind tag>.msgpack``. A change to a field name,
order, type or default shows up here as a byte difference: either the change is a bug,
or it is a deliberate new message version (a new tag, ``.v2``) with its own golden file.

To (re)generate the golden files after a deliberate change, run::

    WORLDLINE_REGEN_GOLDEN=1 python -m pytest tests/core/test_golden.py

The encoding tests then write the files (and are reported as skipped) instead of
comparing; commit the new files with the change that caused them.
"""

from __future__ import annotations

import math
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols import messages
from protocols.messages import (
    EXTRACTOR_INBOX,
    FUSION_INBOX,
    MATERIALIZER_INBOX,
    PROJECTOR_INBOX,
    PROJECTOR_REPLY,
    PROJECTOR_RPC,
    SIMULATOR_INBOX,
    SIMULATOR_REPLY,
    SIMULATOR_RPC,
    AddBelief,
    Belief,
    BeliefChanged,
    BeliefListReply,
    BeliefReply,
    DeadLetter,
    GetBelief,
    ListBeliefs,
    Message,
    Observe,
    PosteriorUpdate,
    RpcError,
    SimStatus,
    SimStatusReply,
    Transition,
    encode,
)
from protocols.subjects import ops

GOLDEN_DIR: Final = Path(__file__).resolve().parent.parent / "golden"
REGEN: Final = os.environ.get("WORLDLINE_REGEN_GOLDEN") == "1"

T0: Final = datetime(2024, 5, 17, 9, 30, 0, tzinfo=UTC)
T1: Final = datetime(2024, 5, 17, 9, 31, 15, 250_000, tzinfo=UTC)
T2: Final = datetime(2024, 5, 18, 23, 59, 59, 999_999, tzinfo=UTC)

BELIEF_A: Final = Belief(
    id="b-0123456789abcdef",
    text="The cache is invalidated on every deploy.",
    type="claim",
    confidence=0.75,
    evidence_weight=3.5,
    uncertainty=0.125,
    label="cache",
    flags=("stable", "uncertain"),
    author="alice",
    created_at=T0,
    updated_at=T1,
    version=7,
)
BELIEF_B: Final = Belief(
    id="b-fedcba9876543210",
    text="Ship the migration before Friday.",
    type="goal",
    author="bob_2",
    created_at=T1,
    updated_at=T2,
    version=8,
)

SAMPLES: Final[tuple[Message, ...]] = (
    Observe(
        obs_id="obs-42",
        author="alice",
        at=T0,
        source="notes/standup.md",
        text="- The cache is invalidated on every deploy.\n- Builds take 12 min.",
    ),
    AddBelief(
        op_id="op-7",
        author="alice",
        at=T0,
        belief_id="b-0123456789abcdef",
        text="The cache is invalidated on every deploy.",
        type="risk",
        confidence=0.8,
        source="alice:notes/standup.md",
    ),
    PosteriorUpdate(belief=BELIEF_A, cause="op-7"),
    Transition(
        id="tr-1",
        lineage="run-9",
        task="fix flaky test",
        context="repo at abc123",
        action="pytest -x tests/test_cache.py",
        observation="1 failed, 12 passed",
        pairing="id",
    ),
    BeliefChanged(belief=BELIEF_B),
    GetBelief(belief_id="b-0123456789abcdef"),
    ListBeliefs(type="risk", limit=50),
    BeliefReply(belief=BELIEF_A),
    BeliefListReply(beliefs=(BELIEF_A, BELIEF_B), total=12),
    SimStatus(),
    SimStatusReply(transitions=314),
    RpcError(code="invalid", message="limit must be between 1 and 10000"),
    DeadLetter(
        actor="fusion",
        subject=ops("w1", "alice"),
        stream_seq=1234,
        reason="belief b-1 already exists in world w1",
        payload=b"\x81\xa4kind\xb0op.add_belief.v1\x00\xff",
        at=T2,
    ),
)


def _decode_dead_letter(data: bytes) -> DeadLetter:
    return msgspec.msgpack.decode(data, type=DeadLetter)


# Every decoder that must accept a message of each class (its inbox, RPC or reply).
DECODERS: Final[dict[type[Message], tuple[Any, ...]]] = {
    Observe: (EXTRACTOR_INBOX.decode,),
    AddBelief: (FUSION_INBOX.decode,),
    PosteriorUpdate: (MATERIALIZER_INBOX.decode,),
    Transition: (SIMULATOR_INBOX.decode,),
    BeliefChanged: (PROJECTOR_INBOX.decode,),
    GetBelief: (PROJECTOR_RPC.decode,),
    ListBeliefs: (PROJECTOR_RPC.decode,),
    BeliefReply: (PROJECTOR_REPLY.decode,),
    BeliefListReply: (PROJECTOR_REPLY.decode,),
    RpcError: (PROJECTOR_REPLY.decode, SIMULATOR_REPLY.decode),
    SimStatus: (SIMULATOR_RPC.decode,),
    SimStatusReply: (SIMULATOR_REPLY.decode,),
    DeadLetter: (_decode_dead_letter,),
}


def tag_of(cls: type[Message]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str), f"{cls.__name__} has no string kind tag"
    return tag


def message_classes() -> list[type[Message]]:
    """Every Message subclass defined in protocols.messages (aliases counted once)."""
    found = {
        obj
        for obj in vars(messages).values()
        if isinstance(obj, type)
        and issubclass(obj, Message)
        and obj is not Message
        and obj.__module__ == messages.__name__
    }
    return sorted(found, key=lambda cls: cls.__name__)


def golden_path(sample: Message) -> Path:
    return GOLDEN_DIR / f"{tag_of(type(sample))}.msgpack"


def golden_bytes(sample: Message) -> bytes:
    path = golden_path(sample)
    if not path.exists():
        pytest.fail(
            f"no golden file {path.name}; generate it with WORLDLINE_REGEN_GOLDEN=1"
        )
    return path.read_bytes()


def sample_id(sample: Message) -> str:
    return type(sample).__name__


def decode_cases() -> list[tuple[Message, Any]]:
    return [(s, d) for s in SAMPLES for d in DECODERS[type(s)]]


# --- golden bytes -----------------------------------------------------------------


@pytest.mark.parametrize("sample", SAMPLES, ids=sample_id)
def test_encoding_matches_golden_bytes(sample: Message) -> None:
    if REGEN:
        GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
        golden_path(sample).write_bytes(encode(sample))
        pytest.skip(f"regenerated {golden_path(sample).name}")
    assert encode(sample) == golden_bytes(sample)


@pytest.mark.parametrize(
    ("sample", "decode"),
    decode_cases(),
    ids=[f"{sample_id(s)}-{i}" for i, (s, _) in enumerate(decode_cases())],
)
def test_golden_bytes_decode_to_sample(sample: Message, decode: Any) -> None:
    decoded = decode(golden_bytes(sample))
    assert type(decoded) is type(sample)
    assert decoded == sample


def test_every_message_class_has_a_sample_and_decoder() -> None:
    classes = set(message_classes())
    sampled = [type(s) for s in SAMPLES]
    assert len(sampled) == len(set(sampled)), "one sample per class"
    assert classes == set(sampled)
    assert classes == set(DECODERS)


def test_tags_are_unique_and_versioned() -> None:
    tags = [tag_of(cls) for cls in message_classes()]
    assert len(tags) == len(set(tags))
    for tag in tags:
        assert re.fullmatch(r"[a-z_]+(\.[a-z_]+)*\.v[1-9][0-9]*", tag), tag


# --- schema evolution -------------------------------------------------------------


def _with_extra_fields(value: Any) -> Any:
    """Add an unknown field to every map (message and nested structs) in ``value``."""
    if isinstance(value, dict):
        extended = {k: _with_extra_fields(v) for k, v in value.items()}
        extended["added_in_a_future_version"] = {"x": [1, 2.5, "three"]}
        return extended
    if isinstance(value, list):
        return [_with_extra_fields(v) for v in value]
    return value


@pytest.mark.parametrize(
    ("sample", "decode"),
    decode_cases(),
    ids=[f"{sample_id(s)}-{i}" for i, (s, _) in enumerate(decode_cases())],
)
def test_unknown_fields_are_ignored(sample: Message, decode: Any) -> None:
    raw = msgspec.msgpack.decode(encode(sample))
    newer = msgspec.msgpack.encode(_with_extra_fields(raw))
    assert newer != encode(sample)
    assert decode(newer) == sample


# --- validation on decode ---------------------------------------------------------

ADD: Final = SAMPLES[1]
assert isinstance(ADD, AddBelief)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("confidence", 1.5),
        ("confidence", -0.1),
        ("confidence", math.nan),
        ("text", ""),
        ("author", "alice.smith"),
        ("author", "alice smith"),
        ("belief_id", "b 1"),
        ("belief_id", ""),
        ("type", "opinion"),
        ("kind", "op.add_belief.v999"),
        ("kind", "op.unknown.v1"),
    ],
)
def test_invalid_values_are_rejected_on_decode(field: str, value: object) -> None:
    raw = msgspec.msgpack.decode(encode(ADD))
    assert FUSION_INBOX.decode(msgspec.msgpack.encode(raw)) == ADD  # baseline decodes
    raw[field] = value
    with pytest.raises(msgspec.ValidationError):
        FUSION_INBOX.decode(msgspec.msgpack.encode(raw))


def test_wrong_message_for_inbox_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError):
        FUSION_INBOX.decode(encode(SAMPLES[0]))


# --- property: round trip ---------------------------------------------------------

_NON_SPACE = st.characters(codec="utf-8").filter(
    lambda c: re.match(r"\S", c) is not None
)
idents = st.text(_NON_SPACE, min_size=1, max_size=128)
tokens = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
texts = st.text(st.characters(codec="utf-8"), min_size=1, max_size=300)
confidences = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
weights = st.floats(min_value=0.0, max_value=1e9, allow_nan=False)
utc_datetimes = st.datetimes(
    min_value=datetime(1970, 1, 1),
    max_value=datetime(2200, 1, 1),
    timezones=st.just(UTC),
)
belief_types = st.sampled_from(messages.BELIEF_TYPES)

add_beliefs = st.builds(
    AddBelief,
    op_id=idents,
    author=tokens,
    at=utc_datetimes,
    belief_id=idents,
    text=texts,
    type=belief_types,
    confidence=st.none() | confidences,
    source=st.text(st.characters(codec="utf-8"), max_size=100),
)
beliefs = st.builds(
    Belief,
    id=idents,
    text=texts,
    type=belief_types,
    confidence=st.none() | confidences,
    evidence_weight=weights,
    uncertainty=st.none() | weights,
    label=st.text(st.characters(codec="utf-8"), max_size=50),
    flags=st.lists(st.sampled_from(["stale", "stable", "contradicted", "uncertain"]))
    .map(tuple)
    .filter(lambda f: len(f) == len(set(f))),
    author=tokens,
    created_at=utc_datetimes,
    updated_at=utc_datetimes,
    version=st.integers(min_value=0, max_value=2**63 - 1),
)

_BELIEF_DECODER: Final = msgspec.msgpack.Decoder(Belief)


@settings(database=None, max_examples=200)
@given(add_beliefs)
def test_add_belief_round_trips(op: AddBelief) -> None:
    assert FUSION_INBOX.decode(encode(op)) == op


@settings(database=None, max_examples=200)
@given(beliefs)
def test_belief_round_trips(belief: Belief) -> None:
    assert _BELIEF_DECODER.decode(encode(belief)) == belief
    wrapped = PosteriorUpdate(belief=belief, cause="op-1")
    assert MATERIALIZER_INBOX.decode(encode(wrapped)) == wrapped

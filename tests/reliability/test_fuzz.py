"""Fuzz tests (short version runs in CI): hostile and malformed input for every inbox,
every service and the world declaration parser.

Each actor input gets random bytes, truncated msgpack, wrong ``kind`` tags, 1-4 MiB
strings, NaN/inf/out-of-range numbers, invalid UTF-8 inside msgpack strings, bin where
a str belongs, 10k-deep nesting and, for the extractor, deeply nested JSON artifacts.
The deliveries go through a real :class:`Store` (LMDB under ``tmp_path``) in batches.
``apply_batch`` must never raise; each input is dead-lettered (a :class:`DeadLetter`
with a reason, small enough to publish) or accepted; a batch of purely hostile input
leaves the state byte-identical; a known-good message still applies afterwards. A
dead letter whose reason is "internal error" (a handler raised) counts as a crash.
Services get the same through the runtime's ``_answer``: always a reply, an
``RpcError`` for what does not decode, never an "internal" one. ``parse_declaration``
(and ``load_declaration``, for files) gets garbage, deep and oversized TOML: only
``BadRequest`` may come out.

Inputs are deterministic: ``random.Random`` seeded from ``WORLDLINE_FUZZ_SEED`` (the
seed is printed, and named in every failure). The long run is::

    WORLDLINE_FUZZ_INPUTS=10000 python -m pytest tests/reliability/test_fuzz.py -q -s

Two kinds of input are told apart. "reject" input cannot be a valid message for the
inbox (the generator knows which field it broke, and checks the schema): it must be
dead-lettered and must change nothing. "maybe" input may legitimately be valid (a huge
string in a field with no length limit, NaN in an unconstrained float, invalid UTF-8 in
an unknown key msgpack skips, an unknown key holding a deep structure...): it may be
accepted and change state, so it is applied in batches of its own, excluded from the
byte-identical check, and must still neither raise nor fail inside a handler.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import os
import random
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec
import msgspec.inspect as mi
import pytest

from worldline.actors.registry import build
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.serve import _answer
from worldline.actors.runtime.spec import Service
from worldline.actors.runtime.store import Store
from worldline.actors.simulator import index as transition_index
from worldline.actors.simulator.service import SessionService
from worldline.protocols.beliefs import BeliefEdge, Evidence
from worldline.protocols.messages import (
    SIMULATOR_RPC,
    AckInbox,
    AddBelief,
    AddEdge,
    AddEvidence,
    Before,
    Belief,
    BeliefChanged,
    BeliefEdgeChanged,
    CloseBelief,
    DeadLetter,
    DeclareWorld,
    EdgeChanged,
    EntityChanged,
    ExtractorInbox,
    GetBelief,
    GetCalibration,
    GetView,
    InboxChanged,
    LinkBeliefs,
    ListBeliefs,
    ListContradictions,
    MaterializerInbox,
    MaterializerRpc,
    Message,
    Observe,
    OpsInbox,
    OpStatus,
    PosteriorUpdate,
    ProjectorInbox,
    ProjectorRpc,
    PutWork,
    ReadWorld,
    RemoveEdge,
    ResolveContradiction,
    RpcError,
    SetField,
    SetTrust,
    SimEnd,
    SimStart,
    SimStarted,
    SimStatus,
    SimStep,
    SimulatorInbox,
    SimulatorRpc,
    StateHash,
    Statement,
    TraceBelief,
    Transition,
    UpsertEntity,
    WorldDeclared,
    encode,
    encode_batch,
)
from worldline.protocols.subjects import (
    batch_subject,
    derived,
    dlq,
    obs,
    ops,
    rpc_pattern,
    state,
)
from worldline.protocols.world import Edge, Entity, FieldState, WorldDecl
from worldline.sdk.declaration import (
    MAX_DECLARATION_BYTES,
    load_declaration,
    parse_declaration,
)
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from worldline.actors.runtime.outbox import OutboxItem
    from worldline.actors.runtime.spec import Input

INPUTS: Final = int(os.environ.get("WORLDLINE_FUZZ_INPUTS", "300"))
SEED: Final = int(os.environ.get("WORLDLINE_FUZZ_SEED", "20260301"))
TIMEOUT: Final = 60 + INPUTS // 10  # seconds per test: the long run takes minutes
BATCH: Final = 64  # deliveries per apply_batch, as a fetch would hand them over
MAX_PAYLOAD: Final = 1024 * 1024  # nats-server's default; worldline does not raise it
MIB: Final = 1024 * 1024

AT: Final = datetime(2026, 3, 1, tzinfo=UTC)
WORLD: Final = "fuzz"
AUTHOR: Final = "ada"
PILOT: Final = "project:soteria-pilot-conversion"
CREW_TOML: Final = Path(__file__).resolve().parents[2] / "examples" / "crew.toml"
ASK: Final = "Where would you like to fly?"

FieldPath = tuple[str | int, ...]
Expect = Literal["reject", "maybe"]


def _reproduce() -> str:
    return (
        f"seed {SEED} (reproduce with WORLDLINE_FUZZ_SEED={SEED} "
        f"WORLDLINE_FUZZ_INPUTS={INPUTS})"
    )


# --- hand-built msgpack ------------------------------------------------------------


def _str_header(n: int) -> bytes:
    if n < 32:
        return bytes([0xA0 | n])
    if n < 1 << 8:
        return b"\xd9" + n.to_bytes(1, "big")
    if n < 1 << 16:
        return b"\xda" + n.to_bytes(2, "big")
    return b"\xdb" + n.to_bytes(4, "big")


def _bin_header(n: int) -> bytes:
    if n < 1 << 8:
        return b"\xc4" + n.to_bytes(1, "big")
    if n < 1 << 16:
        return b"\xc5" + n.to_bytes(2, "big")
    return b"\xc6" + n.to_bytes(4, "big")


def _map_header(n: int) -> bytes:
    if n < 16:
        return bytes([0x80 | n])
    if n < 1 << 16:
        return b"\xde" + n.to_bytes(2, "big")
    return b"\xdf" + n.to_bytes(4, "big")


def _raw_map(items: Sequence[tuple[bytes, bytes]]) -> bytes:
    """A msgpack map from already-encoded keys and values."""
    return _map_header(len(items)) + b"".join(k + v for k, v in items)


def _enc(value: Any) -> bytes:
    return msgspec.msgpack.encode(value)


# Sequences no UTF-8 decoder may accept: bad lead bytes, overlong forms, surrogates,
# code points past U+10FFFF, truncated and lone continuation bytes.
BAD_UTF8: Final = (
    b"\xff",
    b"\xfe\xff",
    b"\xc0\x80",
    b"\xc1\xbf",
    b"\xe0\x80\xaf",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xf4\x90\x80\x80",
    b"\xf8\x88\x80\x80\x80",
    b"\xe2\x82",
    b"\x80",
    b"\xbf\xbf",
    b"\xf0\x9f\x98",
)


# --- values the generator plants, as the schema predicate sees them -------------------


@dataclass(frozen=True, slots=True)
class Deep:
    """A 10k-deep list (``[[[...]]]``) or map (``{"k": {"k": ...}}``)."""

    depth: int
    as_map: bool = False

    def raw(self) -> msgspec.Raw:
        if self.as_map:
            return msgspec.Raw(b"\x81\xa1k" * self.depth + b"\x80")
        return msgspec.Raw(b"\x91" * self.depth + b"\x90")


@dataclass(frozen=True, slots=True)
class BadUtf8:
    """A msgpack str whose bytes are not UTF-8."""

    data: bytes

    def raw(self) -> msgspec.Raw:
        return msgspec.Raw(_str_header(len(self.data)) + self.data)


@dataclass(frozen=True, slots=True)
class Bin:
    """msgpack bin where a str was: the right text in the wrong wire type."""

    data: bytes

    def raw(self) -> msgspec.Raw:
        return msgspec.Raw(_bin_header(len(self.data)) + self.data)


Planted = Deep | BadUtf8 | Bin


def _wire(value: Any) -> Any:
    return value.raw() if isinstance(value, Deep | BadUtf8 | Bin) else value


def _float_ok(info: mi.FloatType | mi.IntType, v: float) -> bool:
    if info.ge is not None and not v >= info.ge:
        return False
    if info.gt is not None and not v > info.gt:
        return False
    if info.le is not None and not v <= info.le:
        return False
    return info.lt is None or v < info.lt


def may_accept(info: mi.Type, v: Any) -> bool:
    """Could a field of type ``info`` decode the planted value ``v``?

    Exact for the types the wire contract uses; True (maybe) when unsure, so input is
    only ever counted as "must reject" when the schema really rules it out.
    """
    if isinstance(info, mi.Metadata):
        return may_accept(info.type, v)
    if isinstance(info, mi.UnionType):
        return any(may_accept(t, v) for t in info.types)
    if isinstance(info, mi.AnyType):
        return not isinstance(v, BadUtf8)
    if isinstance(v, BadUtf8):
        return False
    if isinstance(v, Bin):
        return isinstance(info, mi.BytesType | mi.ByteArrayType | mi.MemoryViewType)
    if isinstance(v, Deep):
        if v.as_map:  # skipped as an unknown key by a struct, or a dict's value
            return isinstance(info, mi.StructType | mi.DictType)
        if isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType):
            return may_accept(info.item_type, Deep(v.depth - 1))
        return False
    exact = (
        mi.NoneType,
        mi.BoolType,
        mi.IntType,
        mi.FloatType,
        mi.StrType,
        mi.LiteralType,
        mi.ListType,
        mi.VarTupleType,
        mi.DictType,
        mi.StructType,
        mi.DateTimeType,
    )
    if not isinstance(info, exact):
        return True
    if v is None:
        return isinstance(info, mi.NoneType)
    if isinstance(v, bool):
        return isinstance(info, mi.BoolType) or (
            isinstance(info, mi.LiteralType) and v in info.values
        )
    if isinstance(v, int):
        if isinstance(info, mi.LiteralType):
            return v in info.values
        return isinstance(info, mi.IntType | mi.FloatType) and _float_ok(info, v)
    if isinstance(v, float):
        return isinstance(info, mi.FloatType) and _float_ok(info, v)
    if isinstance(v, str):
        if isinstance(info, mi.LiteralType):
            return v in info.values
        if isinstance(info, mi.DateTimeType):
            return len(v) < 64
        if not isinstance(info, mi.StrType):
            return False
        if info.min_length is not None and len(v) < info.min_length:
            return False
        if info.max_length is not None and len(v) > info.max_length:
            return False
        return info.pattern is None or re.search(info.pattern, v) is not None
    return True


def _member(info: mi.Type, value: Any) -> mi.Type:
    """The member of a union that ``value`` (a template's builtins) was encoded from."""
    if isinstance(info, mi.Metadata):
        return _member(info.type, value)
    if not isinstance(info, mi.UnionType):
        return info
    for t in info.types:
        if isinstance(value, dict) and isinstance(t, mi.StructType | mi.DictType):
            return t
        if isinstance(value, list) and isinstance(t, mi.ListType | mi.VarTupleType):
            return t
    return info


def slots(
    value: Any, info: mi.Type, path: FieldPath = ()
) -> Iterator[tuple[FieldPath, mi.Type]]:
    """Every (path, field type) inside a template's builtins, depth first."""
    info = _member(info, value)
    if isinstance(info, mi.StructType) and isinstance(value, dict):
        for f in info.fields:
            if f.encode_name in value:
                here = (*path, f.encode_name)
                yield here, f.type
                yield from slots(value[f.encode_name], f.type, here)
    elif isinstance(info, mi.ListType | mi.VarTupleType) and isinstance(value, list):
        for i, item in enumerate(value):
            yield (*path, i), info.item_type
            yield from slots(item, info.item_type, (*path, i))
    elif isinstance(info, mi.DictType) and isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key), info.value_type
            yield from slots(item, info.value_type, (*path, key))


def _get(obj: Any, path: FieldPath) -> Any:
    for step in path:
        obj = obj[step]
    return obj


def _put(obj: Any, path: FieldPath, value: Any) -> Any:
    """A copy of ``obj`` with ``value`` at ``path`` (only the path is copied)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        new_dict = dict(obj)
        new_dict[head] = _put(obj[head], rest, value)
        return new_dict
    new_list = list(obj)
    assert isinstance(head, int)
    new_list[head] = _put(obj[head], rest, value)
    return new_list


def _struct_tag(cls: type[Any]) -> str | None:
    tag = cls.__struct_config__.tag
    return tag if isinstance(tag, str) else None


def _all_tags() -> tuple[str, ...]:
    found: set[str] = set()
    todo: list[type[Any]] = [Message]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        tag = _struct_tag(cls)
        if tag:
            found.add(tag)
    return (*sorted(found), "fusion.belief.v2", "fusion.trust.v1")


ALL_TAGS: Final = _all_tags()


def _tags_of(union: Any) -> frozenset[str]:
    info = mi.type_info(union)
    members = info.types if isinstance(info, mi.UnionType) else (info,)
    return frozenset(
        str(m.tag)
        for m in members
        if isinstance(m, mi.StructType) and m.tag is not None
    )


# --- the generator -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hostile:
    kind: str  # the class of hostility, for the summary and failure messages
    data: bytes
    expect: Expect

    def describe(self) -> str:
        return f"{self.kind} ({len(self.data)} bytes: {self.data[:48]!r}...)"


def _deep_json(rng: random.Random) -> str:
    n = rng.randint(2_000, 40_000)
    return rng.choice(
        (
            "[" * n + "]" * n,
            "[" * n,  # unterminated
            '{"claims": [' + "[" * n + "]" * n + "]}",
            '{"x": ' + '{"a": ' * n + "1" + "}" * n + "}",  # under an unknown key
            '{"claims": [{"text": "a", "y": ' + "[" * n + "]" * n + "}]}",
            '{"result": ' + "[" * n + "]" * n + "}",
            '{"tool": "crm", "result": "ok", "z": ' + '{"b": ' * n + "}" * n + "}",
        )
    )


class Generator:
    """Deterministic hostile payloads for one inbox (or one service's decoder)."""

    def __init__(
        self,
        rng: random.Random,
        templates: Sequence[Message],
        union: Any,
        *,
        json_artifacts: bool = False,
    ) -> None:
        self.rng = rng
        self.templates = [
            (msgspec.to_builtins(t), mi.type_info(type(t))) for t in templates
        ]
        self.own_tags = _tags_of(union)
        self.foreign_tags = [t for t in ALL_TAGS if t not in self.own_tags]
        self.single = not isinstance(mi.type_info(union), mi.UnionType)
        self.field_names = sorted(
            {f.encode_name for _, info in self.templates for f in _fields(info)}
        )
        self.classes: list[Callable[[], Hostile]] = [
            self.random_bytes,
            self.random_msgpack,
            self.truncated,
            self.trailing,
            self.wrong_tag,
            self.huge_string,
            self.bad_number,
            self.edge_int,
            self.invalid_utf8,
            self.bin_for_str,
            self.deep_value,
            self.deep_unknown,
        ]
        if json_artifacts:
            self.classes.append(self.deep_json_artifact)

    def __call__(self, n: int) -> Hostile:
        if n % 97 == 50:  # now and then, right at the bus's size limit
            return self.near_limit()
        return self.classes[n % len(self.classes)]()

    # helpers

    def _template(self) -> tuple[dict[str, Any], mi.StructType]:
        value, info = self.rng.choice(self.templates)
        assert isinstance(value, dict)
        assert isinstance(info, mi.StructType)
        return value, info

    def _plant(
        self, kind: str, pick: Callable[[Any, mi.Type], bool], make: Callable[[], Any]
    ) -> Hostile:
        """Replace one field (chosen among those ``pick`` likes, else any) by
        ``make()``; "reject" when the field's type cannot hold that value."""
        value, info = self._template()
        every = list(slots(value, info))
        liked = [(p, t) for p, t in every if pick(_get(value, p), t)]
        if not every:  # a request without fields (StateHash, SimStatus)
            return self.random_msgpack()
        path, ftype = self.rng.choice(liked or every)
        planted = make()
        data = _enc(_put(value, path, _wire(planted)))
        expect: Expect = "maybe" if may_accept(ftype, planted) else "reject"
        return Hostile(f"{kind}@{'.'.join(map(str, path))}", data, expect)

    def _huge(self) -> str:
        return self.rng.randbytes(self.rng.randint(MIB, 4 * MIB) // 2).hex()

    # the classes

    def random_bytes(self) -> Hostile:
        size = self.rng.choice((0, 1, 2, 7, 64, 255, 4096))
        return Hostile(
            "random-bytes", self.rng.randbytes(self.rng.randint(0, size)), "reject"
        )

    def near_limit(self) -> Hostile:
        size = MAX_PAYLOAD - self.rng.randrange(0, 512)
        return Hostile("near-limit-bytes", self.rng.randbytes(size), "reject")

    def _random_value(self, depth: int = 0) -> Any:
        r = self.rng.randrange(10 if depth < 3 else 7)
        choices: list[Any] = [
            None,
            self.rng.random() < 0.5,
            self.rng.randint(-(2**63), 2**64 - 1),
            self.rng.choice((math.nan, math.inf, -math.inf, 1e308, -0.0, 0.5)),
            self.rng.randbytes(self.rng.randint(0, 16)).hex(),
            self.rng.randbytes(self.rng.randint(0, 16)),
            AT.isoformat(),
        ]
        if r < len(choices):
            return choices[r]
        if r == 7:
            return [
                self._random_value(depth + 1) for _ in range(self.rng.randint(0, 4))
            ]
        return {
            self.rng.choice(self.field_names): self._random_value(depth + 1)
            for _ in range(self.rng.randint(0, 4))
        }

    def random_msgpack(self) -> Hostile:
        """A map of real field names holding random values, under some tag."""
        body = {
            self.rng.choice(self.field_names): self._random_value()
            for _ in range(self.rng.randint(0, 8))
        }
        which = self.rng.randrange(3)
        if which == 0:
            body["kind"] = self.rng.choice(sorted(self.own_tags))
            return Hostile("random-fields", _enc(body), "maybe")
        if which == 1 and self.foreign_tags:
            body["kind"] = self.rng.choice(self.foreign_tags)
            return Hostile("random-fields-foreign-tag", _enc(body), "reject")
        body.pop("kind", None)
        expect: Expect = "maybe" if self.single else "reject"
        if self.rng.random() < 0.3:
            top = self._random_value()
            if not isinstance(top, dict):
                return Hostile("random-msgpack", _enc(top), "reject")
        return Hostile("random-fields-untagged", _enc(body), expect)

    def truncated(self) -> Hostile:
        data = _enc(self._template()[0])
        return Hostile("truncated", data[: self.rng.randrange(len(data))], "reject")

    def trailing(self) -> Hostile:
        data = _enc(self._template()[0]) + self.rng.randbytes(self.rng.randint(1, 16))
        return Hostile("trailing-bytes", data, "reject")

    def wrong_tag(self) -> Hostile:
        value, _ = self._template()
        own = str(value["kind"])
        options: list[tuple[str, Callable[[], Any]]] = [
            ("garbage-tag", lambda: self.rng.randbytes(self.rng.randint(1, 24)).hex()),
            ("empty-tag", lambda: ""),
            ("int-tag", lambda: self.rng.randint(-5, 5)),
            ("nil-tag", lambda: None),
            ("huge-tag", self._huge),
            ("bin-tag", lambda: Bin(own.encode())),
            ("utf8-tag", lambda: BadUtf8(own.encode() + b"\xff")),
            ("deep-tag", lambda: Deep(self.rng.randint(5_000, 20_000))),
            ("case-tag", own.upper),
        ]
        if self.foreign_tags:
            options.append(("foreign-tag", lambda: self.rng.choice(self.foreign_tags)))
        kind, make = self.rng.choice(options)
        return Hostile(kind, _enc({**value, "kind": _wire(make())}), "reject")

    def huge_string(self) -> Hostile:
        return self._plant("huge-string", lambda v, _t: isinstance(v, str), self._huge)

    def bad_number(self) -> Hostile:
        def constrained(_v: Any, t: mi.Type) -> bool:
            members = t.types if isinstance(t, mi.UnionType) else (t,)
            return any(
                isinstance(m, mi.FloatType) and (m.ge, m.le) != (None, None)
                for m in members
            )

        def any_float(v: Any, _t: mi.Type) -> bool:
            return isinstance(v, float)

        # Mostly confidences and other bounded numbers (must reject); now and then any
        # float, where NaN may be valid (trust maps have no bounds).
        pick = constrained if self.rng.random() < 0.75 else any_float
        values = (math.nan, math.inf, -math.inf, -1.0, 2.0, 1e308, -1e-300, -0.0)
        return self._plant("bad-number", pick, lambda: self.rng.choice(values))

    def edge_int(self) -> Hostile:
        values = (-1, -(2**63), 2**63 - 1, 2**64 - 1, 0, math.nan)
        return self._plant(
            "edge-int",
            lambda v, _t: isinstance(v, int) and not isinstance(v, bool),
            lambda: self.rng.choice(values),
        )

    def invalid_utf8(self) -> Hostile:
        value, _ = self._template()

        def bad() -> BadUtf8:
            return BadUtf8(
                b"ok " + self.rng.choice(BAD_UTF8) + b" " + self.rng.choice(BAD_UTF8)
            )

        if self.rng.random() < 0.2:  # as a map key: an unknown key, which msgpack skips
            items = [(_enc(k), _enc(v)) for k, v in value.items()]
            items.insert(
                self.rng.randrange(len(items) + 1), (bytes(bad().raw()), _enc(1))
            )
            return Hostile("invalid-utf8-key", _raw_map(items), "maybe")
        return self._plant("invalid-utf8", lambda v, _t: isinstance(v, str), bad)

    def bin_for_str(self) -> Hostile:
        value, info = self._template()
        strings = [
            (p, t) for p, t in slots(value, info) if isinstance(_get(value, p), str)
        ]
        if not strings:
            return self.random_msgpack()
        path, ftype = self.rng.choice(strings)
        planted = Bin(str(_get(value, path)).encode())
        data = _enc(_put(value, path, planted.raw()))
        expect: Expect = "maybe" if may_accept(ftype, planted) else "reject"
        return Hostile(f"bin-for-str@{'.'.join(map(str, path))}", data, expect)

    def deep_value(self) -> Hostile:
        def make() -> Deep:
            return Deep(self.rng.randint(5_000, 20_000), self.rng.random() < 0.3)

        return self._plant("deep-value", lambda _v, _t: True, make)

    def deep_unknown(self) -> Hostile:
        """A valid message plus an unknown key holding a 10k-deep structure. Unknown
        keys are ignored by the contract, so this may be valid; with a foreign tag
        too, it is not."""
        value, _ = self._template()
        deep = Deep(self.rng.randint(5_000, 20_000), self.rng.random() < 0.5)
        items = [(_enc(k), _enc(v)) for k, v in value.items()]
        items.insert(
            self.rng.randrange(len(items) + 1), (_enc("x-fuzz"), bytes(deep.raw()))
        )
        if self.foreign_tags and self.rng.random() < 0.3:
            tag = self.rng.choice(self.foreign_tags)
            items = [(k, _enc(tag) if k == _enc("kind") else v) for k, v in items]
            return Hostile("deep-unknown-foreign-tag", _raw_map(items), "reject")
        return Hostile("deep-unknown-key", _raw_map(items), "maybe")

    def deep_json_artifact(self) -> Hostile:
        message = Observe(
            obs_id=f"obs-deep-{self.rng.randrange(10**9)}",
            author=AUTHOR,
            at=AT,
            text=_deep_json(self.rng),
            role=self.rng.choice(("artifact", "output", "tool")),
            media_type="json",
        )
        return Hostile("deep-json-artifact", encode(message), "maybe")


def _fields(info: mi.Type) -> tuple[mi.Field, ...]:
    return info.fields if isinstance(info, mi.StructType) else ()


# --- templates: one valid message of every kind each inbox and service takes ----------


def _decl() -> WorldDecl:
    text = CREW_TOML.read_text().replace('id = "enterprise"', f'id = "{WORLD}"', 1)
    return parse_declaration(text)


def _evidence(n: int, belief_id: str = "b-1") -> Evidence:
    return Evidence(
        id=f"ev-{n}",
        belief_id=belief_id,
        direction="supports",
        kind="citation",
        source="crm",
        observed_at=AT,
        text="seen in the CRM",
        artifact="obs-1",
        author=AUTHOR,
    )


def _belief(belief_id: str, version: int = 3) -> Belief:
    return Belief(
        id=belief_id,
        text=f"The Soteria pilot converts in March ({belief_id})",
        type="claim",
        confidence=0.62,
        evidence_weight=4.0,
        uncertainty=0.1,
        label="pilot",
        flags=("stable",),
        author=AUTHOR,
        created_at=AT,
        updated_at=AT,
        version=version,
        origin="op-1",
        prior=0.7,
        fragility=0.1,
        evidence_count=1,
        valid_from=AT,
        effective_confidence=0.6,
    )


def _edge() -> BeliefEdge:
    return BeliefEdge(
        id="e-1", type="supports", source="b-2", target="b-1", confidence=0.6, at=AT
    )


def op_templates() -> list[Message]:
    return [
        AddBelief(
            op_id="op-1",
            belief_id="b-1",
            text="The pilot converts",
            confidence=0.7,
            source="crm",
            author=AUTHOR,
            at=AT,
        ),
        AddBelief(
            op_id="op-2",
            belief_id="b-2",
            text="Budget is approved",
            type="assumption",
            confidence=0.4,
            author=AUTHOR,
            at=AT,
        ),
        AddEvidence(op_id="op-3", evidence=_evidence(1), author=AUTHOR, at=AT),
        Statement(
            op_id="op-4",
            belief_id="b-1",
            text="The pilot converts",
            evidence=_evidence(2),
            author=AUTHOR,
            at=AT,
        ),
        SetTrust(op_id="op-5", source="crm", trust=0.5, author=AUTHOR, at=AT),
        LinkBeliefs(op_id="op-6", edge=_edge(), author=AUTHOR, at=AT),
        CloseBelief(
            op_id="op-7",
            belief_id="b-2",
            how="retracted",
            reason="superseded",
            author=AUTHOR,
            at=AT,
        ),
        DeclareWorld(op_id="op-8", declaration=_decl(), author=AUTHOR, at=AT),
        ResolveContradiction(
            op_id="op-rc",
            contradiction_id="c-0123456789abcdef",
            reason="checked",
            winner="b-1",
            author=AUTHOR,
            at=AT,
        ),
        UpsertEntity(
            op_id="op-9",
            entity=PILOT,
            fields={"status": "active", "phase": "pilot"},
            author=AUTHOR,
            at=AT,
        ),
        SetField(
            op_id="op-10",
            entity=PILOT,
            field="status",
            value="won",
            expect_version=2,
            author=AUTHOR,
            at=AT,
        ),
        AddEdge(
            op_id="op-11",
            edge=Edge(id="edge-1", type="works_on", source="agent:ada", target=PILOT),
            author=AUTHOR,
            at=AT,
        ),
        RemoveEdge(op_id="op-12", edge_id="edge-1", author=AUTHOR, at=AT),
        PutWork(
            op_id="op-13",
            work_id="w-1",
            work_kind="research_request",
            assigned_to="spock",
            goal="Find the budget owner",
            priority=2,
            due_at=AT,
            requested_by=AUTHOR,
            author=AUTHOR,
            at=AT,
        ),
        AckInbox(op_id="op-14", message_ids=["m-1", "m-2"], author=AUTHOR, at=AT),
    ]


def observe_templates() -> list[Message]:
    claims = {
        "claims": [{"text": "Soteria signs in March", "type": "claim"}],
        "evidence": [
            {
                "belief": "Soteria signs in March",
                "direction": "supports",
                "kind": "citation",
            }
        ],
    }
    return [
        Observe(
            obs_id="obs-1",
            author=AUTHOR,
            at=AT,
            source="notes.md",
            text=(
                "The pilot converts in March. Is the budget approved? Churn might rise."
            ),
            media_type="markdown",
        ),
        Observe(
            obs_id="obs-2",
            author=AUTHOR,
            at=AT,
            text=json.dumps(claims),
            media_type="json",
        ),
        Observe(
            obs_id="obs-3",
            author=AUTHOR,
            at=AT,
            role="tool",
            media_type="json",
            text='{"tool": "crm", "result": "3 pilots are active."}',
        ),
    ]


def posterior_templates() -> list[Message]:
    goal = msgspec.structs.replace(_belief("b-2"), type="goal", confidence=None)
    return [
        PosteriorUpdate(
            belief=_belief("b-1"),
            cause="op-3",
            cause_seq=3,
            evidence=[_evidence(1)],
            trust={"crm": 0.5},
        ),
        PosteriorUpdate(belief=goal, cause="op-2", cause_seq=2),
    ]


def change_templates() -> list[Message]:
    status = FieldState(value="active", version=2, author=AUTHOR, at=AT)
    return [
        BeliefChanged(
            belief=_belief("b-1"), evidence=[_evidence(1)], trust={"crm": 0.5}
        ),
        BeliefEdgeChanged(
            edge=msgspec.structs.replace(_edge(), version=6, author=AUTHOR)
        ),
        EntityChanged(
            entity=Entity(
                id=PILOT, type="project", fields={"status": status}, version=2
            )
        ),
        EdgeChanged(
            edge=Edge(
                id="edge-1",
                type="works_on",
                source="agent:ada",
                target=PILOT,
                version=3,
                author=AUTHOR,
            )
        ),
        WorldDeclared(declaration=_decl(), version=1),
        InboxChanged(agent="spock", pending=2, recent=["work w-1"], seq=4),
    ]


def _transition(n: int | str) -> Transition:
    return Transition(
        id=f"tr-{n}",
        lineage="lin-a",
        task="book a flight",
        context=f"assistant: {ASK}",
        action=ASK,
        observation="To Lisbon, please.",
        pairing="id",
        source=f"run.traj#{n}",
    )


# --- the per-inbox fuzzer -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InboxCase:
    name: str
    actor: str
    input_index: int
    subject: str
    union: Any
    templates: Callable[[], list[Message]]
    good: Callable[[int], Message]
    stateful: bool = True


def _good_op(n: int) -> Message:
    return AddBelief(
        op_id=f"op-good-{n}",
        author=AUTHOR,
        at=AT,
        belief_id=f"good-{n}",
        text=f"good {n}",
    )


INBOXES: Final = (
    InboxCase(
        "extractor",
        "extractor",
        0,
        obs(WORLD, AUTHOR),
        ExtractorInbox,
        observe_templates,
        lambda n: Observe(
            obs_id=f"obs-good-{n}", author=AUTHOR, at=AT, text=f"Pilot {n} converts."
        ),
        stateful=False,
    ),
    InboxCase(
        "fusion", "fusion", 0, ops(WORLD, AUTHOR), OpsInbox, op_templates, _good_op
    ),
    InboxCase(
        "materializer-ops",
        "materializer",
        0,
        ops(WORLD, AUTHOR),
        OpsInbox,
        op_templates,
        _good_op,
    ),
    InboxCase(
        "materializer-posteriors",
        "materializer",
        1,
        derived(WORLD, "posterior", "0"),
        MaterializerInbox,
        posterior_templates,
        lambda n: PosteriorUpdate(
            belief=_belief(f"good-{n}", n), cause=f"op-good-{n}", cause_seq=n
        ),
    ),
    InboxCase(
        "projector",
        "projector",
        0,
        state(WORLD, "belief"),
        ProjectorInbox,
        change_templates,
        lambda n: BeliefChanged(belief=_belief(f"good-{n}", n)),
    ),
    InboxCase(
        "simulator",
        "simulator",
        0,
        derived(WORLD, "transition", "0"),
        SimulatorInbox,
        lambda: [_transition(1), _transition(2)],
        lambda n: _transition(f"good-{n}"),
    ),
)


@dataclass(slots=True)
class Tally:
    name: str
    inputs: int = 0
    dead: int = 0
    accepted: int = 0
    crashes: list[tuple[str, str]] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    by_kind: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str) -> None:
        self.inputs += 1
        kind = kind.split("@")[0]
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1

    def crash(self, cause: str, h: Hostile | str) -> None:
        self.crashes.append((cause, h if isinstance(h, str) else h.describe()))

    def problem(self, what: str, h: Hostile | str) -> None:
        self.problems.append((what, h if isinstance(h, str) else h.describe()))

    def summary(self, elapsed: float, rejected: str = "dead-lettered") -> str:
        return (
            f"fuzz {self.name}: {self.inputs} inputs, {self.dead} {rejected}, "
            f"{self.accepted} accepted, {len(self.crashes)} crashes "
            f"({elapsed:.1f}s, seed {SEED})"
        )

    def verdict(self) -> str:
        """Failures grouped by cause and input class, one sample each."""
        groups: dict[str, tuple[int, str]] = {}
        for label, found in (("crash", self.crashes), ("failure", self.problems)):
            for what, sample in found:
                key = f"{label}: {what} <- {sample.split(' (', 1)[0]}"
                count, first = groups.get(key, (0, sample))
                groups[key] = (count + 1, first)
        return "\n".join(
            [
                f"{self.name}: {len(self.crashes)} crashes, "
                f"{len(self.problems)} other failures; {_reproduce()}",
                *(
                    f"  {count} x {key}\n      e.g. {sample[:160]}"
                    for key, (count, sample) in sorted(groups.items())
                ),
            ]
        )


def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    """Keep worldline's own error logs out: the test counts and reports every crash
    itself, and a log record kept by pytest holds the traceback, and with it the
    failed call's LMDB read transaction (126 of those fill the reader table)."""
    caplog.set_level(logging.CRITICAL, logger="worldline")


def snapshot(store: Store) -> tuple[int, str]:
    """(entries, sha256) of the whole state database."""
    digest = hashlib.sha256()
    count = 0
    with store.reader() as reader:
        for key, value in reader.scan(b""):
            count += 1
            digest.update(len(key).to_bytes(8, "big") + key)
            digest.update(len(value).to_bytes(8, "big") + value)
    return count, digest.hexdigest()


class InboxFuzzer:
    def __init__(self, case: InboxCase, tmp_path: Path) -> None:
        spec = build(case.actor)
        self.case = case
        self.inp: Input[Any] = spec.inputs[case.input_index]
        self.store = Store(tmp_path / case.name, actor=spec.instance)
        self.dlq = dlq(WORLD, spec.instance)
        self.seq = itertools.count(1)
        self.tally = Tally(case.name)

    def close(self) -> None:
        self.store.close()

    def _apply(self, deliveries: list[Delivery]) -> list[tuple[bool, list[OutboxItem]]]:
        result = self.store.apply_batch(self.inp, deliveries, AT)
        self.store.clear_outbox([item.key for item in result.outbox])
        return [(ok, result.outbox) for ok in result.accepted]

    def feed(self, inputs: list[Hostile]) -> None:
        """Apply one batch of hostile input and check what became of each."""
        if not inputs:
            return
        deliveries = [
            Delivery(next(self.seq), self.case.subject, h.data) for h in inputs
        ]
        try:
            outcomes: list[tuple[bool, list[OutboxItem]] | None] = list(
                self._apply(deliveries)
            )
        except Exception:  # a crash: find which inputs cause it, one by one
            outcomes = []
            for h, d in zip(inputs, deliveries, strict=True):
                try:
                    outcomes.extend(self._apply([d]))
                except Exception as exc:
                    self.tally.crash(f"apply_batch raised {exc!r:.120}", h)
                    outcomes.append(None)
        for h, d, outcome in zip(inputs, deliveries, outcomes, strict=True):
            self.tally.count(h.kind)
            if outcome is not None:
                self._check(h, d, *outcome)

    def _check(
        self, h: Hostile, d: Delivery, ok: bool, outbox: list[OutboxItem]
    ) -> None:
        if ok:
            self.tally.accepted += 1
            if h.expect == "reject":
                self.tally.problem("hostile input accepted", h)
            return
        self.tally.dead += 1
        msg_id = f"dlq:{self.inp.consumer.durable}:{d.seq}"
        items = [i for i in outbox if i.msg_id == msg_id]
        if len(items) != 1 or items[0].subject != self.dlq:
            self.tally.problem(f"no dead letter on {self.dlq}", h)
            return
        letter = msgspec.msgpack.decode(items[0].payload, type=DeadLetter)
        if not letter.reason or letter.stream_seq != d.seq:
            self.tally.problem("dead letter without a reason or sequence", h)
        if letter.payload_bytes:  # cut to travel: the input stays in its stream
            digest = hashlib.sha256(d.data).hexdigest()
            if (
                letter.payload_bytes != len(d.data)
                or letter.payload_sha256 != digest
                or not d.data.startswith(letter.payload)
            ):
                self.tally.problem("cut dead letter does not match its input", h)
        elif letter.payload != d.data:
            self.tally.problem("dead letter does not carry its input", h)
        if letter.reason.startswith("internal error"):
            self.tally.crash(f"handler raised: {letter.reason:.120}", h)
        if len(d.data) <= MAX_PAYLOAD < len(items[0].payload):
            self.tally.problem(
                f"the dead letter of an input that fits the {MAX_PAYLOAD}-byte bus "
                "limit exceeds it (it can never be published)",
                f"{h.describe()} -> {len(items[0].payload)}-byte dead letter",
            )

    def good(self, n: int) -> None:
        """A known-good message still applies after the hostile batch."""
        before = snapshot(self.store)
        data = encode(self.case.good(n))
        result = self.store.apply_batch(
            self.inp, [Delivery(next(self.seq), self.case.subject, data)], AT
        )
        self.store.clear_outbox([item.key for item in result.outbox])
        changed = snapshot(self.store) != before
        if result.accepted != [True] or (
            changed != self.case.stateful or not (changed or result.outbox)
        ):
            self.tally.problem(
                "known-good message not applied after hostile input",
                f"#{n}: accepted={result.accepted}, state changed={changed}, "
                f"outputs={len(result.outbox)}",
            )


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("case", INBOXES, ids=[c.name for c in INBOXES])
def test_hostile_input_is_dead_lettered_and_changes_nothing(
    case: InboxCase, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _quiet(caplog)
    started = time.monotonic()
    fuzzer = InboxFuzzer(case, tmp_path)
    templates = case.templates()
    try:
        # Some state first, so that valid-looking input reaches real code paths.
        fuzzer._apply(
            [Delivery(next(fuzzer.seq), case.subject, encode(t)) for t in templates]
        )
        generate = Generator(
            random.Random(f"{SEED}:{case.name}"),
            templates,
            case.union,
            json_artifacts=case.name == "extractor",
        )
        made = 0
        while made < INPUTS:
            chunk = [generate(made + i) for i in range(min(BATCH, INPUTS - made))]
            made += len(chunk)
            before = snapshot(fuzzer.store)
            fuzzer.feed([h for h in chunk if h.expect == "reject"])
            if snapshot(fuzzer.store) != before:
                fuzzer.tally.problem(
                    "state changed under a batch of purely hostile input",
                    f"inputs {made - len(chunk)}-{made - 1}",
                )
            fuzzer.feed([h for h in chunk if h.expect == "maybe"])
            fuzzer.good(made)
    finally:
        fuzzer.close()
    tally = fuzzer.tally
    print(tally.summary(time.monotonic() - started))
    print(f"  by class: {dict(sorted(tally.by_kind.items()))}")
    assert tally.inputs == INPUTS
    crashes, failures = len(tally.crashes), len(tally.problems)
    assert (crashes, failures) == (0, 0), tally.verdict()


BATCHED: Final = tuple(c for c in INBOXES if batch_subject(c.subject) is not None)


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("case", BATCHED, ids=[c.name for c in BATCHED])
def test_hostile_batches_are_dead_lettered_item_by_item(
    case: InboxCase, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Batches (many outputs in one stream message) from a hostile publisher: random
    bytes, hostile items, good items claiming another world. Each batch is rejected,
    each bad item dead-lettered on its own, nothing changes state, nothing crashes."""
    _quiet(caplog)
    fuzzer = InboxFuzzer(case, tmp_path)
    rng = random.Random(f"{SEED}:batch:{case.name}")
    generate = Generator(rng, case.templates(), case.union, json_artifacts=False)
    outer = batch_subject(case.subject)
    assert outer is not None
    foreign = case.subject.replace(f".{WORLD}.", ".elsewhere.", 1)
    durable = fuzzer.inp.consumer.durable
    tried = 0
    try:
        fuzzer._apply(
            [
                Delivery(next(fuzzer.seq), case.subject, encode(t))
                for t in case.templates()
            ]
        )
        while tried < INPUTS:
            shape = tried % 3
            if shape == 0:  # not a batch at all
                items: list[tuple[str, bytes]] = []
                data = generate(tried).data
            elif shape == 1:  # a batch of hostile items
                hostile = [generate(tried + k) for k in range(rng.randint(1, 5))]
                items = [
                    (case.subject, h.data) for h in hostile if h.expect == "reject"
                ]
                if not items:
                    tried += 1
                    continue
                data = encode_batch(items)
            else:  # good items smuggled in for another world
                items = [(foreign, encode(case.good(tried)))]
                data = encode_batch(items)
            before = snapshot(fuzzer.store)
            seq = next(fuzzer.seq)
            try:
                result = fuzzer.store.apply_batch(
                    fuzzer.inp, [Delivery(seq, outer, data, batch=True)], AT
                )
            except Exception as exc:
                fuzzer.tally.crash(f"apply_batch raised {exc!r:.120}", repr(data[:48]))
                tried += 1
                continue
            fuzzer.store.clear_outbox([i.key for i in result.outbox])
            fuzzer.tally.count(f"batch-shape-{shape}")
            letters = sorted(i.msg_id for i in result.outbox if i.subject == fuzzer.dlq)
            expected = sorted(
                f"dlq:{durable}:{seq}.{k}" for k in range(max(1, len(items)))
            )
            if result.accepted != [False] or letters != expected:
                fuzzer.tally.problem(
                    f"batch shape {shape}: accepted={result.accepted}, "
                    f"letters={letters}, expected {expected}",
                    repr(data[:48]),
                )
            if snapshot(fuzzer.store) != before:
                fuzzer.tally.problem("a rejected batch changed state", repr(data[:48]))
            tried += 1
        fuzzer.good(tried)
    finally:
        fuzzer.close()
    tally = fuzzer.tally
    print(
        f"{case.name}: {sum(tally.by_kind.values())} hostile batches, "
        f"{dict(sorted(tally.by_kind.items()))}"
    )
    assert (len(tally.crashes), len(tally.problems)) == (0, 0), tally.verdict()


# --- services: decoder + serve through the runtime's _answer --------------------------


def _make_index(tmp_path: Path) -> Path:
    after_ask = f"assistant: {ASK}\nuser: To Lisbon, please."
    transitions = [
        Transition(
            id="tr-a1",
            lineage="lin-a",
            task="book a flight",
            action=ASK,
            observation="To Lisbon, please.",
        ),
        Transition(
            id="tr-a2",
            lineage="lin-a",
            task="book a flight",
            context=after_ask,
            action="Booked, anything else?",
            observation="Thanks, that's all.",
            final=True,
        ),
        Transition(
            id="tr-b1",
            lineage="lin-b",
            task="book a flight",
            action=ASK,
            observation="Madrid.",
        ),
    ]
    out = tmp_path / "index"
    transition_index.save(transition_index.build(transitions, held_out=0.0), out)
    return out


def _indexed_simulator(tmp_path: Path) -> tuple[Service[Any], ...]:
    """The simulator's services over a real index, with a seeded rng and a fixed
    clock (so session ids, and the inputs naming them, are deterministic)."""
    sessions = SessionService(
        transition_index.load(_make_index(tmp_path)),
        rng=random.Random(SEED),
        clock=lambda: AT,
    )
    return tuple(
        Service(rpc_pattern(verb), "simulator", SIMULATOR_RPC, sessions.serve)
        for verb in ("sim.status", "sim.start", "sim.step", "sim.end")
    )


@dataclass(frozen=True, slots=True)
class ServiceCase:
    name: str
    actor: str
    union: Any
    indexed: bool = False


SERVICES: Final = (
    ServiceCase("materializer", "materializer", MaterializerRpc),
    ServiceCase("projector", "projector", ProjectorRpc),
    ServiceCase("simulator", "simulator", SimulatorRpc),
    ServiceCase("simulator-indexed", "simulator", SimulatorRpc, indexed=True),
)


def _request_templates(case: ServiceCase, session_id: str) -> list[Message]:
    if case.actor == "materializer":
        return [StateHash(), OpStatus(seq=3), OpStatus(seq=10**6)]
    if case.actor == "projector":
        return [
            GetBelief(belief_id="b-1", at=AT),
            ListBeliefs(
                type="claim",
                limit=10,
                label="pilot",
                flag="stable",
                status="any",
                at=AT,
            ),
            ReadWorld(entity_type="project", at=AT),
            GetView(agent=AUTHOR),
            TraceBelief(belief_id="b-1"),
            Before(agent=AUTHOR, query="is the pilot converting?", at=AT),
            ListContradictions(status="all", at=AT, as_of=AT, limit=10),
            GetCalibration(bins=5, limit=10),
            GetBelief(belief_id="b-1", at=AT, as_of=AT),
        ]
    return [
        SimStatus(),
        SimStart(task="book a flight", context="", exclude_lineages=["lin-b"]),
        SimStep(session_id=session_id, message={"role": "assistant", "content": ASK}),
        SimEnd(session_id=session_id),
    ]


def _seed(store: Store, actor: str) -> None:
    """Give the actor some state to answer from."""
    seeds: dict[str, list[tuple[int, str, list[Message]]]] = {
        "materializer": [
            (0, ops(WORLD, AUTHOR), op_templates()),
            (1, derived(WORLD, "posterior", "0"), posterior_templates()),
        ],
        "projector": [(0, state(WORLD, "belief"), change_templates())],
        "simulator": [(0, derived(WORLD, "transition", "0"), [_transition(1)])],
    }
    spec = build(actor)
    seq = itertools.count(1)
    for index, subject, messages in seeds[actor]:
        deliveries = [Delivery(next(seq), subject, encode(m)) for m in messages]
        result = store.apply_batch(spec.inputs[index], deliveries, AT)
        store.clear_outbox([item.key for item in result.outbox])


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("case", SERVICES, ids=[c.name for c in SERVICES])
def test_hostile_requests_get_an_answer(
    case: ServiceCase,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("WORLDLINE_LLM_URL", raising=False)  # the local provider only
    _quiet(caplog)
    started = time.monotonic()
    spec = build(case.actor)
    services = _indexed_simulator(tmp_path) if case.indexed else spec.services
    store = Store(tmp_path / case.name, actor=spec.instance)
    tally = Tally(f"{case.name} rpc")
    try:
        _seed(store, case.actor)
        session_id = "no-session"
        if case.indexed:
            subject = rpc_pattern("sim.start").replace("*", WORLD)
            started_reply = _answer(
                store, services[1], subject, encode(SimStart(task="book a flight"))
            )
            assert isinstance(started_reply, SimStarted), started_reply
            session_id = started_reply.session_id
        generate = Generator(
            random.Random(f"{SEED}:rpc:{case.name}"),
            _request_templates(case, session_id),
            case.union,
        )
        before = snapshot(store)
        for n in range(INPUTS):
            service = services[n % len(services)]
            h = generate(n)
            tally.count(h.kind)
            subject = service.subject.replace("*", WORLD)
            try:
                reply = _answer(store, service, subject, h.data)
                if reply is not None:  # None: another partition's world (never here)
                    encode(reply)
            except Exception as exc:
                tally.crash(f"_answer raised {exc!r:.120} on {subject}", h)
                continue
            if not isinstance(reply, Message):
                tally.problem(f"not a Message: {reply!r:.100}", h)
            elif isinstance(reply, RpcError):
                tally.dead += 1
                if reply.code == "internal":
                    tally.crash(f"serve raised: {reply.message:.120}", h)
            else:
                tally.accepted += 1
                if h.expect == "reject":
                    tally.problem("hostile request answered", h)
        if snapshot(store) != before:
            tally.problem("serving requests changed the state", case.name)
    finally:
        store.close()
    print(tally.summary(time.monotonic() - started, rejected="rejected"))
    print(f"  by class: {dict(sorted(tally.by_kind.items()))}")
    assert tally.inputs == INPUTS
    crashes, failures = len(tally.crashes), len(tally.problems)
    assert (crashes, failures) == (0, 0), tally.verdict()


# --- the world declaration ------------------------------------------------------------

TOML_BITS: Final = (
    "[", "]", "[[", "]]", "{", "}", "=", '"', "'", '"""', "'''", "#", "\n", ",", ".",
    "\\", "\\u", "\\U0011FFFF", " ", "\t", "\r\n", "\x00", "\x7f", "\ufeff", "\ud800",
    "nan", "inf", "-inf", "+nan", "1e999", "0x", "1979-05-27T07:32:00Z", "true",
    "world", "id", "entities", "fields", "rules", "authority", "grants", "dampening",
)  # fmt: skip

TOML_VALUES: Final = (
    "nan", "inf", "-inf", "-1", "2", "1e308", "-0.0", "9223372036854775808", '""',
    "true", "[]", "{}", '[1, "a"]', "{ a = 1 }", "1979-05-27T07:32:00Z", "07:32:00",
    '"\\u0000"', '"\\ud800"', "'''\n'''",
)  # fmt: skip


class TomlGenerator:
    """Random, mutated, mistyped, deep and oversized TOML (and files of it)."""

    def __init__(self, rng: random.Random, base: str) -> None:
        self.rng = rng
        self.base = base
        self.lines = base.splitlines()
        self.classes: list[Callable[[], tuple[str, str | bytes]]] = [
            self.random_text,
            self.random_unicode,
            self.mutated,
            self.truncated,
            self.wrong_value,
            self.huge_value,
            self.deep,
            self.oversized_file,
            self.bad_utf8_file,
        ]

    def __call__(self, n: int) -> tuple[str, str | bytes]:
        return self.classes[n % len(self.classes)]()

    def random_text(self) -> tuple[str, str | bytes]:
        bits = [self.rng.choice(TOML_BITS) for _ in range(self.rng.randint(0, 200))]
        return "random-toml-bits", "".join(bits)

    def random_unicode(self) -> tuple[str, str | bytes]:
        size = self.rng.randint(0, 2000)
        return "random-unicode", "".join(
            chr(self.rng.randrange(0x110000)) for _ in range(size)
        )

    def mutated(self) -> tuple[str, str | bytes]:
        text = self.base
        for _ in range(self.rng.randint(1, 8)):
            at = self.rng.randrange(len(text) + 1)
            match self.rng.randrange(4):
                case 0:
                    text = text[:at] + text[at + self.rng.randint(1, 40) :]
                case 1:
                    text = text[:at] + self.rng.choice(TOML_BITS) + text[at:]
                case 2:
                    lines = text.splitlines()
                    if lines:
                        i = self.rng.randrange(len(lines))
                        lines.insert(self.rng.randrange(len(lines)), lines[i])
                    text = "\n".join(lines)
                case _:
                    text = text[:at] + text[at:][::-1][:50] + text[at + 50 :]
        return "mutated", text

    def truncated(self) -> tuple[str, str | bytes]:
        return "truncated", self.base[: self.rng.randrange(len(self.base) + 1)]

    def _replace_value(self, value: str) -> str:
        lines = list(self.lines)
        assignments = [
            i
            for i, line in enumerate(lines)
            if "=" in line and not line.startswith("#")
        ]
        i = self.rng.choice(assignments)
        lines[i] = lines[i].split("=", 1)[0] + "= " + value
        return "\n".join(lines)

    def wrong_value(self) -> tuple[str, str | bytes]:
        return "wrong-value", self._replace_value(self.rng.choice(TOML_VALUES))

    def _huge(self) -> str:
        return self.rng.randbytes(self.rng.randint(MIB, 4 * MIB) // 2).hex()

    def huge_value(self) -> tuple[str, str | bytes]:
        if self.rng.random() < 0.5:
            return "huge-value", self._replace_value(f'"{self._huge()}"')
        return (
            "huge-unknown-key",
            self.base + f'\n[world_extra]\nx = "{self._huge()}"\n',
        )

    def deep(self) -> tuple[str, str | bytes]:
        n = self.rng.randint(1_000, 20_000)
        nested = self.rng.choice(("[" * n + "]" * n, "{ a = " * n + "1" + " }" * n))
        if self.rng.random() < 0.5:
            return "deep-known-key", self._replace_value(nested)
        return "deep-unknown-key", f"x = {nested}\n" + self.base

    def oversized_file(self) -> tuple[str, str | bytes]:
        padding = "#" + "x" * self.rng.randint(MAX_DECLARATION_BYTES, 4 * MIB) + "\n"
        return "oversized-file", (self.base + padding).encode()

    def bad_utf8_file(self) -> tuple[str, str | bytes]:
        raw = self.base.encode()
        at = self.rng.randrange(len(raw) + 1)
        return "bad-utf8-file", raw[:at] + self.rng.choice(BAD_UTF8) + raw[at:]


@pytest.mark.timeout(TIMEOUT)
def test_hostile_declarations_are_rejected_as_bad_requests(tmp_path: Path) -> None:
    started = time.monotonic()
    generate = TomlGenerator(random.Random(f"{SEED}:toml"), CREW_TOML.read_text())
    tally = Tally("declaration")
    file = tmp_path / "world.toml"
    for n in range(INPUTS):
        kind, body = generate(n)
        tally.count(kind)
        try:
            if isinstance(body, bytes):
                file.write_bytes(body)
                decl = load_declaration(file)
            else:
                decl = parse_declaration(body, source="fuzz.toml")
        except BadRequest as exc:
            tally.dead += 1
            if not str(exc):
                tally.problem("BadRequest without a message", kind)
            continue
        except Exception as exc:
            sample = (
                body[:60]
                if isinstance(body, str)
                else body[:60].decode(errors="replace")
            )
            tally.crash(f"{exc!r:.120}", f"{kind} (input starts {sample!r})")
            continue
        tally.accepted += 1
        if not isinstance(decl, WorldDecl):
            tally.problem(f"returned {type(decl)}", kind)
        if isinstance(body, bytes) and len(body) > MAX_DECLARATION_BYTES:
            tally.problem(f"{len(body)}-byte file accepted", kind)
    print(tally.summary(time.monotonic() - started, rejected="rejected"))
    print(f"  by class: {dict(sorted(tally.by_kind.items()))}")
    assert tally.inputs == INPUTS
    crashes, failures = len(tally.crashes), len(tally.problems)
    assert (crashes, failures) == (0, 0), tally.verdict()

"""The world's declaration as fusion holds it: every shard reads every ``DeclareWorld``
of the log and keeps the ones the world accepts, by the rule the materializer applies
(:func:`worldline.actors.belief_model.charter.accept`), so both actors agree on which
declaration is in force at every op.

Fusion uses it for two things: whose voice each evidence item counts as, stamped on the
item when it is recorded (:func:`voiced`; a source the declaration does not let its
reporter report is the reporter's own voice, ``agent:<author>``), and who may set
trust (:mod:`.trusting`).

Keys: ``decl/<world>`` -> the accepted ``WorldDecl`` (msgpack), and
``declsum/<world>`` -> a digest of it, which every evidence item reads instead of the
declaration itself (a loader's declaration may name thousands of sources). A refused
declaration changes nothing here; the materializer answers its author.
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.belief_model import charter
from worldline.actors.runtime.keys import key_part
from worldline.actors.runtime.spec import Step
from worldline.protocols.messages import encode

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Context, Reader
    from worldline.protocols.beliefs import Evidence
    from worldline.protocols.messages import DeclareWorld

__all__ = ["charter_of", "decl_key", "declare", "digest_key", "voiced"]

WORLD_BYTES: Final = 64
_CACHED: Final = 64  # charters kept by digest (one per world in force, typically)
_BY_DIGEST: OrderedDict[bytes, charter.Charter] = OrderedDict()


def _world(world: str) -> str:
    return key_part(world.replace("%", "%25").replace("/", "%2F"), WORLD_BYTES)


@functools.lru_cache(maxsize=256)
def decl_key(world: str) -> bytes:
    return f"decl/{_world(world)}".encode()


@functools.lru_cache(maxsize=256)
def digest_key(world: str) -> bytes:
    return f"declsum/{_world(world)}".encode()


def charter_of(reader: Reader, world: str) -> charter.Charter:
    """The declaration in force in ``world`` (an empty charter when none is), read
    through its digest: the declaration itself is read and compiled once per
    digest, not once per evidence item."""
    digest = reader.get(digest_key(world))
    if digest is None:
        return charter.charter_of(None)
    held = _BY_DIGEST.get(digest)
    if held is None:
        held = charter.charter_of(reader.get(decl_key(world)))
        _BY_DIGEST[digest] = held
        while len(_BY_DIGEST) > _CACHED:
            _BY_DIGEST.popitem(last=False)
    return held


def declare(reader: Reader, op: DeclareWorld, ctx: Context, *, secured: bool) -> Step:
    """Keep ``op``'s declaration if the world accepts it (the materializer's rule);
    otherwise change nothing (a forged author included: the materializer rejects
    it and answers the sender)."""
    if op.author != ctx.author:
        return Step()
    current = charter_of(reader, ctx.world).decl
    try:
        charter.accept(current, op.declaration, ctx.world, op.author, secured=secured)
    except charter.Refused:
        return Step()
    raw = encode(op.declaration)
    digest = hashlib.sha256(raw).hexdigest()[:32].encode()
    return Step(writes={decl_key(ctx.world): raw, digest_key(ctx.world): digest})


def voiced(reader: Reader, world: str, item: Evidence, **recorded: object) -> Evidence:
    """``item`` with its voice as the declaration in force has it (whatever voice
    the client sent), and the ``recorded`` fields set in the same copy."""
    voice = charter_of(reader, world).voice(item.source, item.author)
    return msgspec.structs.replace(item, voice=voice, **recorded)

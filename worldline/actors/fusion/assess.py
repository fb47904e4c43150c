"""Learned source reliability inside fusion (the ``AssessSources`` op).

An ``AssessSources`` op runs the truth-discovery fixed point of
:mod:`worldline.actors.belief_model.reliability` over the world's rival-answer slots:
every supporting evidence item of an active slot answer is a claim ``(slot, answer,
source)``. Each source's learned accuracy ``A`` and independence ``I`` (copy detection)
become a trust multiplier

    learned(s) = vote(A) / vote(PRIOR_ACCURACY) * I
    vote(A)    = max(ln(n A / (1 - A)), 0)

so a source of the prior accuracy that copies nobody keeps weight 1, a reliable one
weighs more, one that is mostly wrong or a copy of another weighs less. It multiplies
the declared trust (``SetTrust``) unless that setting is locked (a lock pins a
source's weight). The estimate is a function of the claim set alone (any order,
replay-identical), computed when the op is applied, so a replay of the log recomputes
the same table.

Sources are learned by voice (:func:`claims_of`): a declared source its reporter may
report is itself, anything else is the reporting agent, ``agent:<author>``.

Keys: ``learned/<world>/<source>`` -> :class:`LearnedSource` (only sources with claims;
the table is replaced whole by each assessment). A shard learns from the slots it owns.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.belief_model import posterior, reliability
from worldline.actors.runtime.keys import key_part

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.beliefs import Evidence

__all__ = [
    "Claim",
    "LearnedSource",
    "claims_of",
    "decode",
    "factor",
    "learned",
    "learned_key",
    "learned_prefix",
    "table",
    "writes",
]

WORLD_BYTES: Final = 64
SOURCE_BYTES: Final = 400


class LearnedSource(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="fusion.learned.v1"
):
    """What an assessment learned about one source."""

    source: str
    accuracy: float  # the probability that an answer it gives is true
    independence: float  # share of its vote left after copy detection (1: none)
    claims: int  # questions it answered
    factor: float  # the trust multiplier: vote(accuracy) / vote(prior) * independence
    # The assessment that learned it (the same in every row of one table): the rounds
    # of the fixed point it ran, and the largest move of an accuracy or copy discount
    # in its last round (at most the tolerance, 1e-6, once converged).
    rounds: int = 0
    change: float = 0.0


_LEARNED = msgspec.msgpack.Decoder(LearnedSource)
_ENCODER = msgspec.msgpack.Encoder()


def _escaped(text: str) -> str:
    return text.replace("%", "%25").replace("/", "%2F")


@functools.lru_cache(maxsize=256)
def learned_prefix(world: str) -> bytes:
    return f"learned/{key_part(_escaped(world), WORLD_BYTES)}/".encode()


def learned_key(world: str, source: str) -> bytes:
    return learned_prefix(world) + key_part(_escaped(source), SOURCE_BYTES).encode()


def factor(accuracy: float, independence: float) -> float:
    """The trust multiplier a learned accuracy and independence give."""
    prior = reliability.vote(reliability.PRIOR_ACCURACY)
    return reliability.vote(accuracy) / prior * independence


def claims_of(slot: str, answer: str, evidence: Iterable[Evidence]) -> list[Claim]:
    """The claims an answer's evidence makes: one per supporting item's voice (its
    source when the declaration lets its reporter report it, else the reporting
    agent: names one agent invented are one claimant, :func:`posterior.voice_of`)."""
    return [
        reliability.Claim(slot, answer, posterior.voice_of(e))
        for e in evidence
        if e.direction == "supports"
    ]


Claim = reliability.Claim


def table(claims: Iterable[Claim]) -> dict[str, LearnedSource]:
    """The learned table for a claim set (any order, repeats ignored)."""
    estimate = reliability.estimate(claims)
    return {
        row.source: LearnedSource(
            source=row.source,
            accuracy=row.accuracy,
            independence=row.independence,
            claims=row.claims,
            factor=factor(row.accuracy, row.independence),
            rounds=estimate.rounds,
            change=estimate.change,
        )
        for row in estimate.sources
    }


def decode(raw: bytes) -> LearnedSource:
    return _LEARNED.decode(raw)


def learned(reader: Reader, world: str, source: str) -> LearnedSource | None:
    raw = reader.get(learned_key(world, source))
    return None if raw is None else _LEARNED.decode(raw)


def writes(
    reader: Reader, world: str, rows: Mapping[str, LearnedSource]
) -> dict[bytes, bytes | None]:
    """Replace the world's learned table with ``rows``."""
    out: dict[bytes, bytes | None] = {
        key: None for key, _ in reader.scan(learned_prefix(world))
    }
    for source, row in rows.items():
        out[learned_key(world, source)] = _ENCODER.encode(row)
    return out

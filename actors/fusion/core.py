"""Fusion core: evidence -> posterior. Pure, synchronous, order-independent.

This is the one place belief math lives; the projector imports it and never re-derives a
number. For now a belief is seeded from an ``AddBelief`` op: a hand-entered confidence
is a weak Beta prior worth :data:`PRIOR_STRENGTH` pseudo-observations (DESIGN.md P7), so
the first real evidence moves it. ``goal`` and ``gap`` carry no probability (P6).

State keys: ``belief/<world>/<belief id>`` -> :class:`FusedBelief`.
Output: :class:`PosteriorUpdate` on ``wl.<world>.derived.posterior.<shard>``.
"""

from __future__ import annotations

import math
import zlib
from typing import Final

import msgspec

from actors.runtime.errors import InvalidInput
from actors.runtime.spec import Context, Outgoing, Reader, Step
from protocols.messages import AddBelief, Belief, OpsInbox, PosteriorUpdate, encode
from protocols.subjects import derived

__all__ = [
    "NO_PROBABILITY",
    "PRIOR_STRENGTH",
    "FusedBelief",
    "belief_key",
    "beta_mean",
    "beta_sd",
    "handle",
    "prior",
    "shard_of",
]

PRIOR_STRENGTH: Final = 2.0
"""Pseudo-observations a stated confidence is worth: weak, so evidence dominates."""

DEFAULT_CONFIDENCE: Final = 0.5
"""Prior for a belief added without a confidence: an open question."""

NO_PROBABILITY: Final = frozenset({"goal", "gap"})
"""Belief types firewalled from the posterior math: intent, not claims about truth."""


class FusedBelief(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="fusion.belief.v1"
):
    """Fusion's stored record of a belief: the Beta parameters behind its posterior."""

    belief: Belief
    alpha: float = 0.0
    beta: float = 0.0
    op_id: str  # the op that created it (a replay of that op is a no-op)


_FUSED = msgspec.msgpack.Decoder(FusedBelief)


def belief_key(world: str, belief_id: str) -> bytes:
    return f"belief/{world}/{belief_id}".encode()


def prior(confidence: float, strength: float = PRIOR_STRENGTH) -> tuple[float, float]:
    """Beta(alpha, beta) with mean ``confidence``, worth ``strength`` observations."""
    return confidence * strength, (1.0 - confidence) * strength


def beta_mean(alpha: float, beta: float) -> float:
    return alpha / (alpha + beta)


def beta_sd(alpha: float, beta: float) -> float:
    """Standard deviation of Beta(alpha, beta): the belief's uncertainty reading."""
    total = alpha + beta
    return math.sqrt(alpha * beta / (total * total * (total + 1.0)))


def shard_of(belief_id: str, shards: int) -> int:
    """Stable shard of a belief id (crc32, identical on every machine and run)."""
    return zlib.crc32(belief_id.encode()) % shards


def handle(reader: Reader, op: OpsInbox, ctx: Context) -> Step:
    """Seed a belief's posterior from an ``AddBelief`` op (crew ops are not fusion's).

    Raises:
        InvalidInput: the body names another author than the subject, the id is taken
            by another op, or a goal/gap was given a confidence.
    """
    if not isinstance(op, AddBelief):
        return Step()
    if op.author != ctx.author:
        raise InvalidInput(
            f"op {op.op_id} names author {op.author!r} but was published on "
            f"{ctx.subject!r}; agents publish only their own ops"
        )
    key = belief_key(ctx.world, op.belief_id)
    existing = reader.get(key)
    if existing is not None:
        if _FUSED.decode(existing).op_id == op.op_id:
            return Step()  # the same op again: already applied
        raise InvalidInput(
            f"belief {op.belief_id} already exists in world {ctx.world}; "
            "add it under a new id, or attach evidence to the existing one"
        )
    if op.type in NO_PROBABILITY:
        if op.confidence is not None:
            raise InvalidInput(
                f"a {op.type} carries no probability; add it without a confidence"
            )
        alpha = beta = 0.0
        confidence = uncertainty = None
    else:
        alpha, beta = prior(
            DEFAULT_CONFIDENCE if op.confidence is None else op.confidence
        )
        confidence, uncertainty = beta_mean(alpha, beta), beta_sd(alpha, beta)
    belief = Belief(
        id=op.belief_id,
        text=op.text,
        type=op.type,
        confidence=confidence,
        evidence_weight=0.0,  # a stated prior is not evidence
        uncertainty=uncertainty,
        author=op.author,
        created_at=op.at,
        updated_at=op.at,
        origin=op.op_id,
    )
    fused = FusedBelief(belief=belief, alpha=alpha, beta=beta, op_id=op.op_id)
    shard = str(shard_of(op.belief_id, 1))
    return Step(
        writes={key: encode(fused)},
        out=[
            Outgoing(
                subject=derived(ctx.world, "posterior", shard),
                message=PosteriorUpdate(
                    belief=belief, cause=op.op_id, cause_seq=ctx.seq
                ),
                msg_id=f"posterior:{ctx.world}:{op.op_id}",
            )
        ],
    )

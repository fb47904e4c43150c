"""Fusion actor: consumes the OPS record, publishes posteriors to DERIVED.

Inbox: ``wl.*.ops.*`` through durable ``fusion`` (one instance) or ``fusion-<i>of<n>``
(shard ``i`` of ``n``: each shard reads every op and keeps the beliefs whose id hashes
to it). Accepts the belief ops (``AddBelief``, ``AddEvidence``, ``Statement``,
``SetTrust``, ``CloseBelief``, ``AssessSources``) and keeps each accepted
``DeclareWorld`` (whose voice evidence is, who may set trust); other crew ops are
ignored. Serves
``sources`` (shard 0). Outputs: ``PosteriorUpdate`` on
``wl.<world>.derived.posterior.<shard>``. State: see ``worldline.actors.fusion.core``.
Ack policy: after the LMDB commit; rejected ops are terminated and dead-lettered.
Upgrade: a store written before the index by source is indexed at start-up
(:mod:`worldline.actors.fusion.upgrade`).
"""

from __future__ import annotations

import os
from functools import partial

from worldline.actors.fusion import core, learning, standing, upgrade
from worldline.actors.runtime.auth import CREDS_ENV
from worldline.actors.runtime.spec import ActorSpec, Input, Service, parse_part
from worldline.protocols.messages import FUSION_INBOX, FUSION_RPC
from worldline.protocols.subjects import fusion_in, rpc_pattern

__all__ = ["parse_shard", "spec"]


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` -> (I, N), checked: 0 <= I < N."""
    return parse_part(text, "shard")


def spec(shard: str = "0/1", *, secured: bool | None = None) -> ActorSpec:
    """Fusion shard ``I/N`` (``shard``). ``secured``: whether the bus authenticates
    authors, which decides who may declare a world first; default, as for the
    materializer, whether this process connects with credentials, so both actors
    accept the same declarations (and ``worldline replay`` rebuilds alike)."""
    if secured is None:
        secured = bool(os.environ.get(CREDS_ENV))
    index, count = parse_shard(shard)
    replica = "" if count == 1 else f"{index}of{count}"
    return ActorSpec(
        name="fusion",
        replica=replica,
        inputs=(
            Input(
                fusion_in(index, count),
                FUSION_INBOX,
                partial(core.handle, shard=(index, count), secured=secured),
                heavy=learning.heavy,
            ),
        ),
        # `sources`: how each source is weighed. Shard 0 answers (each shard learns
        # from the slots it owns; docs/belief-math.md, "Learned reliability").
        services=(
            (Service(rpc_pattern("sources"), "fusion", FUSION_RPC, standing.serve),)
            if index == 0
            else ()
        ),
        upgrade=upgrade.upgrade,  # indexes a store written before the source index
    )

"""Fusion actor: consumes the OPS stream, publishes posteriors to DERIVED.

Inbox: ``wl.*.ops.*`` through durable ``fusion`` (``protocols.subjects.FUSION_IN``).
Accepts: ``AddBelief``. Outputs: ``PosteriorUpdate`` on
``wl.<world>.derived.posterior.<shard>``. State: see ``actors.fusion.core``.
Ack policy: after the LMDB commit; rejected ops are terminated and dead-lettered.
"""

from __future__ import annotations

from actors.fusion import core
from actors.runtime.spec import ActorSpec, Input
from protocols.messages import FUSION_INBOX
from protocols.subjects import FUSION_IN

__all__ = ["spec"]


def spec() -> ActorSpec:
    return ActorSpec(
        name="fusion", inputs=(Input(FUSION_IN, FUSION_INBOX, core.handle),)
    )

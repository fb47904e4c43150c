"""Extractor actor: consumes observations, publishes belief ops to the OPS record.

Inbox: ``wl.*.obs.*`` through durable ``extractor`` on the OBS work queue (replicas
share it). Accepts: ``Observe``. Outputs: ``AddBelief`` on ``wl.<world>.ops.extractor``.
State: none. Ack policy: after the outputs are committed to the outbox.
"""

from __future__ import annotations

from actors.extractor import core
from actors.runtime.spec import ActorSpec, Input
from protocols.messages import EXTRACTOR_INBOX
from protocols.subjects import EXTRACTOR_IN

__all__ = ["spec"]


def spec() -> ActorSpec:
    return ActorSpec(
        name="extractor",
        inputs=(Input(EXTRACTOR_IN, EXTRACTOR_INBOX, core.handle, skip_applied=False),),
    )

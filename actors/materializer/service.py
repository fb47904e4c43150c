"""Materializer actor: consumes derived posteriors, writes canonical state, feeds STATE.

Inbox: ``wl.*.derived.posterior.*`` through durable ``materializer``
(``protocols.subjects.MATERIALIZER_IN``). Accepts: ``PosteriorUpdate``. Outputs:
``BeliefChanged`` on ``wl.<world>.state.belief``. State: see
``actors.materializer.core``. Ack policy: after the LMDB commit of the whole batch.
"""

from __future__ import annotations

from actors.materializer import core
from actors.runtime.spec import ActorSpec, Input
from protocols.messages import MATERIALIZER_INBOX
from protocols.subjects import MATERIALIZER_IN

__all__ = ["spec"]


def spec() -> ActorSpec:
    return ActorSpec(
        name="materializer",
        inputs=(Input(MATERIALIZER_IN, MATERIALIZER_INBOX, core.handle),),
    )

"""Materializer actor: the single writer of each world's canonical state.

Inputs:
- ``wl.*.ops.*`` through durable ``materializer-ops`` (``MATERIALIZER_OPS_IN``): crew
  ops (declare, upsert, set field, edges, work, inbox acks), checked for authority and
  expected version; rejections go to the conflict log and the author's inbox.
- ``wl.*.derived.posterior.*`` through durable ``materializer`` (``MATERIALIZER_IN``):
  fusion's posteriors.

Outputs: the change feed ``wl.<world>.state.<kind>`` and per-agent inboxes
``wl.<world>.inbox.<agent>``. Serves ``wl.<world>.rpc.state_hash``. State: see
``actors.materializer.core`` and ``actors.materializer.crew``. Ack policy: after the
batch's LMDB commit (state, last applied sequence and outbox in one transaction).
"""

from __future__ import annotations

from actors.materializer import core, crew
from actors.runtime.spec import ActorSpec, Input, Service
from protocols.messages import MATERIALIZER_INBOX, MATERIALIZER_RPC, OPS_INBOX
from protocols.subjects import MATERIALIZER_IN, MATERIALIZER_OPS_IN, rpc_pattern

__all__ = ["spec"]


def spec() -> ActorSpec:
    return ActorSpec(
        name="materializer",
        inputs=(
            Input(MATERIALIZER_OPS_IN, OPS_INBOX, crew.handle),
            Input(MATERIALIZER_IN, MATERIALIZER_INBOX, core.handle),
        ),
        services=(
            Service(
                rpc_pattern("state_hash"), "materializer", MATERIALIZER_RPC, core.serve
            ),
            Service(
                rpc_pattern("op_status"), "materializer", MATERIALIZER_RPC, core.serve
            ),
        ),
    )

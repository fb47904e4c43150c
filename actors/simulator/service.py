"""Simulator actor: consumes real transitions, answers simulator requests.

Inbox: ``wl.*.derived.transition.*`` through durable ``simulator`` (replicas share it).
Accepts: ``Transition``. Serves (queue group ``simulator``):
``wl.<world>.rpc.sim.status``. State: see ``actors.simulator.core``. Ack policy: after
the LMDB commit.
"""

from __future__ import annotations

from actors.runtime.spec import ActorSpec, Input, Service
from actors.simulator import core
from protocols.messages import SIMULATOR_INBOX, SIMULATOR_RPC
from protocols.subjects import SIMULATOR_IN, rpc_pattern

__all__ = ["spec"]


def spec() -> ActorSpec:
    return ActorSpec(
        name="simulator",
        inputs=(Input(SIMULATOR_IN, SIMULATOR_INBOX, core.handle, skip_applied=False),),
        services=(
            Service(rpc_pattern("sim.status"), "simulator", SIMULATOR_RPC, core.serve),
        ),
    )

"""Projector actor: a read replica fed by the STATE change feed, serving reads.

Inbox: ``wl.*.state.*`` through durable ``projector-<replica>`` (each replica keeps its
own copy). Accepts the change feed (beliefs, entities, edges, declarations, inbox
summaries). Serves (queue group ``projector``): ``wl.<world>.rpc.get``, ``list``,
``read``, ``view``, ``trace``, ``before`` and ``search``. Before it starts, a store
from an older version is upgraded (``worldline.actors.projector.upgrade``).
Outputs: each agent's startup view to the ``wl-views`` bucket (key
``<world>.<agent>``) whenever it changes, rebuilt once per batch for the agents its
changes touched (while a backlog is pending, when it ends or a second after they
went stale: ``views.refresh_stale``), and the calibration fit once per batch that
changed the record (both from ``core.finish``). State: see
``worldline.actors.projector.core``.
Ack policy: after the LMDB commit.

``view`` and ``before`` read as the agent their body names (its inbox summary, its
work, its goals): on a secured deploy the runtime refuses them for an attested agent
that names another (the operator may read as anyone; ``Service.reads_as``).
"""

from __future__ import annotations

from worldline.actors.projector import core, upgrade, vectors
from worldline.actors.runtime.spec import ActorSpec, Input, Service
from worldline.protocols.messages import (
    PROJECTOR_INBOX,
    PROJECTOR_RPC,
    Before,
    GetView,
    ProjectorRpc,
)
from worldline.protocols.subjects import projector_in, rpc_pattern

__all__ = ["reads_as", "spec"]


def reads_as(request: ProjectorRpc) -> str:
    """The agent a request reads as: a view's or a worldview's; "" for the rest."""
    return request.agent if isinstance(request, GetView | Before) else ""


def spec(replica: str = "0") -> ActorSpec:
    return ActorSpec(
        name="projector",
        replica=replica,
        upgrade=upgrade.upgrade,
        inputs=(
            Input(
                projector_in(replica),
                PROJECTOR_INBOX,
                core.handle,
                coalesce=core.newest_only,
                finish=core.finish,
                prepare_batch=vectors.prepare,
            ),
        ),
        services=(
            Service(rpc_pattern("get"), "projector", PROJECTOR_RPC, core.serve),
            Service(rpc_pattern("list"), "projector", PROJECTOR_RPC, core.serve),
            Service(rpc_pattern("read"), "projector", PROJECTOR_RPC, core.serve),
            Service(
                rpc_pattern("view"), "projector", PROJECTOR_RPC, core.serve, reads_as
            ),
            Service(rpc_pattern("trace"), "projector", PROJECTOR_RPC, core.serve),
            Service(
                rpc_pattern("before"), "projector", PROJECTOR_RPC, core.serve, reads_as
            ),
            Service(rpc_pattern("search"), "projector", PROJECTOR_RPC, core.serve),
            Service(
                rpc_pattern("contradictions"), "projector", PROJECTOR_RPC, core.serve
            ),
            Service(rpc_pattern("calibration"), "projector", PROJECTOR_RPC, core.serve),
        ),
    )

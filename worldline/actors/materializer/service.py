"""Materializer actor: the single writer of each world's canonical state.

Inputs:
- ``wl.*.ops.*`` through durable ``materializer-ops`` (``MATERIALIZER_OPS_IN``): crew
  ops (declare, upsert, set field, edges, work, inbox acks), checked for authority and
  expected version; rejections go to the conflict log and the author's inbox.
- ``wl.*.derived.posterior.*`` through durable ``materializer`` (``MATERIALIZER_IN``):
  fusion's posteriors, and its verdicts on belief ops that made none (kept for
  ``op_status``).

Replicas (``--replica NAME``) and partitions (``--partition I/N``) get durables of
their own (``materializer_inputs``); per partition, the replica holding the lease
publishes and serves, the others stand by hot (actors/runtime/lease.py).

Outputs: the change feed ``wl.<world>.state.<kind>`` and per-agent inboxes
``wl.<world>.inbox.<agent>``. Serves ``wl.<world>.rpc.state_hash`` and ``op_status``.
State: see ``worldline.actors.materializer.core`` (beliefs, op outcomes) and
``worldline.actors.materializer.keys`` (the crew world; ``crew`` applies its ops). Ack
policy: after the batch's LMDB commit (state, last applied sequence and outbox in one
transaction).
"""

from __future__ import annotations

import os
from functools import partial
from typing import TYPE_CHECKING, Any

from worldline.actors.materializer import core, crew
from worldline.actors.materializer.ops_end import OpsEnd
from worldline.actors.runtime.auth import CREDS_ENV
from worldline.actors.runtime.spec import (
    ActorSpec,
    Context,
    Input,
    Reader,
    Service,
    Step,
    parse_part,
)
from worldline.protocols.messages import MATERIALIZER_INBOX, MATERIALIZER_RPC, OPS_INBOX
from worldline.protocols.subjects import (
    lease_key,
    materializer_inputs,
    partition_of,
    rpc_pattern,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from worldline.protocols.messages import Message

__all__ = ["spec"]


def spec(
    replica: str = "", partition: str = "0/1", *, secured: bool | None = None
) -> ActorSpec:
    """The materializer replica ``replica`` of partition ``I/N`` (``partition``).

    ``secured``: whether the bus authenticates authors, so that a world's first
    declaration must come from the operator (``crew.handle``). Default: whether this
    process connects with credentials (``--creds`` / ``$WORLDLINE_CREDS`` is set, as
    the runtime's ``connect`` reads it), which a server requiring them enforces for
    every client; ``worldline replay`` decides the same way, so it rebuilds alike.

    A partition owns the worlds :func:`worldline.protocols.subjects.partition_of` maps
    to it; each of its replicas follows the whole log through durables of its own, and
    the one holding the partition's lease publishes and serves (the others are hot
    standbys).
    """
    if secured is None:
        secured = bool(os.environ.get(CREDS_ENV))
    index, count = parse_part(partition, "partition")
    ops_in, posteriors_in = materializer_inputs(replica, index, count)
    instance = "-".join(
        part for part in (f"p{index}of{count}" if count > 1 else "", replica) if part
    )
    queue = "materializer" if count == 1 else f"materializer-p{index}of{count}"
    serve = _owned_serve(index, count)
    ops_end = OpsEnd()  # the op log's end, which a posterior's cause_seq may not pass
    return ActorSpec(
        name="materializer",
        replica=instance,
        lease=lease_key("materializer", index, count),
        inputs=(
            Input(
                ops_in,
                OPS_INBOX,
                _noting(
                    ops_end,
                    _owned(partial(crew.handle, secured=secured), index, count),
                ),
            ),
            Input(
                posteriors_in,
                MATERIALIZER_INBOX,
                _owned(core.handle_derived, index, count),
                prepare_batch=ops_end,
            ),
        ),
        services=(
            Service(rpc_pattern("state_hash"), queue, MATERIALIZER_RPC, serve),
            Service(rpc_pattern("op_status"), queue, MATERIALIZER_RPC, serve),
        ),
    )


def _noting(
    ops_end: OpsEnd, handle: Callable[[Reader, Any, Context], Step]
) -> Callable[[Reader, Any, Context], Step]:
    """``handle``, telling ``ops_end`` the sequence of every op it is handed (of any
    world: each was delivered from the log, so the log reaches that far)."""

    def noting(reader: Reader, message: Any, ctx: Context) -> Step:
        ops_end.saw(ctx.seq)
        return handle(reader, message, ctx)

    return noting


def _owned(
    handle: Callable[[Reader, Any, Context], Step], index: int, count: int
) -> Callable[[Reader, Any, Context], Step]:
    """``handle`` for the worlds of partition ``index``; other worlds pass by."""
    if count == 1:
        return handle

    def owned(reader: Reader, message: Any, ctx: Context) -> Step:
        if partition_of(ctx.world, count) != index:
            return Step()
        return handle(reader, message, ctx)

    return owned


def _owned_serve(
    index: int, count: int
) -> Callable[[Reader, Any, str], Message | None]:
    """Answer requests about this partition's worlds only: every partition hears
    each request (one queue group per partition), and exactly one replies."""
    if count == 1:
        return core.serve

    def serve(reader: Reader, request: Any, world: str) -> Message | None:
        if partition_of(world, count) != index:
            return None
        return core.serve(reader, request, world)

    return serve

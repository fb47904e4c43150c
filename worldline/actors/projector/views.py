"""Projector core for the crew world: a read replica of entities, edges and the
declaration, and each agent's startup view, pushed to the ``wl-views`` bucket when it
changes. Pure and deterministic: it selects and orders, it computes no new numbers.

State keys: ``decl/<w>``, ``entity/<w>/<ref>``, ``edge/<w>/<id>``,
``inboxsum/<w>/<agent>``, ``viewhash/<w>/<agent>``.
"""

from __future__ import annotations

import functools
import hashlib
from datetime import datetime, timedelta
from typing import Final

import msgspec

from worldline.actors.projector import index, worldview
from worldline.actors.runtime.memory import Overlay
from worldline.actors.runtime.spec import Context, Outgoing, Reader, Step
from worldline.protocols.messages import (
    AgentView,
    EdgeChanged,
    EntityChanged,
    InboxChanged,
    OpApplied,
    ViewReply,
    WorldDeclared,
    WorldReply,
    encode,
)
from worldline.protocols.subjects import VIEWS, bucket_key, bucket_put
from worldline.protocols.world import (
    AGENT,
    WORK,
    Edge,
    Entity,
    WorldDecl,
    agent_ref,
    ref_name,
)

__all__ = [
    "apply_change",
    "build_view",
    "declaration",
    "focus_of",
    "move_of",
    "read_world",
    "refresh",
    "refresh_all",
    "refresh_stale",
    "replica_version",
]

_DECL = msgspec.msgpack.Decoder(WorldDecl)
_ENTITY = msgspec.msgpack.Decoder(Entity)
_EDGE = msgspec.msgpack.Decoder(Edge)
_INBOX = msgspec.msgpack.Decoder(InboxChanged)
CLOSED = frozenset({"done", "cancelled"})
# While a backlog lasts, views are rebuilt at most this long after a change first
# made them stale (see refresh_stale).
MAX_STALE: Final = timedelta(seconds=1)
PRINCIPAL = "user"  # entity type of the humans the crew works for


def declaration(reader: Reader, world: str) -> WorldDecl | None:
    """The world's declaration as this replica holds it."""
    return _decl(reader, world)


def _decl(reader: Reader, world: str) -> WorldDecl | None:
    raw = reader.get(f"decl/{world}".encode())
    return None if raw is None else _decode_decl(raw)


@functools.lru_cache(maxsize=64)
def _decode_decl(raw: bytes) -> WorldDecl:
    return _DECL.decode(raw)  # frozen, keyed by its exact bytes: safe to share


def _entities(reader: Reader, world: str, etype: str = "") -> list[Entity]:
    prefix = f"entity/{world}/{etype + ':' if etype else ''}".encode()
    return [_ENTITY.decode(raw) for _, raw in reader.scan(prefix)]


def _edges(reader: Reader, world: str) -> list[Edge]:
    return [_EDGE.decode(raw) for _, raw in reader.scan(f"edge/{world}/".encode())]


def _entity(reader: Reader, world: str, ref: str) -> Entity | None:
    raw = reader.get(f"entity/{world}/{ref}".encode())
    return None if raw is None else _ENTITY.decode(raw)


def replica_version(reader: Reader, world: str) -> int:
    """The OPS sequence up to which this replica holds every change of ``world``."""
    raw = reader.get(f"version/{world}".encode())
    return 0 if raw is None else int(raw)


def read_world(reader: Reader, world: str, entity_type: str | None) -> WorldReply:
    """The declaration, entities (optionally of one type) and edges of ``world``."""
    return WorldReply(
        declaration=_decl(reader, world),
        entities=_entities(reader, world, entity_type or ""),
        edges=_edges(reader, world),
        version=replica_version(reader, world),
    )


def build_view(
    reader: Reader, world: str, agent: str, *, standing: bool = True
) -> AgentView | None:
    """``agent``'s startup view: itself, its edges and their other ends, its open
    work, its inbox summary, what it may write, the world's goals and constraints,
    and the principals (``user`` entities: whose focus everyone follows); with
    ``standing``, also its standing worldview (its goals and work as the query)."""
    decl = _decl(reader, world)
    if decl is None:
        return None
    me = agent_ref(agent)
    edges = [e for e in _edges(reader, world) if me in (e.source, e.target)]
    others = sorted({e.target if e.source == me else e.source for e in edges})
    related = [e for ref in others if (e := _entity(reader, world, ref)) is not None]
    work = [
        w
        for w in _entities(reader, world, WORK)
        if _field(w, "assigned_to") == agent and _field(w, "status") not in CLOSED
    ]
    raw_inbox = reader.get(f"inboxsum/{world}/{agent}".encode())
    inbox = None if raw_inbox is None else _INBOX.decode(raw_inbox)
    if agent in decl.authority.admins:
        may_write = ["*.*"]
    else:
        may_write = sorted(
            {p for g in decl.authority.grants if agent in g.agents for p in g.fields}
        )
    view = AgentView(
        world=world,
        agent=agent,
        me=_entity(reader, world, me),
        related=related,
        edges=edges,
        work=work,
        inbox_pending=0 if inbox is None else inbox.pending,
        inbox_recent=[] if inbox is None else inbox.recent,
        may_write=may_write,
        goals=[f"{g.id}: {g.text}" for g in decl.intent.goals],
        constraints=[f"{c.id}: {c.text}" for c in decl.intent.constraints],
        principals=_entities(reader, world, PRINCIPAL),
    )
    if not standing:
        return view
    focus = focus_of(decl, view)
    from worldline.actors.projector import decision  # it reads views too

    scene = decision.decision_scene(
        reader,
        world,
        decl=decl,
        view=view,
        query=focus,
        focus=focus,
        at=None,
        postings=index.STANDING_POSTINGS,
    )
    current = worldview.standing(scene, agent, focus, move=move_of(decl, view))
    return msgspec.structs.replace(view, worldview=current)


def move_of(decl: WorldDecl, view: AgentView) -> str:
    """The standing worldview's move, as people read it: the goals, then the work,
    each item apart (``focus_of`` runs them together as one query)."""
    goals = "; ".join(g.text for g in decl.intent.goals)
    work = "; ".join(str(_field(w, "goal")) for w in view.work)
    parts = ([f"goals: {goals}"] if goals else []) + ([f"work: {work}"] if work else [])
    return " | ".join(parts)


def focus_of(decl: WorldDecl, view: AgentView | None) -> str:
    """What an agent is after: the world's goals and its own open work."""
    work = view.work if view else []
    return " ".join(
        [g.text for g in decl.intent.goals] + [str(_field(w, "goal")) for w in work]
    )


def _field(entity: Entity, name: str) -> object:
    state = entity.fields.get(name)
    return None if state is None else state.value


def _agents_touching(reader: Reader, world: str, refs: set[str]) -> set[str]:
    agents = {ref_name(r) for r in refs if r.startswith(f"{AGENT}:")}
    for edge in _edges(reader, world):
        if edge.source in refs or edge.target in refs:
            agents.update(
                ref_name(end)
                for end in (edge.source, edge.target)
                if end.startswith(f"{AGENT}:")
            )
    return agents


def apply_change(
    reader: Reader,
    change: EntityChanged | EdgeChanged | WorldDeclared | InboxChanged | OpApplied,
    ctx: Context,
) -> Step:
    """Keep the change in the replica, then refresh the views of affected agents."""
    world = ctx.world
    writes: dict[bytes, bytes | None] = {}
    affected: set[str] = set()
    match change:
        case OpApplied(seq=seq):
            # The whole op is in: only now may a read fenced at it be answered.
            if seq > replica_version(reader, world):
                writes[f"version/{world}".encode()] = str(seq).encode()
            return Step(writes=writes)
        case EntityChanged(entity=entity):
            key = f"entity/{world}/{entity.id}".encode()
            old = _entity(reader, world, entity.id)
            if old is not None and old.version >= entity.version:
                return Step(writes=writes)
            writes[key] = encode(entity)
            affected |= _agents_touching(reader, world, {entity.id})
            for e in (old, entity):
                if e is not None and e.type == WORK:
                    assignee = _field(e, "assigned_to")
                    if isinstance(assignee, str):
                        affected.add(assignee)
        case EdgeChanged(edge=edge, removed=removed):
            key = f"edge/{world}/{edge.id}".encode()
            writes[key] = None if removed else encode(edge)
            affected |= {
                ref_name(end)
                for end in (edge.source, edge.target)
                if end.startswith(f"{AGENT}:")
            }
        case WorldDeclared(declaration=decl):
            writes[f"decl/{world}".encode()] = encode(decl)
            affected |= {ref_name(e.id) for e in _entities(reader, world, AGENT)}
            affected |= {
                ref_name(e.id) for e in decl.entities if e.id.startswith("agent:")
            }
        case InboxChanged(agent=agent):
            writes[f"inboxsum/{world}/{agent}".encode()] = encode(change)
            affected.add(agent)
    for agent in affected:
        writes[_stale_key(world, agent)] = b""
    return Step(writes=writes)


def refresh_all(
    reader: Reader, writes: dict[bytes, bytes | None], ctx: Context
) -> Step:
    """A belief changed: every agent's standing worldview may read differently."""
    # Once per belief in a bulk load: read no declaration, rewrite no mark held.
    mark = _all_stale_key(ctx.world)
    if (
        reader.get(mark) is None
        and reader.get(f"decl/{ctx.world}".encode()) is not None
    ):
        writes[mark] = b""
    return Step(writes=writes)


# Views are rebuilt once per batch (refresh_stale, the input's finish step), not per
# change: a change marks the views it makes stale, in the same transaction, and the
# marks are gone again when the batch commits, unless a backlog defers the rebuild
# (then they stay, committed, until it ends or MAX_STALE has passed).
def _stale_key(world: str, agent: str) -> bytes:
    return f"viewstale/{world}/{agent}".encode()


def _all_stale_key(world: str) -> bytes:
    return f"viewsstale/{world}".encode()


def _deferred_key(world: str) -> bytes:
    # value: the clock (ISO 8601) of the first batch that put the rebuild off
    return f"viewsdeferred/{world}".encode()


def _stale(reader: Reader, world: str) -> bool:
    if reader.get(_all_stale_key(world)) is not None:
        return True
    return next(iter(reader.scan(_stale_key(world, ""))), None) is not None


def refresh_stale(reader: Reader, ctx: Context) -> Step:
    """Rebuild the views the batch's changes in ``ctx.world`` made stale (marked by
    :func:`apply_change` and :func:`refresh_all`), once, as of its last change.

    While more changes are pending (``ctx.pending``, a bulk load), the rebuild is
    put off (``Step.deferred``: the runtime calls this again on later batches and
    once the backlog ends): every batch's rebuild would be undone by the next one,
    and six views per batch were a third of a bulk load's cost. The marks stay in
    the store meanwhile, so a crash loses nothing, and a view lags at most
    :data:`MAX_STALE` behind ``ctx.now`` of the batch that first put it off. The
    views that end a backlog are those a batch-by-batch rebuild ends with: a view
    is a function of the state."""
    world = ctx.world
    deferred = _deferred_key(world)
    since = reader.get(deferred)
    if ctx.pending > 0:
        if since is None:
            if not _stale(reader, world):
                return Step()
            first = ctx.now.isoformat().encode()
            return Step(writes={deferred: first}, deferred=True)
        waited = ctx.now - datetime.fromisoformat(since.decode())
        if timedelta(0) <= waited < MAX_STALE:
            return Step(deferred=True)
    writes: dict[bytes, bytes | None] = {}
    if since is not None:
        writes[deferred] = None
    agents: set[str] = set()
    every = _all_stale_key(world)
    if reader.get(every) is not None:
        writes[every] = None
        agents |= {ref_name(e.id) for e in _entities(reader, world, AGENT)}
    prefix = _stale_key(world, "")
    for key, _ in reader.scan(prefix):
        writes[key] = None
        agents.add(key[len(prefix) :].decode())
    if not agents:
        return Step(writes=writes)
    return refresh(reader, writes, ctx, agents)


def refresh(
    reader: Reader,
    writes: dict[bytes, bytes | None],
    ctx: Context,
    agents: set[str],
) -> Step:
    """Rebuild ``agents``' views as they will read once ``writes`` commit, and push
    each one whose bytes changed to the ``wl-views`` bucket."""
    world = ctx.world
    overlay = Overlay(reader, writes)
    out = []
    for agent in sorted(agents):
        view = build_view(overlay, world, agent)
        if view is None:
            continue
        payload = encode(ViewReply(view=view))
        digest = hashlib.sha256(payload).hexdigest()[:32].encode()
        hash_key = f"viewhash/{world}/{agent}".encode()
        if overlay.get(hash_key) == digest:
            continue
        writes[hash_key] = digest
        out.append(
            Outgoing(
                subject=bucket_put(VIEWS, bucket_key(world, agent)),
                message=ViewReply(view=view),
                # The change's sequence makes each push unique: a view that
                # returns to earlier bytes is still written (not de-duplicated).
                msg_id=f"view:{world}:{agent}:{ctx.seq}:{digest.decode()}",
            )
        )
    return Step(writes=writes, out=out)

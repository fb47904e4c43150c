"""Materializer core for the crew world: authority, per-field versions, conflicts,
inboxes and dampened propagation. Pure, synchronous, deterministic.

Every time it uses is the op's own ``at`` (never the wall clock), and every version is
the op's OPS stream sequence, so replaying the log rebuilds the same bytes.

How the seven v0.1 defects of world.json are fixed here:

- implicit relationships -> typed :class:`~protocols.world.Edge` records;
- no field versioning -> each field carries its own version (``expect_version``);
- no authority model -> :func:`may_write` checks grants, admins and work ownership;
- global processed flag -> per-agent inbox records and per-agent durable consumers;
- boolean work demands -> typed work requests (``work:<id>`` entities);
- prose propagation rules -> typed :class:`~protocols.world.Rule` evaluated here;
- durable and ephemeral state mixed -> presence lives in a KV bucket, never here.

State keys (all under the world): ``decl/<w>``, ``entity/<w>/<ref>``,
``edge/<w>/<id>``, ``conflict/<w>/<seq>``, ``sent/<w>/<rule>/<ref>/<agent>``,
``inbox/<w>/<agent>/<message id>``, ``inboxsum/<w>/<agent>``.
"""

from __future__ import annotations

import functools
import hashlib
from collections import deque
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any, Final

import msgspec

from actors.belief_model.posterior import NO_PROBABILITY
from actors.materializer.core import (
    conflict_key,
    last_change_key,
    last_op_key,
    unchanged_key,
)
from actors.runtime.memory import Overlay
from actors.runtime.spec import Context, Outgoing, Reader, Step
from protocols.messages import (
    AckInbox,
    AddBelief,
    AddEdge,
    AddEvidence,
    BeliefEdgeChanged,
    CloseBelief,
    DeclareWorld,
    EdgeChanged,
    EntityChanged,
    InboxChanged,
    InboxMessage,
    LinkBeliefs,
    Notification,
    OpApplied,
    OpsInbox,
    PutWork,
    RejectCode,
    Rejection,
    RemoveEdge,
    SetField,
    SetTrust,
    Statement,
    UpsertEntity,
    WorkAssigned,
    WorldDeclared,
    encode,
)
from protocols.subjects import inbox, state
from protocols.world import (
    AGENT,
    MAX_VALUE_BYTES,
    OPERATOR,
    RESERVED_AGENTS,
    WORK,
    Edge,
    Entity,
    FieldState,
    Value,
    WorldDecl,
    agent_ref,
    agents_named,
    entity_type,
    ref_name,
)

__all__ = [
    "InboxRecord",
    "Reject",
    "decl_key",
    "edge_key",
    "entity_key",
    "handle",
    "load_decl",
    "may_write",
]

_DECL = msgspec.msgpack.Decoder(WorldDecl)
_ENTITY = msgspec.msgpack.Decoder(Entity)
_EDGE = msgspec.msgpack.Decoder(Edge)
RECENT: Final = 5  # inbox lines kept in an agent's summary


class InboxRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The materializer's record of one inbox message (delivery is JetStream's job)."""

    id: str
    line: str  # one-line summary for views
    acked: bool = False


_RECORD = msgspec.msgpack.Decoder(InboxRecord)


class InboxSummary(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pending: int = 0
    recent: list[str] = msgspec.field(default_factory=list)


_SUMMARY = msgspec.msgpack.Decoder(InboxSummary)


class Reject(Exception):
    """An op the world refuses; becomes a conflict-log entry and a Rejection."""

    def __init__(
        self,
        code: RejectCode,
        reason: str,
        *,
        version: int | None = None,
        value: Value = None,
    ) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.version = version
        self.value = value


def decl_key(world: str) -> bytes:
    return f"decl/{world}".encode()


def entity_key(world: str, ref: str) -> bytes:
    return f"entity/{world}/{ref}".encode()


def edge_key(world: str, edge_id: str) -> bytes:
    return f"edge/{world}/{edge_id}".encode()


def _sent_key(world: str, rule: str, ref: str, agent: str) -> bytes:
    return f"sent/{world}/{rule}/{ref}/{agent}".encode()


def _inbox_key(world: str, agent: str, message_id: str) -> bytes:
    return f"inbox/{world}/{agent}/{message_id}".encode()


def _summary_key(world: str, agent: str) -> bytes:
    return f"inboxsum/{world}/{agent}".encode()


def load_decl(reader: Reader, world: str) -> WorldDecl | None:
    raw = reader.get(decl_key(world))
    return None if raw is None else _decode_decl(raw)


@functools.lru_cache(maxsize=64)
def _decode_decl(raw: bytes) -> WorldDecl:
    # Every op reads the declaration; decoding it dominated the apply cost. The
    # decoded struct is frozen and keyed by its exact bytes, so caching is safe.
    return _DECL.decode(raw)


def may_write(decl: WorldDecl, agent: str, etype: str, field: str) -> bool:
    """Whether ``agent`` holds a grant for ``etype.field`` (admins hold every grant)."""
    if agent in decl.authority.admins:
        return True
    target = f"{etype}.{field}"
    return any(
        agent in grant.agents and any(fnmatchcase(target, p) for p in grant.fields)
        for grant in decl.authority.grants
    )


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


class _Tx(Overlay):
    """The op's working set: reads see the op's own earlier writes."""

    def __init__(self, reader: Reader, ctx: Context) -> None:
        super().__init__(reader, {})
        self.ctx = ctx
        self.world = ctx.world
        self.out: list[Outgoing] = []
        self.touched: dict[str, Entity] = {}
        self.inboxes: set[str] = set()

    def put(self, key: bytes, value: bytes | None) -> None:
        self.writes[key] = value

    def entity(self, ref: str) -> Entity | None:
        raw = self.get(entity_key(self.world, ref))
        return None if raw is None else _ENTITY.decode(raw)

    def save(self, entity: Entity) -> None:
        self.put(entity_key(self.world, entity.id), encode(entity))
        self.touched[entity.id] = entity

    def edges(self) -> list[Edge]:
        return [_EDGE.decode(v) for _, v in self.scan(f"edge/{self.world}/".encode())]

    def post(self, agent: str, message: InboxMessage, line: str) -> None:
        """Deliver to ``agent``'s durable inbox and record it as pending."""
        self.put(
            _inbox_key(self.world, agent, message.id),
            encode(InboxRecord(id=message.id, line=line)),
        )
        raw = self.get(_summary_key(self.world, agent))
        summary = InboxSummary() if raw is None else _SUMMARY.decode(raw)
        summary = InboxSummary(
            pending=summary.pending + 1, recent=[*summary.recent, line][-RECENT:]
        )
        self.put(_summary_key(self.world, agent), encode(summary))
        self.inboxes.add(agent)
        self.out.append(Outgoing(inbox(self.world, agent), message, message.id))

    def step(self) -> Step:
        """The op's writes plus the change feed for everything it touched."""
        seq = self.ctx.seq
        for ref, entity in sorted(self.touched.items()):
            self.out.append(
                Outgoing(
                    state(self.world, "entity"),
                    EntityChanged(entity=entity),
                    f"state:{self.world}:entity:{ref}:{seq}",
                )
            )
        for agent in sorted(self.inboxes):
            raw = self.get(_summary_key(self.world, agent))
            summary = InboxSummary() if raw is None else _SUMMARY.decode(raw)
            self.out.append(
                Outgoing(
                    state(self.world, "inbox"),
                    InboxChanged(
                        agent=agent,
                        pending=summary.pending,
                        recent=summary.recent,
                        seq=seq,
                    ),
                    f"state:{self.world}:inbox:{agent}:{seq}",
                )
            )
        if self.out:
            self.put(last_change_key(self.world), str(seq).encode())
            # Last on the feed for this op: a replica that saw it holds all of it.
            self.out.append(
                Outgoing(
                    state(self.world, "op"),
                    OpApplied(seq=seq),
                    f"state:{self.world}:op:{seq}",
                )
            )
        return Step(writes=self.writes, out=self.out)


def handle(
    reader: Reader, op: OpsInbox, ctx: Context, *, secured: bool = False
) -> Step:
    """Apply one crew op, or reject it with a reason code (never silently).

    ``secured`` says whether the bus authenticates authors (the materializer runs
    with credentials, so every client is a NATS user confined to its own subjects):
    then a world's first declaration must come from the operator. On an open bus
    anyone can publish as anyone, so the first declaration must come from an agent
    it names as an admin. Re-declarations need a current admin either way.
    """
    last_op: dict[bytes, bytes | None] = {last_op_key(ctx.world): str(ctx.seq).encode()}
    if isinstance(op, AddBelief | Statement):
        # Beliefs reach the materializer through fusion's posteriors; what beliefs
        # exist is noted from the record itself, so links are checked against the
        # log's order, not against when posteriors happen to arrive.
        if (
            isinstance(op, Statement)
            or op.type not in NO_PROBABILITY
            or (op.confidence is None)
        ):
            last_op[known_key(ctx.world, op.belief_id)] = b""
        return Step(writes=last_op)
    if isinstance(op, AddEvidence | SetTrust | CloseBelief):
        return Step(writes=last_op)
    tx = _Tx(reader, ctx)
    tx.writes.update(last_op)
    try:
        if op.author != ctx.author:
            raise Reject(
                "unauthorized",
                f"op names author {op.author!r} but was sent by {ctx.author!r}",
            )
        match op:
            case DeclareWorld():
                _declare(tx, op, secured=secured)
            case LinkBeliefs():
                _link_beliefs(tx, op)  # beliefs need no declared world
            case _:
                decl = load_decl(tx, ctx.world)
                if decl is None:
                    raise Reject(
                        "invalid",
                        f"world {ctx.world!r} is not declared yet; run "
                        "`worldline world load FILE` first",
                    )
                _apply(tx, decl, op)
    except Reject as exc:
        return _rejected(reader, op, ctx, exc)
    return tx.step()


def _apply(tx: _Tx, decl: WorldDecl, op: Any) -> None:
    match op:
        case SetField():
            _set_field(tx, decl, op)
        case UpsertEntity():
            _upsert(tx, decl, op)
        case AddEdge():
            _add_edge(tx, decl, op)
        case RemoveEdge():
            _remove_edge(tx, decl, op)
        case PutWork():
            _put_work(tx, decl, op)
        case AckInbox():
            _ack(tx, op)


def _rejected(reader: Reader, op: Any, ctx: Context, exc: Reject) -> Step:
    rejection = Rejection(
        id=f"rej-{_digest(ctx.world, op.op_id, str(ctx.seq))}",
        op_id=op.op_id,
        code=exc.code,
        reason=exc.reason,
        current_version=exc.version,
        current_value=exc.value,
        at=op.at,
    )
    tx = _Tx(reader, ctx)
    tx.put(last_op_key(ctx.world), str(ctx.seq).encode())
    tx.put(conflict_key(ctx.world, ctx.seq), encode(rejection))
    tx.post(ctx.author, rejection, f"rejected {op.op_id}: {exc.code}")
    return tx.step()


# --- belief edges ---------------------------------------------------------------------


def _link_beliefs(tx: _Tx, op: LinkBeliefs) -> None:
    edge = op.edge
    if edge.source == edge.target:
        raise Reject("invalid", f"edge {edge.id} links belief {edge.source} to itself")
    for end in (edge.source, edge.target):
        if tx.get(known_key(tx.world, end)) is None:
            raise Reject(
                "unknown_entity",
                f"no belief {end} in world {tx.world!r} (edge {edge.id}); add it first",
            )
    key = belief_edge_key(tx.world, edge.id)
    raw = tx.get(key)
    if raw is None and edge.removed:
        raise Reject("unknown_entity", f"no belief edge {edge.id} to remove")
    seq = tx.ctx.seq
    edge = msgspec.structs.replace(edge, version=seq, author=op.author, at=op.at)
    tx.put(key, encode(edge))  # removed edges stay, tombstoned: still traceable
    tx.out.append(
        Outgoing(
            state(tx.world, "belief_edge"),
            BeliefEdgeChanged(edge=edge),
            f"state:{tx.world}:belief_edge:{edge.id}:{seq}",
        )
    )


def known_key(world: str, belief_id: str) -> bytes:
    """A belief the op log has created (whether or not its posterior arrived)."""
    return f"known/{world}/{belief_id}".encode()


def belief_edge_key(world: str, edge_id: str) -> bytes:
    return f"bedge/{world}/{edge_id}".encode()


# --- the declaration ------------------------------------------------------------------


def _types(decl: WorldDecl) -> set[str]:
    return {*decl.environment.entity_types, AGENT, WORK}


def _check_declaration(decl: WorldDecl, world: str) -> None:
    if decl.world.id != world:
        raise Reject(
            "invalid",
            f"declaration is for world {decl.world.id!r}, not {world!r}; "
            "load it with --world matching [world] id",
        )
    reserved = sorted(agents_named(decl) & RESERVED_AGENTS)
    if reserved:
        raise Reject(
            "invalid",
            f"agent name(s) {', '.join(reserved)} are reserved for worldline's "
            f"actors and operator ({', '.join(sorted(RESERVED_AGENTS))}); rename "
            "those agents in the declaration",
        )
    types = _types(decl)
    refs = {e.id for e in decl.entities}
    for seed in decl.entities:
        if entity_type(seed.id) not in types:
            raise Reject(
                "invalid",
                f"entity {seed.id}: unknown entity type {entity_type(seed.id)!r}; "
                "declare it in [environment] entity_types "
                f"({', '.join(sorted(types))})",
            )
        _check_value_sizes(seed.id, seed.fields)
    for edge in decl.edges:
        for end in (edge.source, edge.target):
            if end not in refs:
                raise Reject(
                    "invalid", f"edge {edge.id}: {end} is not among [[entities]]"
                )
    for rule in decl.rules:
        etype = rule.on.split(".", 1)[0]
        if etype != "*" and etype not in types:
            raise Reject(
                "invalid", f"rule {rule.id}: unknown entity type {etype!r} in on"
            )
        try:
            _goal(rule.goal, entity="e", field="f", value="v", agent="a")
        except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
            raise Reject(
                "invalid",
                f"rule {rule.id}: goal template {rule.goal!r} is not valid ({exc!r}); "
                "use only {entity}, {field}, {value} and {agent}",
            ) from exc


def _check_value_sizes(ref: str, fields: dict[str, Value]) -> None:
    for name, value in fields.items():
        size = len(encode_value(value))
        if size > MAX_VALUE_BYTES:
            raise Reject(
                "invalid",
                f"{ref}.{name}: value is {size} bytes, over the {MAX_VALUE_BYTES}-byte "
                "limit; store large content as an artifact and reference it",
            )


def encode_value(value: Value) -> bytes:
    return msgspec.msgpack.encode(value)


def _check_first_declarer(
    decl: WorldDecl, world: str, author: str, *, secured: bool
) -> None:
    """Who may declare a world nobody has declared yet (no world squatting)."""
    if secured:
        if author != OPERATOR:
            raise Reject(
                "unauthorized",
                f"world {world!r} is not declared yet and this bus authenticates "
                f"its users: only the {OPERATOR} declares a world first "
                f"(`worldline world load FILE --world {world} --agent {OPERATOR} "
                f"--creds {OPERATOR}.creds`); its admins may re-declare it after",
            )
        return
    admins = decl.authority.admins
    if author not in admins:
        named = ", ".join(admins) if admins else "none"
        raise Reject(
            "unauthorized",
            f"world {world!r} is not declared yet: its first declaration must come "
            f"from an admin it names (admins: {named}), not {author!r}; declare it "
            "as one of them (--agent ADMIN), or add yourself to [authority] admins",
        )


def _declare(tx: _Tx, op: DeclareWorld, *, secured: bool) -> None:
    current = load_decl(tx, tx.world)
    if current is not None and op.author not in current.authority.admins:
        raise Reject(
            "unauthorized",
            f"only the world's admins ({', '.join(current.authority.admins)}) may "
            "re-declare it",
        )
    decl = op.declaration
    if current is None:
        _check_first_declarer(decl, tx.world, op.author, secured=secured)
    _check_declaration(decl, tx.world)
    tx.put(decl_key(tx.world), encode(decl))
    seq = tx.ctx.seq
    tx.out.append(
        Outgoing(
            state(tx.world, "declared"),
            WorldDeclared(declaration=decl, version=seq),
            f"state:{tx.world}:declared:{seq}",
        )
    )
    # Seeds fill what is missing; they never overwrite values agents have written.
    for seed in decl.entities:
        entity = tx.entity(seed.id) or Entity(id=seed.id, type=entity_type(seed.id))
        fields = dict(entity.fields)
        for name, value in seed.fields.items():
            fields.setdefault(
                name, FieldState(value=value, version=seq, author=op.author, at=op.at)
            )
        if fields != entity.fields or entity.version == 0:
            tx.save(msgspec.structs.replace(entity, fields=fields, version=seq))
    for seed_edge in decl.edges:
        if tx.get(edge_key(tx.world, seed_edge.id)) is None:
            _save_edge(
                tx,
                Edge(
                    id=seed_edge.id,
                    type=seed_edge.type,
                    source=seed_edge.source,
                    target=seed_edge.target,
                ),
                op.author,
            )


# --- fields and entities --------------------------------------------------------------


def _require(tx: _Tx, ref: str) -> Entity:
    entity = tx.entity(ref)
    if entity is None:
        raise Reject("unknown_entity", f"no entity {ref} in world {tx.world!r}")
    return entity


def _authorize(decl: WorldDecl, agent: str, entity: Entity, field: str) -> None:
    if entity.type == WORK and agent in _work_owners(entity):
        return  # agents always own their own work items
    if not may_write(decl, agent, entity.type, field):
        raise Reject(
            "unauthorized",
            f"{agent} may not write {entity.type}.{field} (entity {entity.id}); "
            "ask an admin for a grant in [authority]",
        )


def _work_owners(entity: Entity) -> set[str]:
    owners = set()
    for name in ("assigned_to", "requested_by"):
        state_ = entity.fields.get(name)
        if state_ is not None and isinstance(state_.value, str):
            owners.add(state_.value)
    return owners


Change = tuple[str, str, Value, int]  # (entity ref, field, value, depth)


def _write_fields(
    tx: _Tx, entity: Entity, values: dict[str, Value], author: str, at: datetime
) -> list[Change]:
    """Write the fields whose value changes (no-op writes change nothing)."""
    seq = tx.ctx.seq
    fields = dict(entity.fields)
    changed: list[Change] = []
    for name, value in values.items():
        current = fields.get(name)
        if current is not None and _same(current.value, value):
            continue
        fields[name] = FieldState(value=value, version=seq, author=author, at=at)
        changed.append((entity.id, name, value, 0))
    if changed or entity.version == 0:
        tx.save(msgspec.structs.replace(entity, fields=fields, version=seq))
    return changed


def _same(a: Value, b: Value) -> bool:
    """Equal value and type: ``True``, ``1`` and ``1.0`` are different writes."""
    return type(a) is type(b) and a == b


def _set_field(tx: _Tx, decl: WorldDecl, op: SetField) -> None:
    entity = _require(tx, op.entity)
    _authorize(decl, op.author, entity, op.field)
    _check_value_sizes(op.entity, {op.field: op.value})
    current = entity.fields.get(op.field)
    version = 0 if current is None else current.version
    if op.expect_version is not None and op.expect_version != version:
        raise Reject(
            "version_conflict",
            f"{op.entity}.{op.field} is at version {version}, not "
            f"{op.expect_version}; re-read it and write again",
            version=version,
            value=None if current is None else current.value,
        )
    changes = _write_fields(tx, entity, {op.field: op.value}, op.author, op.at)
    if not changes:
        # Nothing changed, so the field keeps its version: remember which, so the
        # writer is told the truth about the version it can expect next.
        tx.put(unchanged_key(tx.world, tx.ctx.seq), str(version).encode())
    _propagate(tx, decl, changes, op.author, op.op_id, op.at)


def _upsert(tx: _Tx, decl: WorldDecl, op: UpsertEntity) -> None:
    etype = entity_type(op.entity)
    if etype not in _types(decl):
        raise Reject(
            "invalid",
            f"unknown entity type {etype!r}; declared types are "
            f"{', '.join(sorted(_types(decl)))}",
        )
    entity = tx.entity(op.entity) or Entity(id=op.entity, type=etype)
    if entity.type == WORK:
        raise Reject("invalid", "work requests are written with put_work")
    for name in op.fields or {"*": None}:
        _authorize(decl, op.author, entity, name)
    _check_value_sizes(op.entity, op.fields)
    changes = _write_fields(tx, entity, dict(op.fields), op.author, op.at)
    _propagate(tx, decl, changes, op.author, op.op_id, op.at)


# --- edges ----------------------------------------------------------------------------


def _save_edge(tx: _Tx, edge: Edge, author: str, *, removed: bool = False) -> None:
    seq = tx.ctx.seq
    edge = msgspec.structs.replace(edge, version=seq, author=author)
    tx.put(edge_key(tx.world, edge.id), None if removed else encode(edge))
    tx.out.append(
        Outgoing(
            state(tx.world, "edge"),
            EdgeChanged(edge=edge, removed=removed),
            f"state:{tx.world}:edge:{edge.id}:{seq}",
        )
    )


def _authorize_edge(decl: WorldDecl, agent: str, edge: Edge) -> None:
    if edge.source == agent_ref(agent) or may_write(decl, agent, "edge", edge.type):
        return
    raise Reject(
        "unauthorized",
        f"{agent} may not write edge {edge.id} of type {edge.type}; agents write "
        "edges from themselves, or hold a grant on edge.<type>",
    )


def _add_edge(tx: _Tx, decl: WorldDecl, op: AddEdge) -> None:
    for end in (op.edge.source, op.edge.target):
        _require(tx, end)
    _authorize_edge(decl, op.author, op.edge)
    raw = tx.get(edge_key(tx.world, op.edge.id))
    if raw is not None:
        # Rewriting an edge needs authority over the edge it replaces too.
        _authorize_edge(decl, op.author, _EDGE.decode(raw))
    _save_edge(tx, op.edge, op.author)


def _remove_edge(tx: _Tx, decl: WorldDecl, op: RemoveEdge) -> None:
    raw = tx.get(edge_key(tx.world, op.edge_id))
    if raw is None:
        raise Reject("unknown_entity", f"no edge {op.edge_id} in world {tx.world!r}")
    edge = _EDGE.decode(raw)
    _authorize_edge(decl, op.author, edge)
    _save_edge(tx, edge, op.author, removed=True)


# --- work requests --------------------------------------------------------------------


def _put_work(tx: _Tx, decl: WorldDecl, op: PutWork) -> None:
    ref = f"{WORK}:{op.work_id}"
    _require(tx, agent_ref(op.assigned_to))
    existing = tx.entity(ref)
    admin = op.author in decl.authority.admins
    if existing is None:
        if op.requested_by != op.author and not admin:
            raise Reject(
                "unauthorized",
                f"{op.author} may not file work as requested by {op.requested_by}",
            )
        entity = Entity(id=ref, type=WORK)
        version = 0
    else:
        entity = existing
        if not (
            admin
            or op.author in _work_owners(existing)
            or may_write(decl, op.author, WORK, "status")
        ):
            raise Reject(
                "unauthorized",
                f"{op.author} neither requested nor is assigned {ref}",
            )
        version = existing.version
    if op.expect_version is not None and op.expect_version != version:
        raise Reject(
            "version_conflict",
            f"{ref} is at version {version}, not {op.expect_version}",
            version=version,
        )
    _file_work(
        tx,
        decl,
        entity,
        {
            "kind": op.work_kind,
            "assigned_to": op.assigned_to,
            "goal": op.goal,
            "priority": op.priority,
            "due_at": None if op.due_at is None else op.due_at.isoformat(),
            "status": op.status,
            "requested_by": op.requested_by,
        },
        author=op.author,
        cause=op.op_id,
        at=op.at,
        rule="",
        depth=0,
    )


def _file_work(
    tx: _Tx,
    decl: WorldDecl,
    entity: Entity,
    fields: dict[str, Value],
    *,
    author: str,
    cause: str,
    at: datetime,
    rule: str,
    depth: int,
) -> list[Change]:
    before = entity.fields.get("assigned_to")
    changes = _write_fields(tx, entity, fields, author, at)
    assignee = str(fields["assigned_to"])
    if before is None or before.value != assignee:
        due = fields.get("due_at")
        message = WorkAssigned(
            id=f"work-{_digest(tx.world, entity.id, assignee, str(tx.ctx.seq))}",
            work=entity.id,
            work_kind=str(fields["kind"]),
            goal=str(fields["goal"]),
            priority=int(str(fields["priority"])),
            due_at=None if due is None else datetime.fromisoformat(str(due)),
            requested_by=str(fields["requested_by"]),
            rule=rule,
            cause=cause,
            at=at,
        )
        tx.post(assignee, message, f"work {entity.id}: {message.goal}")
    changes = [(ref, name, value, depth) for ref, name, value, _ in changes]
    if depth == 0:
        _propagate(tx, decl, changes, author, cause, at)
    return changes


def _ack(tx: _Tx, op: AckInbox) -> None:
    records = []
    for message_id in dict.fromkeys(op.message_ids):  # an id named twice acks once
        raw = tx.get(_inbox_key(tx.world, op.author, message_id))
        if raw is None:
            raise Reject(
                "unknown_entity",
                f"no message {message_id} in {op.author}'s inbox; nothing was acked",
            )
        records.append(_RECORD.decode(raw))
    fresh = [r for r in records if not r.acked]
    for record in fresh:
        key = _inbox_key(tx.world, op.author, record.id)
        tx.put(key, encode(msgspec.structs.replace(record, acked=True)))
    if fresh:
        raw = tx.get(_summary_key(tx.world, op.author))
        summary = InboxSummary() if raw is None else _SUMMARY.decode(raw)
        tx.put(
            _summary_key(tx.world, op.author),
            encode(
                InboxSummary(
                    pending=max(0, summary.pending - len(fresh)), recent=summary.recent
                )
            ),
        )
        tx.inboxes.add(op.author)


# --- propagation ----------------------------------------------------------------------


def _related_agents(tx: _Tx, ref: str, edge_type: str) -> set[str]:
    agents = set()
    for edge in tx.edges():
        if edge.type != edge_type:
            continue
        if edge.target == ref and entity_type(edge.source) == AGENT:
            agents.add(ref_name(edge.source))
        elif edge.source == ref and entity_type(edge.target) == AGENT:
            agents.add(ref_name(edge.target))
    return agents


def _matches(pattern: str, etype: str, field: str) -> bool:
    return fnmatchcase(f"{etype}.{field}", pattern)


def _first_time(tx: _Tx, decl: WorldDecl, key: bytes, at: datetime) -> bool:
    """Dedupe window: True (and remembered) unless the same signal went out lately."""
    raw = tx.get(key)
    if raw is not None:
        last = datetime.fromisoformat(raw.decode())
        if at - last < timedelta(seconds=decl.dampening.dedupe_window):
            return False
    tx.put(key, at.isoformat().encode())
    return True


def _propagate(
    tx: _Tx,
    decl: WorldDecl,
    changes: list[Change],
    author: str,
    cause: str,
    at: datetime,
) -> None:
    """Evaluate subscriptions and rules on each change, breadth first.

    Every real change is news: each selected agent gets one notification per
    change (never two within one op). Dampening bounds the work: rule-created
    changes carry depth + 1 and rules stop firing at the declared depth; each
    (rule, entity, agent) files at most one work request per dedupe window; no-op
    writes never reach here. So every chain, cyclic rules included, terminates.
    """
    queue = deque(changes)
    while queue:
        ref, field, value, depth = queue.popleft()
        etype = entity_type(ref)
        version = tx.ctx.seq
        for sub in decl.subscriptions:
            if sub.agent == author or not any(
                _matches(p, etype, field) for p in sub.on
            ):
                continue
            rule_id = f"subscription:{sub.agent}"
            news = (ref, field, value, version)
            _notify(tx, sub.agent, news, rule_id, cause, depth, at)
        if depth >= decl.dampening.depth:
            continue
        for rule in decl.rules:
            if not _matches(rule.on, etype, field):
                continue
            targets = sorted(_related_agents(tx, ref, rule.notify) - {author})
            for agent in targets[: decl.dampening.max_fanout]:
                _notify(
                    tx, agent, (ref, field, value, version), rule.id, cause, depth, at
                )
                work_key = _sent_key(tx.world, f"{rule.id}:work", ref, agent)
                if rule.work_kind and _first_time(tx, decl, work_key, at):
                    queue.extend(
                        _rule_work(
                            tx,
                            decl,
                            rule,
                            agent,
                            ref,
                            field,
                            value,
                            author,
                            cause,
                            at,
                            depth,
                        )
                    )


def _notify(
    tx: _Tx,
    agent: str,
    change: tuple[str, str, Value, int],  # (entity, field, value, version)
    rule: str,
    cause: str,
    depth: int,
    at: datetime,
) -> None:
    ref, field, value, version = change
    # One notification per change per agent, whichever rule or subscription
    # selected it first (the id leaves the rule out on purpose).
    note_id = f"note-{_digest(tx.world, cause, ref, field, agent)}"
    if tx.get(_inbox_key(tx.world, agent, note_id)) is not None:
        return  # the same change reached this agent twice within one op
    message = Notification(
        id=note_id,
        entity=ref,
        field=field,
        value=value,
        version=version,
        rule=rule,
        cause=cause,
        depth=depth,
        at=at,
    )
    tx.post(agent, message, f"{ref}.{field} = {value!r} ({rule})")


def _goal(template: str, *, entity: str, field: str, value: str, agent: str) -> str:
    """Fill a rule's goal template. Every argument is a string, both when the
    declaration is checked and when a rule fires, so a template that passed the
    check cannot fail later (``{value:s}`` on an int, say)."""
    return template.format(entity=entity, field=field, value=value, agent=agent)


def _rule_work(
    tx: _Tx,
    decl: WorldDecl,
    rule: Any,
    agent: str,
    ref: str,
    field: str,
    value: Value,
    author: str,
    cause: str,
    at: datetime,
    depth: int,
) -> list[Change]:
    work_ref = f"{WORK}:{rule.id}-{_digest(tx.world, cause, ref, agent)[:12]}"
    goal = _goal(rule.goal, entity=ref, field=field, value=str(value), agent=agent)
    due = None if rule.due_in_hours is None else at + timedelta(hours=rule.due_in_hours)
    return _file_work(
        tx,
        decl,
        tx.entity(work_ref) or Entity(id=work_ref, type=WORK),
        {
            "kind": rule.work_kind,
            "assigned_to": agent,
            "goal": goal,
            "priority": rule.priority,
            "due_at": None if due is None else due.isoformat(),
            "status": "open",
            "requested_by": author,
        },
        author=author,
        cause=cause,
        at=at,
        rule=rule.id,
        depth=depth + 1,
    )

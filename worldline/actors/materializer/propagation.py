"""What a change sets off: subscriptions and rules notify the agents they select,
and rules file work for them, all dampened (:func:`propagate`).

Every real change is news to the agents subscribed to it or related to it by a
rule's edge type; a rule with a ``work_kind`` also files a work request
(``work:<rule>-<digest>``) for each, at most once per dedupe window. Rule-made
changes carry depth + 1 and rules stop at the declared depth, so every chain ends.

:func:`file_work` lives here too, although ``PutWork`` is handled in
:mod:`worldline.actors.materializer.work`: filing work is both what a rule does and a
change that propagates, so the two are one recursion and share a module.

State keys: ``sent/<w>/<rule>:work/<ref>/<agent>`` (the dedupe window); notifications
and work assignments are posted to inboxes
(:mod:`worldline.actors.materializer.inboxes`).
"""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from worldline.actors.belief_model.charter import fill_goal
from worldline.actors.materializer import workload
from worldline.actors.materializer.keys import inbox_key, sent_key
from worldline.actors.materializer.tx import digest
from worldline.actors.materializer.versions import write_fields
from worldline.protocols.messages import Notification, WorkAssigned
from worldline.protocols.world import AGENT, WORK, Entity, entity_type, ref_name

if TYPE_CHECKING:
    from worldline.actors.materializer.tx import Tx
    from worldline.actors.materializer.versions import Change
    from worldline.protocols.world import Value, WorldDecl

__all__ = ["file_work", "fill_goal", "propagate"]


def _related_agents(tx: Tx, ref: str, edge_type: str) -> set[str]:
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


def _first_time(
    tx: Tx,
    window: timedelta,
    key: bytes,
    at: datetime,
    parsed: dict[bytes, datetime],
) -> bool:
    """Dedupe window: True (and remembered) unless the same signal went out lately.
    ``parsed``: the times read so far, by their bytes (one rule's targets mostly
    hold the same one)."""
    raw = tx.get(key)
    if raw is not None:
        last = parsed.get(raw)
        if last is None:
            last = parsed[raw] = datetime.fromisoformat(raw.decode())
        if at - last < window:
            return False
    tx.put(key, at.isoformat().encode())
    return True


def propagate(
    tx: Tx,
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
    window = timedelta(seconds=decl.dampening.dedupe_window)
    parsed: dict[bytes, datetime] = {}
    while queue:
        ref, field, value, depth = queue.popleft()
        etype = entity_type(ref)
        news = (ref, field, value, tx.ctx.seq)
        for sub in decl.subscriptions:
            if sub.agent == author or not any(
                _matches(p, etype, field) for p in sub.on
            ):
                continue
            _notify(
                tx, [sub.agent], news, f"subscription:{sub.agent}", cause, depth, at
            )
        if depth >= decl.dampening.depth:
            continue
        for rule in decl.rules:
            if not _matches(rule.on, etype, field):
                continue
            targets = sorted(_related_agents(tx, ref, rule.notify) - {author})
            targets = targets[: decl.dampening.max_fanout]
            if not rule.work_kind:
                _notify(tx, targets, news, rule.id, cause, depth, at)
                continue
            work = f"{rule.id}:work"
            for agent in targets:  # each one's news, then its work request
                _notify(tx, [agent], news, rule.id, cause, depth, at)
                work_key = sent_key(tx.world, work, ref, agent)
                if _first_time(tx, window, work_key, at, parsed):
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
    tx: Tx,
    agents: list[str],
    change: tuple[str, str, Value, int],  # (entity, field, value, version)
    rule: str,
    cause: str,
    depth: int,
    at: datetime,
) -> None:
    """Post ``agents`` (in order) the news of ``change``."""
    ref, field, value, version = change
    world = tx.world
    line = f"{ref}.{field} = {value!r} ({rule})"
    for agent in agents:
        # One notification per change per agent, whichever rule or subscription
        # selected it first (the id leaves the rule out on purpose).
        note_id = f"note-{digest(world, cause, ref, field, agent)}"
        key = inbox_key(world, agent, note_id)
        if tx.get(key) is not None:
            continue  # the same change reached this agent twice within one op
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
        tx.post(agent, message, line, key)


def _rule_work(
    tx: Tx,
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
    work_ref = f"{WORK}:{rule.id}-{digest(tx.world, cause, ref, agent)[:12]}"
    goal = fill_goal(rule.goal, entity=ref, field=field, value=str(value), agent=agent)
    due = None if rule.due_in_hours is None else at + timedelta(hours=rule.due_in_hours)
    return file_work(
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


def file_work(
    tx: Tx,
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
    changes = write_fields(tx, entity, fields, author, at)
    assignee = str(fields["assigned_to"])
    if before is None or before.value != assignee:
        due = fields.get("due_at")
        message = WorkAssigned(
            id=f"work-{digest(tx.world, entity.id, assignee, str(tx.ctx.seq))}",
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
        workload.note_sent(tx, decl, fields, message.id)  # waits for the ack
    changes = [(ref, name, value, depth) for ref, name, value, _ in changes]
    if depth == 0:
        propagate(tx, decl, changes, author, cause, at)
    return changes

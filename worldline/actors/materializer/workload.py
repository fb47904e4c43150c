"""How much work one agent may put on another (:func:`check`): at most
:data:`MAX_OPEN_WORK` open work items requested by one agent and assigned to one other
agent at a time. Beyond that an op that would open one more is refused
``too_much_work``; closing one (status ``done`` or ``cancelled``), handing it back
or reassigning it frees its place. Without this, one agent could bury another's inbox
under ``WorkAssigned`` messages (the attack bench filed 200 of 200).

The count is read from state, never from a clock: an index of the open ``work:``
items by assignee and requester (:func:`index`, kept by every write of a work item's
fields), so a replay of the log refuses exactly the same ops, and a check reads at
most :data:`MAX_OPEN_WORK` keys, however much work the world holds. An item counts
for the pair (``requested_by``, ``assigned_to``) while its status is neither ``done``
nor ``cancelled`` and the two differ (work an agent files for itself buries no one).
Updating an item that already counts for the same pair takes no second place.

The operator and the world's admins are exempt, as authors and as requesters: they
may re-declare the world and every grant in it, and a crew's lead assigns a lot.
Work the declaration's rules file is never refused (rules are the admins' doing, and
dampened, docs/crew.md "Propagation"), but it takes its requester's places.

Closing frees a place, so the cap alone would not bound the messages: filing and
closing (or reassigning away and back) posts a ``WorkAssigned`` each time. So a second
bound counts those messages: at most :data:`MAX_UNREAD_WORK` (twice the cap, so a
closed place can be filed again at once) ``WorkAssigned`` from one requester may wait
unacknowledged in another agent's inbox; a ``put_work`` that would post one more is
refused ``too_much_work`` until the assignee acks one
(:func:`note_sent` records each, :func:`worldline.actors.materializer.inboxes.ack`
drops it).

Because the count follows ``requested_by``, that field is the requester's own: an
agent that is not an admin may set it (filing, updating or writing it) only to
itself, or leave it as it stands; else it could spread its work over invented names.

State keys: ``workopen/<w>/<assignee>/<requester>/<work ref>`` for each open item
filed for another agent; ``unread/<w>/<assignee>/<message id>`` -> requester, for
each ``WorkAssigned`` a counted requester posted that its assignee has not acked.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from worldline.actors.belief_model.charter import is_admin
from worldline.actors.materializer.reject import Reject

if TYPE_CHECKING:
    from collections.abc import Mapping

    from worldline.actors.materializer.tx import Tx
    from worldline.protocols.world import Entity, Value, WorldDecl

__all__ = [
    "CLOSED",
    "MAX_OPEN_WORK",
    "MAX_UNREAD_WORK",
    "check",
    "current",
    "index",
    "note_read",
    "note_sent",
    "open_key",
    "unread_key",
]

MAX_OPEN_WORK: Final = 16  # open items one requester may hold assigned to one agent
MAX_UNREAD_WORK: Final = 2 * MAX_OPEN_WORK  # its WorkAssigned left unacked there
CLOSED: Final = frozenset({"done", "cancelled"})  # statuses that free a place
_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")  # an agent's name (a subject token)


def current(entity: Entity | None) -> dict[str, Value]:
    """The values of a work item's fields (none for an item not filed yet)."""
    if entity is None:
        return {}
    return {name: state.value for name, state in entity.fields.items()}


def _pair(decl: WorldDecl, fields: Mapping[str, Value]) -> tuple[str, str] | None:
    """The (requester, assignee) an item takes a place of, or None: closed, filed
    for oneself, or requested by the operator or an admin."""
    pair = _open(fields)
    if pair is None or is_admin(decl, pair[0]):
        return None
    return pair


def open_key(world: str, assignee: str, requester: str, ref: str) -> bytes:
    """Work item ``ref`` is open, requested by ``requester`` of ``assignee``."""
    return _pair_prefix(world, assignee, requester) + ref.encode()


def _pair_prefix(world: str, assignee: str, requester: str) -> bytes:
    return f"workopen/{world}/{assignee}/{requester}/".encode()


def _open(fields: Mapping[str, Value]) -> tuple[str, str] | None:
    """(requester, assignee) of an open item filed for another agent, whoever
    requested it (the index keeps admins' items too; :func:`_pair` skips them)."""
    requester, assignee = fields.get("requested_by"), fields.get("assigned_to")
    if not isinstance(requester, str) or not isinstance(assignee, str):
        return None
    if not (_NAME.fullmatch(requester) and _NAME.fullmatch(assignee)):
        return None  # no agent's name (a `write` may put any text there)
    if fields.get("status") in CLOSED or requester == assignee:
        return None
    return requester, assignee


def index(
    tx: Tx, ref: str, before: Mapping[str, Value], after: Mapping[str, Value]
) -> None:
    """Keep the open-work index of item ``ref``, whose fields go from ``before``
    to ``after``."""
    old, new = _open(before), _open(after)
    if old == new:
        return
    if old is not None:
        tx.put(open_key(tx.world, old[1], old[0], ref), None)
    if new is not None:
        tx.put(open_key(tx.world, new[1], new[0], ref), b"")


def unread_key(world: str, assignee: str, message_id: str) -> bytes:
    """A ``WorkAssigned`` a counted requester posted, until ``assignee`` acks it."""
    return f"unread/{world}/{assignee}/{message_id}".encode()


def check(
    tx: Tx,
    decl: WorldDecl,
    author: str,
    ref: str,
    before: Mapping[str, Value],
    after: Mapping[str, Value],
    *,
    announces: bool,
) -> None:
    """Refuse an op by ``author`` that turns work item ``ref`` from ``before`` into
    ``after`` (field values) if it names another agent as requester, opens a place
    beyond :data:`MAX_OPEN_WORK` for its pair, or (``announces``: it posts the
    assignee a ``WorkAssigned``) would leave more than :data:`MAX_UNREAD_WORK` of
    the requester's unacknowledged there."""
    if is_admin(decl, author):
        return
    requester = after.get("requested_by")
    if requester != before.get("requested_by") and requester != author:
        raise Reject(
            "unauthorized",
            f"{author} may not file work as requested by {requester}: agents "
            "request work in their own name (admins for anyone)",
        )
    pair = _pair(decl, after)
    if pair is not None and pair != _pair(decl, before):  # a new place taken
        held = _held(tx, pair, ref)
        if held >= MAX_OPEN_WORK:
            raise Reject(
                "too_much_work",
                f"{pair[0]} already has {held} open work items assigned to "
                f"{pair[1]}, the most one agent may request of another "
                f"({MAX_OPEN_WORK}); close one of them (status done or cancelled) "
                "to free its place, or ask an admin to assign more",
            )
    told = _pair(decl, {**after, "status": "open"})  # whatever its status
    if announces and told and after.get("assigned_to") != before.get("assigned_to"):
        requester, assignee = told
        waiting = _unread(tx, requester, assignee)
        if waiting >= MAX_UNREAD_WORK:
            raise Reject(
                "too_much_work",
                f"{assignee} has not yet acknowledged {waiting} work requests from "
                f"{requester}, the most one agent may leave waiting in another's "
                f"inbox ({MAX_UNREAD_WORK}); file more once {assignee} has acked some "
                "(`worldline inbox --ack`)",
            )


def note_sent(
    tx: Tx, decl: WorldDecl, fields: Mapping[str, Value], message_id: str
) -> None:
    """Record the ``WorkAssigned`` ``message_id`` just posted for an item with these
    fields, if its requester is held to the bound (see :func:`check`)."""
    pair = _pair(decl, {**fields, "status": "open"})
    if pair is not None:
        requester, assignee = pair
        tx.put(unread_key(tx.world, assignee, message_id), requester.encode())


def note_read(tx: Tx, agent: str, message_id: str) -> None:
    """``agent`` acked ``message_id``: a work request of it no longer waits."""
    key = unread_key(tx.world, agent, message_id)
    if tx.get(key) is not None:
        tx.put(key, None)


def _unread(tx: Tx, requester: str, assignee: str) -> int:
    """How many ``WorkAssigned`` from ``requester`` wait unacked for ``assignee``
    (counting stops at the cap)."""
    waiting = 0
    for _, value in tx.scan(unread_key(tx.world, assignee, "")):
        if value == requester.encode():
            waiting += 1
            if waiting >= MAX_UNREAD_WORK:
                break
    return waiting


def _held(tx: Tx, pair: tuple[str, str], ref: str) -> int:
    """How many other open items take a place of ``pair`` (counting stops at the
    cap)."""
    requester, assignee = pair
    held = 0
    for key, _ in tx.scan(_pair_prefix(tx.world, assignee, requester)):
        if key == open_key(tx.world, assignee, requester, ref):
            continue
        held += 1
        if held >= MAX_OPEN_WORK:
            break
    return held

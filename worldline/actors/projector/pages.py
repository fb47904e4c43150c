"""Paged answers to ``read`` and ``list``: bounded in bytes, read off the store as
they fill, never the whole world first.

A world of 100,000 beliefs once made one ``read`` build a 30 MB answer (refused:
over the server's 1 MiB max payload) in 7.6 s. Now a page stops at
:data:`PAGE_BYTES` of encoded beliefs (or the request's ``limit``) and names where
the next one starts in ``next_cursor``, an opaque string the client hands back.

``read`` pages through the beliefs in key (id) order, then the belief edges in key
order: each appears on exactly one page, with the contradictions it carries (a split
with its belief, an explicit ``contradicts`` edge with its edge). The first page holds
the crew part and the moves: exactly as before when the whole answer fits one page;
otherwise from the index's bounded candidates, as ``before`` reads them (ranking every
belief would read the whole world again).

``list`` keeps its order, oldest first (created_at, then id): each page reads the
light head of every record (id, type, status, created_at: no evidence decoded),
sorts those, and annotates only what it returns. ``total`` is counted once, by the
first page, and carried in the cursor.
"""

from __future__ import annotations

import base64
import binascii
from bisect import bisect_right
from datetime import datetime
from typing import TYPE_CHECKING, Final, TypeVar

import msgspec

from worldline.actors.projector import beliefs, decision, views, worldview
from worldline.actors.projector import contradictions as contra
from worldline.protocols.beliefs import BeliefEdge, Contradiction
from worldline.protocols.messages import BeliefListReply, RpcError, WorldReply, encode

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Reader
    from worldline.protocols.messages import Belief, ListBeliefs, ReadWorld

__all__ = [
    "PAGE_BYTES",
    "BadCursor",
    "bad_cursor",
    "decode_cursor",
    "encode_cursor",
    "list_beliefs",
    "read_world",
]

# Encoded bytes of beliefs (and edges) a page holds before it stops: half the
# server's default max payload, leaving room for the crew part and the envelope.
PAGE_BYTES: Final = 512 * 1024


class _BeliefHead(msgspec.Struct):
    id: str
    type: str
    created_at: datetime
    status: str = "active"


class _Head(msgspec.Struct):
    """The part of a stored ``BeliefChanged`` that orders and filters a list."""

    belief: _BeliefHead


_HEAD = msgspec.msgpack.Decoder(_Head)
_EDGE = msgspec.msgpack.Decoder(BeliefEdge)
_READ_CURSOR = msgspec.msgpack.Decoder(tuple[str, bytes])
_LIST_CURSOR = msgspec.msgpack.Decoder(tuple[datetime, str, int])


_C = TypeVar("_C")


class BadCursor(ValueError):
    """A cursor this replica did not hand out."""


def encode_cursor(value: object) -> str:
    return base64.urlsafe_b64encode(msgspec.msgpack.encode(value)).decode()


def decode_cursor(cursor: str, decoder: msgspec.msgpack.Decoder[_C]) -> _C:
    try:
        return decoder.decode(base64.urlsafe_b64decode(cursor.encode()))
    except (binascii.Error, ValueError, msgspec.MsgspecError) as exc:
        raise BadCursor(str(exc)) from exc


def bad_cursor(verb: str, exc: BadCursor) -> RpcError:
    return RpcError(
        code="invalid",
        message=f"bad cursor for {verb} ({exc}); pass the next_cursor of the "
        "previous page unchanged, or none for the first page",
    )


def read_world(reader: Reader, world: str, request: ReadWorld) -> WorldReply | RpcError:
    """One page of the world model (see the module docstring)."""
    crew = views.read_world(reader, world, request.entity_type)
    if not request.beliefs:
        return crew
    phase, after = "b", b""
    if request.cursor:
        try:
            phase, after = decode_cursor(request.cursor, _READ_CURSOR)
        except BadCursor as exc:
            return bad_cursor("read", exc)
        if phase not in ("b", "e"):
            return bad_cursor("read", BadCursor(f"phase {phase!r}"))
    page = _ReadPage(reader, world, request, crew if not request.cursor else None)
    if phase == "b":
        page.fill_beliefs(after)
        after = b""
    if page.next is None:
        page.fill_edges(after)
    return page.reply(crew)


class _ReadPage:
    def __init__(
        self,
        reader: Reader,
        world: str,
        request: ReadWorld,
        crew: WorldReply | None,
    ) -> None:
        self.reader = reader
        self.world = world
        self.at = request.at
        self.as_of = request.as_of
        self.reads = beliefs._Reads(reader, world, request.at, as_of=request.as_of)
        self.first = crew is not None
        self.limit = request.limit
        # The first page also carries the crew part: what is left of the budget
        # (at least a tenth of it, so a page always makes progress).
        crew_bytes = 0 if crew is None else len(encode(crew))
        self.budget = max(PAGE_BYTES - crew_bytes, PAGE_BYTES // 10)
        self.used = 0
        self.items = 0
        self.active: list[Belief] = []  # the page's active beliefs, in key order
        self.edges: list[BeliefEdge] = []
        self.splits: list[Contradiction] = []
        self.crossed: list[Contradiction] = []  # explicit contradicts edges
        self.next: tuple[str, bytes] | None = None  # where the next page starts
        self._status: dict[str, bool] = {}

    def _room(self, size: int) -> bool:
        """Whether one more item of ``size`` bytes fits (a page holds at least one)."""
        if self.items and (
            self.used + size > self.budget
            or (self.limit is not None and self.items >= self.limit)
        ):
            return False
        self.used += size
        self.items += 1
        return True

    def _read(self, belief_id: str) -> Belief | None:
        """The belief as the page reports it: annotated, as of the clock; None if
        it did not exist yet then."""
        return beliefs.visible(self.reads, belief_id)

    def _is_active(self, belief_id: str) -> bool:
        if belief_id not in self._status:
            belief = self._read(belief_id)
            self._status[belief_id] = belief is not None and belief.status == "active"
        return self._status[belief_id]

    def fill_beliefs(self, after: bytes) -> None:
        prefix = beliefs._key(self.world, "")
        last = after
        for key, raw in self.reader.scan(prefix):
            if key <= after:
                continue  # an earlier page's
            belief = self._read(_HEAD.decode(raw).belief.id)
            if belief is not None and belief.status == "active":
                if not self._room(len(encode(belief))):
                    self.next = ("b", last)
                    break
                self.active.append(belief)
            last = key
        self.splits = beliefs._contradictions(
            self.reader,
            self.world,
            self.active,
            [],
            self.reads.clock,
            dated=self.at is not None,
            as_of=self.as_of,
            settled=True,
        )

    def fill_edges(self, after: bytes) -> None:
        prefix = beliefs._edge_key(self.world, "")
        last = after
        for key, raw in self.reader.scan(prefix):
            if key <= after:
                continue
            edge = _EDGE.decode(raw)
            if not edge.removed and self.reads.edges([edge]):
                if not self._room(len(raw)):
                    self.next = ("e", last)
                    break
                self.edges.append(edge)
                if (
                    edge.type == "contradicts"
                    and self._is_active(edge.source)
                    and self._is_active(edge.target)
                ):
                    found = contra.edge_contradiction(
                        self.reader, self.world, edge, at=self.at, as_of=self.as_of
                    )
                    if found is not None and found.status != "dissolved":
                        self.crossed.append(found)
            last = key

    def reply(self, crew: WorldReply) -> WorldReply:
        moves = []
        if self.first and self.next is None:
            # The whole answer is this page: rank every belief, as always.
            scene = worldview.Scene(
                world=self.world,
                decl=crew.declaration,
                beliefs=self.active,
                edges=self.edges,
            )
            moves = worldview.ranked_moves(scene)
        elif self.first:
            scene = decision.decision_scene(
                self.reader,
                self.world,
                decl=crew.declaration,
                view=None,
                query="",
                focus="",
                at=self.at,
            )
            moves = worldview.ranked_moves(scene)
        return WorldReply(
            declaration=crew.declaration if self.first else None,
            entities=crew.entities if self.first else [],
            edges=crew.edges if self.first else [],
            version=crew.version,
            beliefs=[b for b in self.active if b.type not in ("goal", "gap")],
            belief_edges=self.edges,
            gaps=[b for b in self.active if b.type == "gap"],
            goals=[b for b in self.active if b.type == "goal"],
            contradictions=sorted(self.crossed, key=lambda c: c.trace[-1])
            + self.splits,
            moves=moves,
            next_cursor="" if self.next is None else encode_cursor(self.next),
        )


def list_beliefs(
    reader: Reader, world: str, request: ListBeliefs
) -> BeliefListReply | RpcError:
    """One page of the beliefs that match, oldest first (see the module docstring)."""
    start: tuple[datetime, str] | None = None
    total = -1
    if request.cursor:
        try:
            created, belief_id, total = decode_cursor(request.cursor, _LIST_CURSOR)
        except BadCursor as exc:
            return bad_cursor("list", exc)
        start = (created, belief_id)
    heads = []
    for _, raw in reader.scan(beliefs._key(world, "")):
        head = _HEAD.decode(raw).belief
        if (
            (request.type is None or head.type == request.type)
            # With ``at`` the status is the one it had then: matched once read.
            and (
                request.status == "any"
                or request.at is not None
                or request.as_of is not None
                or head.status == request.status
            )
            and (request.at is None or head.created_at <= request.at)
            and (request.as_of is None or head.created_at <= request.as_of)
        ):
            heads.append((head.created_at, head.id))
    heads.sort()
    position = 0 if start is None else bisect_right(heads, start)
    # Label and flag are read at the clock, with the belief's neighbourhood: only
    # an annotated belief says whether it matches.
    filtered = (
        request.label is not None
        or request.flag is not None
        or (
            (request.at is not None or request.as_of is not None)
            and request.status != "any"
        )
    )
    if total < 0 and not filtered:
        total = len(heads)
    reads = beliefs._Reads(reader, world, request.at, as_of=request.as_of)
    page: list[Belief] = []
    used = 0
    more = False
    counted = 0
    for _, belief_id in heads[position:]:
        belief = beliefs.visible(reads, belief_id)
        if belief is None or not _matches(belief, request):
            continue
        counted += 1
        if more:
            continue  # counting the total on the first page
        size = len(encode(belief))
        if page and (used + size > PAGE_BYTES or len(page) >= request.limit):
            more = True
            if total >= 0:
                break
            continue
        used += size
        page.append(belief)
    if total < 0:  # the first page of a filtered list: it counted every match
        total = counted
    last = page[-1] if page else None
    next_cursor = ""
    if more and last is not None:
        next_cursor = encode_cursor((last.created_at, last.id, total))
    return BeliefListReply(beliefs=tuple(page), total=total, next_cursor=next_cursor)


def _matches(belief: Belief, request: ListBeliefs) -> bool:
    return (
        (request.label is None or belief.label == request.label)
        and (request.flag is None or request.flag in belief.flags)
        and (request.status == "any" or belief.status == request.status)
    )

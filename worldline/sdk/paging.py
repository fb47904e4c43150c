"""Paged reads in the SDK: ``list`` and ``search`` a page at a time, with the cursor
each page hands back, and async iterators that follow the cursors to the end; and
``trace``, which reads as of a recorded time as they do.

A page's ``next_cursor`` is opaque: pass it back unchanged as ``cursor`` for the next
page ("" on the last). A cursor the projector did not hand out is refused with
:class:`~worldline.sdk.errors.BadRequest`, whose message names the fix. Mixed into
:class:`worldline.sdk.client.World`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from worldline.protocols.messages import (
    BeliefListReply,
    ListBeliefs,
    SearchBeliefs,
    SearchReply,
    TraceBelief,
    TraceReply,
)
from worldline.sdk.beliefs import BeliefMixin
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from datetime import datetime

    from worldline.protocols.messages import Belief, BeliefType, SearchHit

__all__ = ["LIST_PAGE", "SEARCH_PAGE", "Flag", "PagingMixin", "Status"]

Flag = Literal["stale", "stable", "contradicted", "uncertain"]
Status = Literal["active", "retracted", "resolved", "any"]
LIST_PAGE = 10_000  # beliefs one list request carries (the projector bounds bytes too)
SEARCH_PAGE = 200  # hits one search request may ask for


class PagingMixin(BeliefMixin):
    """``list``, ``list_page``, ``iter_list``, ``search``, ``iter_search``,
    ``trace``."""

    # --- list -----------------------------------------------------------------------

    async def _list_once(self, request: ListBeliefs) -> BeliefListReply:
        reply = await self._request("list", request)
        if not isinstance(reply, BeliefListReply):
            raise BadRequest(f"unexpected reply to list: {reply!r}")
        return reply

    async def list_page(
        self,
        *,
        type: BeliefType | None = None,
        label: str | None = None,
        flag: Flag | None = None,
        status: Status = "active",
        at: datetime | None = None,
        limit: int = 1000,
        cursor: str = "",
        as_of: datetime | None = None,
    ) -> BeliefListReply:
        """One page of the matching beliefs, oldest first: at most ``limit`` of them
        from ``cursor`` (the previous page's ``next_cursor``; "" for the first),
        with ``total`` (how many match in all) and ``next_cursor`` ("" when none
        follow). A limit above what one request carries is filled request by
        request.

        Raises:
            BadRequest: ``limit`` below 1, or a cursor the projector did not hand
                out (the message says what to pass instead).
        """
        if limit < 1:
            raise BadRequest(f"limit {limit} lists nothing; pass 1 or more")
        found: list[Belief] = []
        total = 0
        while True:
            reply = await self._list_once(
                ListBeliefs(
                    type=type,
                    label=label,
                    flag=flag,
                    status=status,
                    at=at,
                    as_of=as_of,
                    limit=min(LIST_PAGE, limit - len(found)),
                    cursor=cursor,
                )
            )
            found += reply.beliefs
            total, cursor = reply.total, reply.next_cursor
            if not cursor or len(found) >= limit:
                break
        return BeliefListReply(beliefs=tuple(found), total=total, next_cursor=cursor)

    async def iter_list(
        self,
        *,
        type: BeliefType | None = None,
        label: str | None = None,
        flag: Flag | None = None,
        status: Status = "active",
        at: datetime | None = None,
        page: int = LIST_PAGE,
        cursor: str = "",
        as_of: datetime | None = None,
    ) -> AsyncIterator[Belief]:
        """Every matching belief from ``cursor`` to the end, oldest first, read
        ``page`` beliefs per request (1 to 10,000; the projector also stops a page
        at half a MiB): only one page is held at a time.

        Raises:
            BadRequest: ``page`` outside 1-10,000, or a bad cursor.
        """
        if not 1 <= page <= LIST_PAGE:
            raise BadRequest(f"page {page} is outside 1-{LIST_PAGE:,}")
        while True:
            reply = await self._list_once(
                ListBeliefs(
                    type=type,
                    label=label,
                    flag=flag,
                    status=status,
                    at=at,
                    as_of=as_of,
                    limit=page,
                    cursor=cursor,
                )
            )
            for belief in reply.beliefs:
                yield belief
            cursor = reply.next_cursor
            if not cursor:
                return

    async def list(
        self,
        *,
        type: BeliefType | None = None,
        label: str | None = None,
        flag: Flag | None = None,
        status: Status = "active",
        at: datetime | None = None,
        limit: int | None = 1000,
        as_of: datetime | None = None,
    ) -> list[Belief]:
        """The active set (or a filtered part of it), oldest first: at most ``limit``
        beliefs (None: every one), read a page at a time. For the cursor of what
        follows, use :meth:`list_page`; to stream every belief, :meth:`iter_list`.

        Raises:
            BadRequest: ``limit`` below 1.
        """
        if limit is None:
            return [
                b
                async for b in self.iter_list(
                    type=type, label=label, flag=flag, status=status, at=at, as_of=as_of
                )
            ]
        if limit < 1:
            raise BadRequest(f"limit {limit} lists nothing; pass 1 or more, or None")
        page = await self.list_page(
            type=type,
            label=label,
            flag=flag,
            status=status,
            at=at,
            limit=limit,
            as_of=as_of,
        )
        return list(page.beliefs)

    # --- search ---------------------------------------------------------------------

    async def search(
        self,
        query: str,
        *,
        limit: int = 10,
        type: BeliefType | None = None,
        at: datetime | None = None,
        cursor: str = "",
        as_of: datetime | None = None,
    ) -> SearchReply:
        """The active beliefs that best answer ``query``, best first: one page of at
        most ``limit`` hits (1-200) from ``cursor`` (the previous page's
        ``next_cursor``; "" for the first). Each hit carries the belief, its fused
        ``score``, each channel's own score (``channels``: ``lexical``,
        ``semantic``, ``prior``) and its ``trace`` (``<evidence id> <source>`` per
        piece); the reply names the ``embedder`` and the ``next_cursor`` ("" on
        the last page). With ``as_of`` (recorded time), the beliefs active then, as
        the world knew them then (as :meth:`get`).

        Raises:
            BadRequest: an empty query, ``limit`` outside 1-200, or a cursor the
                projector did not hand out (the message says what to pass).
        """
        if not query.strip():
            raise BadRequest("search needs a query: the words to look for")
        if not 1 <= limit <= SEARCH_PAGE:
            raise BadRequest(
                f"limit {limit} is outside 1-{SEARCH_PAGE}: a search page holds at "
                f"most {SEARCH_PAGE} hits; follow next_cursor (or iter_search) for more"
            )
        request = SearchBeliefs(
            query=query, limit=limit, type=type, at=at, cursor=cursor, as_of=as_of
        )
        reply = await self._request("search", request)
        if not isinstance(reply, SearchReply):
            raise BadRequest(f"unexpected reply to search: {reply!r}")
        return reply

    async def iter_search(
        self,
        query: str,
        *,
        type: BeliefType | None = None,
        at: datetime | None = None,
        page: int = 50,
        cursor: str = "",
        limit: int | None = None,
        as_of: datetime | None = None,
    ) -> AsyncIterator[SearchHit]:
        """Every hit for ``query``, best first, from ``cursor`` on: ``page`` hits per
        request (1-200), following the cursors until the last page or ``limit``
        hits (None: no bound but the world).

        Raises:
            BadRequest: as :meth:`search` does, or ``limit`` below 1.
        """
        if limit is not None and limit < 1:
            raise BadRequest(f"limit {limit} finds nothing; pass 1 or more, or None")
        given = 0
        while True:
            size = page if limit is None else min(page, limit - given)
            reply = await self.search(
                query, limit=size, type=type, at=at, cursor=cursor, as_of=as_of
            )
            for hit in reply.hits:
                yield hit
            given += len(reply.hits)
            cursor = reply.next_cursor
            if not cursor or (limit is not None and given >= limit):
                return

    # --- trace ----------------------------------------------------------------------

    async def trace(
        self, belief_id: str, *, as_of: datetime | None = None
    ) -> TraceReply:
        """The provenance chain: every evidence item, its source and observation, and
        how the confidence moved at each step; with ``as_of`` (recorded time), as
        the world knew it then: the belief as :meth:`get` reports it, the evidence
        recorded by then and the trust that weighed it then.

        Raises:
            BadRequest: no belief with that id in this world (as of ``as_of``).
        """
        reply = await self._request(
            "trace", TraceBelief(belief_id=belief_id, as_of=as_of)
        )
        if not isinstance(reply, TraceReply):
            raise BadRequest(f"unexpected reply to trace: {reply!r}")
        if reply.belief is None:
            when = "" if as_of is None else f" as of {as_of.isoformat()}"
            raise BadRequest(f"no belief {belief_id!r} in world {self.world!r}{when}")
        return reply

"""No agent buries another's inbox under work (issue 23, hole F14 of bench/attack.py):
one requester may hold at most ``MAX_OPEN_WORK`` (16) open work items assigned to one
other agent; the 17th is refused ``too_much_work``, closing one frees its place,
updating one takes no second place, and other requesters, other assignees, work for
oneself and the world's admins are not held to it. Since closing frees a place, the
messages are bounded too: at most ``MAX_UNREAD_WORK`` (32) of one requester's
``WorkAssigned`` may wait unacked in another's inbox. The requester is always the
author's own name, on updates and field writes too, so the bounds cannot be dodged
through invented requesters. Pure core, no bus.

Before this change spock filed 200 of 200 priority-1 items into zora's inbox.
"""

from __future__ import annotations

from typing import Final

from tests.core.test_crew import (
    Crew,
    assert_only_bookkeeping,
    declared,
    delivered,
    of_type,
    rejected,
)
from worldline.actors.materializer.workload import MAX_OPEN_WORK, MAX_UNREAD_WORK
from worldline.actors.runtime.memory import state_hash
from worldline.protocols.messages import WorkAssigned

CAP: Final = MAX_OPEN_WORK


def fill(c: Crew, requester: str = "spock", assignee: str = "zora") -> None:
    """``requester`` files ``CAP`` open items for ``assignee``, all applied."""
    for n in range(CAP):
        out = c.work(
            requester, f"{requester}-{n}", assigned_to=assignee, requested_by=requester
        )
        (assigned,) = of_type(delivered(out)[assignee], WorkAssigned)
        assert assigned.requested_by == requester


def test_the_cap_is_sixteen() -> None:
    assert CAP == 16
    assert MAX_UNREAD_WORK == 32


def test_the_seventeenth_open_item_is_refused_and_closing_one_frees_a_place() -> None:
    c = declared()
    fill(c)
    before = dict(c.st.data)
    out = c.work("spock", "spock-16", assigned_to="zora", requested_by="spock")
    refusal = rejected(c, out, "spock")
    assert refusal.code == "too_much_work"
    assert "16 open work items assigned to zora" in refusal.reason
    assert "done or cancelled" in refusal.reason
    assert_only_bookkeeping(before, c, "spock")  # nothing reached zora
    assert c.entity("work:spock-16") is None
    # Updating an item already held takes no second place.
    out = c.work(
        "spock", "spock-3", assigned_to="zora", requested_by="spock", status="done"
    )
    assert c.value("work:spock-3", "status") == "done"
    out = c.work("spock", "spock-16", assigned_to="zora", requested_by="spock")
    (assigned,) = of_type(delivered(out)["zora"], WorkAssigned)
    assert assigned.work == "work:spock-16"
    out = c.work(
        "spock",
        "spock-0",
        assigned_to="zora",
        requested_by="spock",
        status="in_progress",
    )
    assert c.value("work:spock-0", "status") == "in_progress"
    # Full again: the 18th is refused, and so is reopening the closed one.
    out = c.work("spock", "spock-17", assigned_to="zora", requested_by="spock")
    assert rejected(c, out, "spock").code == "too_much_work"
    out = c.work("spock", "spock-3", assigned_to="zora", requested_by="spock")
    assert rejected(c, out, "spock").code == "too_much_work"
    assert c.value("work:spock-3", "status") == "done"


def test_other_requesters_assignees_and_own_work_are_unaffected() -> None:
    c = declared()
    fill(c)
    for requester in ("ada", "scotty"):  # another requester, same assignee
        out = c.work(
            requester, f"{requester}-x", assigned_to="zora", requested_by=requester
        )
        assert of_type(delivered(out)["zora"], WorkAssigned)
    out = c.work("spock", "for-scotty", assigned_to="scotty", requested_by="spock")
    assert of_type(delivered(out)["scotty"], WorkAssigned)  # another assignee
    for n in range(CAP + 4):  # work one files for oneself buries no one
        c.work("spock", f"own-{n}", assigned_to="spock", requested_by="spock")
        assert c.value(f"work:own-{n}", "status") == "open"


def test_the_admins_are_exempt_and_their_requests_take_no_place() -> None:
    c = declared()  # henry is the admin
    for n in range(CAP + 4):
        out = c.work("henry", f"lead-{n}", assigned_to="zora", requested_by="henry")
        assert of_type(delivered(out)["zora"], WorkAssigned)
    fill(c)  # spock's sixteen places are all still free
    # An admin may file in spock's name beyond spock's places.
    out = c.work("henry", "for-spock", assigned_to="zora", requested_by="spock")
    assert of_type(delivered(out)["zora"], WorkAssigned)


def test_moving_an_item_onto_a_full_pair_is_refused() -> None:
    c = declared()
    fill(c)
    c.work("spock", "elsewhere", assigned_to="scotty", requested_by="spock")
    c.work("spock", "closed", assigned_to="zora", requested_by="spock", status="done")
    # Reassigned to zora, by put_work or by a field write: a new place.
    out = c.work("spock", "elsewhere", assigned_to="zora", requested_by="spock")
    assert rejected(c, out, "spock").code == "too_much_work"
    out = c.set("spock", "work:elsewhere", "assigned_to", "zora")
    assert rejected(c, out, "spock").code == "too_much_work"
    out = c.set("spock", "work:closed", "status", "open")  # reopened
    assert rejected(c, out, "spock").code == "too_much_work"
    assert c.value("work:elsewhere", "assigned_to") == "scotty"
    assert c.value("work:closed", "status") == "done"
    # A write that closes one frees a place for the next.
    c.set("spock", "work:spock-5", "status", "cancelled")
    c.set("spock", "work:closed", "status", "open")
    assert c.value("work:closed", "status") == "open"


def test_the_requester_is_always_the_authors_own_name() -> None:
    c = declared()
    fill(c)
    # Renaming the requester of a held item would free a place without closing it.
    out = c.work("spock", "spock-0", assigned_to="zora", requested_by="mallory")
    assert rejected(c, out, "spock").code == "unauthorized"
    out = c.set("spock", "work:spock-0", "requested_by", "mallory")
    assert rejected(c, out, "spock").code == "unauthorized"
    assert c.value("work:spock-0", "requested_by") == "spock"
    # The assignee may take an item over as its own (the SDK's default requester).
    c.work("zora", "spock-1", assigned_to="zora", requested_by="zora")
    assert c.value("work:spock-1", "requested_by") == "zora"
    out = c.work("spock", "spock-16", assigned_to="zora", requested_by="spock")
    assert of_type(delivered(out)["zora"], WorkAssigned)


def test_the_same_ops_refuse_the_same_work() -> None:
    hashes = set()
    for _ in range(2):
        c = declared()
        fill(c)
        c.work("spock", "spock-16", assigned_to="zora", requested_by="spock")
        hashes.add(state_hash(c.st))
    assert len(hashes) == 1


def test_filing_and_closing_cannot_flood_the_inbox_past_the_unread_bound() -> None:
    c = declared()
    told: list[str] = []
    for n in range(MAX_UNREAD_WORK):  # file and close, file and close ...
        out = c.work("spock", f"churn-{n}", assigned_to="zora", requested_by="spock")
        (assigned,) = of_type(delivered(out)["zora"], WorkAssigned)
        told.append(assigned.id)
        c.work("spock", f"churn-{n}", assigned_to="zora", requested_by="spock",
               status="cancelled")  # fmt: skip
    before = dict(c.st.data)
    out = c.work("spock", "churn-x", assigned_to="zora", requested_by="spock")
    refusal = rejected(c, out, "spock")
    assert refusal.code == "too_much_work"
    assert "not yet acknowledged 32 work requests from spock" in refusal.reason
    assert_only_bookkeeping(before, c, "spock")
    # Nor is a closed item filed straight to her, or one moved back and forth.
    out = c.work("spock", "churn-y", assigned_to="zora", requested_by="spock",
                 status="done")  # fmt: skip
    assert rejected(c, out, "spock").code == "too_much_work"
    c.work("spock", "flip", assigned_to="scotty", requested_by="spock")
    out = c.work("spock", "flip", assigned_to="zora", requested_by="spock")
    assert rejected(c, out, "spock").code == "too_much_work"
    # Others still reach her; once she acks two, spock may file two more.
    out = c.work("ada", "ada-1", assigned_to="zora", requested_by="ada")
    assert of_type(delivered(out)["zora"], WorkAssigned)
    c.ack("zora", told[:2])
    for work_id in ("churn-x", "flip"):
        out = c.work("spock", work_id, assigned_to="zora", requested_by="spock")
        assert of_type(delivered(out)["zora"], WorkAssigned)
    out = c.work("spock", "churn-z", assigned_to="zora", requested_by="spock")
    assert rejected(c, out, "spock").code == "too_much_work"


def test_the_admins_post_work_without_the_unread_bound() -> None:
    c = declared()
    for n in range(MAX_UNREAD_WORK + 4):
        out = c.work("henry", f"h-{n}", assigned_to="zora", requested_by="henry")
        assert of_type(delivered(out)["zora"], WorkAssigned)
        c.work("henry", f"h-{n}", assigned_to="zora", requested_by="henry",
               status="done")  # fmt: skip


def test_the_open_work_index_follows_the_work_items() -> None:
    """The count reads an index (``workopen/...``), kept by every write of a work
    item's fields; it always lists exactly the open items filed for another."""
    c = declared()
    fill(c)
    c.work("henry", "lead", assigned_to="zora", requested_by="henry")
    c.work("spock", "spock-0", assigned_to="scotty", requested_by="spock")
    c.set("spock", "work:spock-1", "status", "done")
    c.set("spock", "work:spock-2", "assigned_to", "ada")
    c.work("zora", "spock-3", assigned_to="zora", requested_by="zora")
    c.set("ada", "project:soteria", "phase", "build")  # rule-filed work
    c.set("spock", "work:spock-1", "status", "open")
    # No agent's name: indexed nowhere, so nobody else's places are taken.
    c.work("spock", "odd", assigned_to="scotty", requested_by="spock")
    c.set("spock", "work:odd", "assigned_to", "zora/ada")
    expected = set()
    for ref, entity in c.works().items():
        fields = {n: f.value for n, f in entity.fields.items()}
        if (
            fields["status"] not in ("done", "cancelled")
            and fields["requested_by"] != fields["assigned_to"]
            and "/" not in str(fields["assigned_to"])
        ):
            assignee, requester = fields["assigned_to"], fields["requested_by"]
            expected.add(f"workopen/crew/{assignee}/{requester}/{ref}".encode())
    assert any(b"/scotty/ada/work:replan-" in key for key in expected)
    assert set(dict(c.st.scan(b"workopen/crew/"))) == expected

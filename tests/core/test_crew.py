"""The crew-world core (worldline.actors.materializer.crew and the modules it dispatches
to), driven through MemoryState.

Every op goes in with the context the runtime would build for it: the author is the
last token of the ops subject, and the sequence grows by one per op, as the OPS stream
numbers them. No NATS, no LMDB, no clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final, TypeVar

import msgspec
import pytest

from worldline.actors.materializer import crew
from worldline.actors.materializer.core import (
    conflict_key,
    last_change_key,
    last_op_key,
    unchanged_key,
)
from worldline.actors.materializer.inboxes import InboxRecord
from worldline.actors.materializer.keys import decl_key, edge_key, entity_key, known_key
from worldline.actors.runtime.memory import MemoryState, state_hash
from worldline.actors.runtime.spec import Context, Outgoing
from worldline.protocols.messages import (
    OPS_INBOX,
    AckInbox,
    AddBelief,
    AddEdge,
    DeclareWorld,
    EdgeChanged,
    EntityChanged,
    InboxChanged,
    Message,
    Notification,
    OpsInbox,
    PutWork,
    Rejection,
    RemoveEdge,
    SetField,
    UpsertEntity,
    WorkAssigned,
    WorldDeclared,
    encode,
)
from worldline.protocols.subjects import author_of, inbox, ops, state, world_of
from worldline.protocols.world import (
    MAX_VALUE_BYTES,
    Authority,
    Dampening,
    Edge,
    EdgeSeed,
    Entity,
    EntitySeed,
    Environment,
    Goal,
    Grant,
    Intent,
    Rule,
    Subscription,
    Value,
    WorldDecl,
    WorldInfo,
    agent_ref,
)

if TYPE_CHECKING:
    from collections.abc import Callable

W: Final = "crew"
W2: Final = "other"
NOW: Final = datetime(2024, 6, 1, 12, 0, 0, tzinfo=UTC)
T0: Final = datetime(2024, 6, 1, 9, 0, 0, tzinfo=UTC)
PROJECT: Final = "project:soteria"
COMPANY: Final = "company:acme"
AGENTS: Final = ("ada", "spock", "scotty", "zora")

_ENTITY: Final = msgspec.msgpack.Decoder(Entity)
_EDGE: Final = msgspec.msgpack.Decoder(Edge)
_DECL: Final = msgspec.msgpack.Decoder(WorldDecl)
_REJECTION: Final = msgspec.msgpack.Decoder(Rejection)
_RECORD: Final = msgspec.msgpack.Decoder(InboxRecord)

REPLAN: Final = Rule(
    id="replan",
    on="project.phase",
    notify="collaborates_on",
    work_kind="replan_request",
    goal="Replan: {entity}.{field} is now {value}",
)


def crew_decl(
    *,
    world: str = W,
    rules: list[Rule] | None = None,
    entities: list[EntitySeed] | None = None,
    edges: list[EdgeSeed] | None = None,
    entity_types: list[str] | None = None,
    depth: int = 2,
    dedupe_window: float = 3600.0,
) -> WorldDecl:
    """The test crew: henry administers, ada runs projects, spock and scotty work on
    soteria, zora follows the company."""
    return WorldDecl(
        world=WorldInfo(id=world, kind="crew"),
        environment=Environment(
            entity_types=(
                ["project", "company", "user"] if entity_types is None else entity_types
            )
        ),
        intent=Intent(goals=[Goal(id="ship", text="Ship the Soteria pilot.")]),
        authority=Authority(
            admins=["henry"],
            grants=[
                Grant(agents=["henry", "ada"], fields=["user.*"]),
                Grant(agents=["ada"], fields=["project.*", "company.*"]),
            ],
        ),
        entities=(
            [
                *(EntitySeed(id=agent_ref(a)) for a in AGENTS),
                EntitySeed(id=PROJECT, fields={"phase": "design", "budget": 12}),
                EntitySeed(id=COMPANY, fields={"name": "Acme"}),
            ]
            if entities is None
            else entities
        ),
        edges=(
            [
                EdgeSeed(
                    id="e-spock",
                    type="collaborates_on",
                    source="agent:spock",
                    target=PROJECT,
                ),
                EdgeSeed(
                    id="e-scotty",
                    type="collaborates_on",
                    source="agent:scotty",
                    target=PROJECT,
                ),
            ]
            if edges is None
            else edges
        ),
        subscriptions=[Subscription(agent="zora", on=["company.*"])],
        rules=[REPLAN] if rules is None else rules,
        dampening=Dampening(depth=depth, dedupe_window=dedupe_window),
    )


class Crew:
    """One materializer state and the OPS stream feeding it (one sequence per op)."""

    def __init__(
        self, world: str = W, st: MemoryState | None = None, first_seq: int = 1
    ) -> None:
        self.world = world
        self.st = MemoryState() if st is None else st
        self.seq = first_seq - 1

    def next_id(self) -> str:
        return f"op-{self.world}-{self.seq + 1}"

    def send(self, op: OpsInbox, sender: str | None = None) -> list[Outgoing]:
        """Publish ``op`` on ``sender``'s ops subject (default: its own author)."""
        self.seq += 1
        subject = ops(self.world, op.author if sender is None else sender)
        ctx = Context(
            world=world_of(subject),
            author=author_of(subject),
            subject=subject,
            seq=self.seq,
            now=NOW,
        )
        decoded = OPS_INBOX.decode(encode(op))  # as the runtime hands it over
        return self.st.apply(crew.handle(self.st, decoded, ctx))

    # --- op builders (op ids derive from the sequence: deterministic) -------------

    def declare(
        self, decl: WorldDecl | None = None, author: str = "henry", at: datetime = T0
    ) -> list[Outgoing]:
        return self.send(
            DeclareWorld(
                op_id=self.next_id(),
                author=author,
                at=at,
                declaration=crew_decl() if decl is None else decl,
            )
        )

    def set(
        self,
        author: str,
        entity: str,
        field: str,
        value: Value,
        *,
        expect_version: int | None = None,
        at: datetime = T0,
        sender: str | None = None,
    ) -> list[Outgoing]:
        return self.send(
            SetField(
                op_id=self.next_id(),
                author=author,
                at=at,
                entity=entity,
                field=field,
                value=value,
                expect_version=expect_version,
            ),
            sender,
        )

    def upsert(
        self, author: str, entity: str, fields: dict[str, Value], at: datetime = T0
    ) -> list[Outgoing]:
        return self.send(
            UpsertEntity(
                op_id=self.next_id(), author=author, at=at, entity=entity, fields=fields
            )
        )

    def work(
        self,
        author: str,
        work_id: str,
        *,
        assigned_to: str,
        requested_by: str,
        status: str = "open",
        due_at: datetime | None = None,
        at: datetime = T0,
    ) -> list[Outgoing]:
        op = msgspec.convert(
            {
                "kind": "op.put_work.v1",
                "op_id": self.next_id(),
                "author": author,
                "at": at,
                "work_id": work_id,
                "work_kind": "review_request",
                "assigned_to": assigned_to,
                "goal": "Review the Soteria plan.",
                "priority": 2,
                "due_at": due_at,
                "status": status,
                "requested_by": requested_by,
            },
            PutWork,
        )
        return self.send(op)

    def ack(self, author: str, message_ids: list[str]) -> list[Outgoing]:
        return self.send(
            AckInbox(
                op_id=self.next_id(), author=author, at=T0, message_ids=message_ids
            )
        )

    # --- reading the state --------------------------------------------------------

    def entity(self, ref: str) -> Entity | None:
        raw = self.st.get(entity_key(self.world, ref))
        return None if raw is None else _ENTITY.decode(raw)

    def must(self, ref: str) -> Entity:
        entity = self.entity(ref)
        assert entity is not None, ref
        return entity

    def value(self, ref: str, field: str) -> Value:
        return self.must(ref).fields[field].value

    def version(self, ref: str, field: str) -> int:
        return self.must(ref).fields[field].version

    def edge(self, edge_id: str) -> Edge | None:
        raw = self.st.get(edge_key(self.world, edge_id))
        return None if raw is None else _EDGE.decode(raw)

    def works(self) -> dict[str, Entity]:
        prefix = f"entity/{self.world}/work:".encode()
        return {
            entity.id: entity
            for entity in (_ENTITY.decode(raw) for _, raw in self.st.scan(prefix))
        }

    def conflict(self, seq: int) -> Rejection | None:
        raw = self.st.get(conflict_key(self.world, seq))
        return None if raw is None else _REJECTION.decode(raw)

    def record(self, agent: str, message_id: str) -> InboxRecord | None:
        raw = self.st.get(f"inbox/{self.world}/{agent}/{message_id}".encode())
        return None if raw is None else _RECORD.decode(raw)


def delivered(out: list[Outgoing], world: str = W) -> dict[str, list[Message]]:
    """Inbox messages by recipient (only recipients that got something)."""
    found: dict[str, list[Message]] = {}
    for item in out:
        for agent in (*AGENTS, "henry", "mallory"):
            if item.subject == inbox(world, agent):
                assert item.msg_id == getattr(item.message, "id", None)
                found.setdefault(agent, []).append(item.message)
    assert sum(map(len, found.values())) == sum(
        1 for item in out if item.subject.startswith(inbox(world, ""))
    ), "a message went to an inbox outside the crew"
    return found


M = TypeVar("M", bound=Message)


def of_type(messages: list[Message], cls: type[M]) -> list[M]:
    return [m for m in messages if isinstance(m, cls)]


def feed(out: list[Outgoing], kind: str, world: str = W) -> list[Message]:
    return [item.message for item in out if item.subject == state(world, kind)]


def inbox_summary(out: list[Outgoing], agent: str) -> InboxChanged:
    found = [
        m
        for m in feed(out, "inbox")
        if isinstance(m, InboxChanged) and m.agent == agent
    ]
    assert len(found) == 1, found
    return found[0]


def rejected(c: Crew, out: list[Outgoing], sender: str) -> Rejection:
    """The one Rejection ``sender`` got for the op just sent; it is also logged."""
    assert set(delivered(out)) == {sender}, delivered(out)
    (message,) = delivered(out)[sender]
    assert isinstance(message, Rejection)
    assert c.conflict(c.seq) == message
    assert c.st.get(last_op_key(c.world)) == str(c.seq).encode()
    assert feed(out, "entity") == feed(out, "edge") == feed(out, "declared") == []
    return message


def bookkeeping(world: str, sender: str) -> tuple[bytes, ...]:
    """Key prefixes a rejected op may write: the conflict log, the last applied (and
    last published) op, and the sender's inbox record and summary."""
    return (
        f"conflict/{world}/".encode(),
        last_op_key(world),
        last_change_key(world),
        f"inbox/{world}/{sender}/".encode(),
        f"inboxsum/{world}/{sender}".encode(),
    )


def changed_keys(before: dict[bytes, bytes], after: dict[bytes, bytes]) -> set[bytes]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def assert_only_bookkeeping(before: dict[bytes, bytes], c: Crew, sender: str) -> None:
    changed = changed_keys(before, c.st.data)
    allowed = bookkeeping(c.world, sender)
    assert changed, "a rejection is always logged"
    assert all(key.startswith(allowed) for key in changed), changed


def declared() -> Crew:
    c = Crew()
    c.declare()
    return c


# --- before a declaration -------------------------------------------------------


@pytest.mark.parametrize(
    "send",
    [
        lambda c: c.set("ada", PROJECT, "phase", "build"),
        lambda c: c.upsert("ada", COMPANY, {"name": "Acme"}),
        lambda c: c.work("ada", "w1", assigned_to="spock", requested_by="ada"),
        lambda c: c.ack("ada", ["m1"]),
        lambda c: c.send(
            AddEdge(
                op_id="op-e",
                author="ada",
                at=T0,
                edge=Edge(id="e1", type="knows", source="agent:ada", target=PROJECT),
            )
        ),
        lambda c: c.send(RemoveEdge(op_id="op-r", author="ada", at=T0, edge_id="e1")),
    ],
    ids=["set_field", "upsert", "put_work", "ack", "add_edge", "remove_edge"],
)
def test_ops_before_any_declaration_are_rejected_as_invalid(
    send: Callable[[Crew], list[Outgoing]],
) -> None:
    c = Crew()
    c.seq = 41  # the first op in this world can sit anywhere in the OPS stream
    out = send(c)
    rejection = rejected(c, out, "ada")
    assert rejection.code == "invalid"
    assert "not declared" in rejection.reason
    assert c.st.get(f"conflict/{W}/{42:012d}".encode()) == encode(rejection)
    assert inbox_summary(out, "ada").pending == 1
    assert c.st.get(decl_key(W)) is None
    assert not any(k.startswith((b"entity/", b"edge/")) for k in c.st.data)


# --- declaring --------------------------------------------------------------------


def test_declaration_seeds_entities_and_edges_at_the_declare_sequence() -> None:
    c = Crew()
    c.seq = 6
    out = c.declare()
    assert c.seq == 7
    raw = c.st.get(decl_key(W))
    assert raw is not None
    assert _DECL.decode(raw) == crew_decl()
    assert feed(out, "declared") == [WorldDeclared(declaration=crew_decl(), version=7)]
    project = c.must(PROJECT)
    assert (project.type, project.version) == ("project", 7)
    assert {
        name: (f.value, f.version, f.author) for name, f in project.fields.items()
    } == {
        "phase": ("design", 7, "henry"),
        "budget": (12, 7, "henry"),
    }
    assert project.fields["phase"].at == T0
    for agent in AGENTS:
        assert c.must(agent_ref(agent)).version == 7
    changed = {m.entity.id for m in of_type(feed(out, "entity"), EntityChanged)}
    assert changed == {*(agent_ref(a) for a in AGENTS), PROJECT, COMPANY}
    for edge_id, source in (("e-spock", "agent:spock"), ("e-scotty", "agent:scotty")):
        assert c.edge(edge_id) == Edge(
            id=edge_id,
            type="collaborates_on",
            source=source,
            target=PROJECT,
            version=7,
            author="henry",
        )
    edges = of_type(feed(out, "edge"), EdgeChanged)
    assert sorted(e.edge.id for e in edges) == ["e-scotty", "e-spock"]
    assert not any(e.removed for e in edges)
    assert delivered(out) == {}
    assert c.st.get(last_op_key(W)) == b"7"


def test_redeclaration_by_a_non_admin_is_unauthorized() -> None:
    c = declared()
    before = dict(c.st.data)
    out = c.declare(crew_decl(rules=[]), author="ada")
    assert rejected(c, out, "ada").code == "unauthorized"
    assert_only_bookkeeping(before, c, "ada")


def test_admin_redeclaration_fills_seeds_but_keeps_written_values() -> None:
    c = declared()
    c.set("ada", PROJECT, "phase", "build")
    written = c.seq
    decl = crew_decl(
        entities=[
            EntitySeed(id=PROJECT, fields={"phase": "design", "owner": "ada"}),
            *(EntitySeed(id=agent_ref(a)) for a in AGENTS),
        ],
        rules=[],
    )
    out = c.declare(decl)
    assert delivered(out) == {}
    assert feed(out, "declared") == [WorldDeclared(declaration=decl, version=c.seq)]
    assert (c.value(PROJECT, "phase"), c.version(PROJECT, "phase")) == (
        "build",
        written,
    )
    assert (c.value(PROJECT, "owner"), c.version(PROJECT, "owner")) == ("ada", c.seq)
    raw = c.st.get(decl_key(W))
    assert raw is not None
    assert _DECL.decode(raw).rules == []


BAD_DECLARATIONS: Final = {
    "other world id": crew_decl(world=W2),
    "unknown entity type": crew_decl(
        entities=[EntitySeed(id="planet:vulcan"), EntitySeed(id=PROJECT)], edges=[]
    ),
    "edge to a missing entity": crew_decl(
        edges=[
            EdgeSeed(
                id="e-x", type="collaborates_on", source="agent:kirk", target=PROJECT
            )
        ]
    ),
    "rule on an unknown type": crew_decl(
        rules=[Rule(id="r", on="planet.name", notify="collaborates_on")]
    ),
    "goal with an unknown name": crew_decl(
        rules=[msgspec.structs.replace(REPLAN, goal="{entity} by {owner}")]
    ),
    "goal with a positional field": crew_decl(
        rules=[msgspec.structs.replace(REPLAN, goal="{0} changed")]
    ),
    "goal with an unclosed brace": crew_decl(
        rules=[msgspec.structs.replace(REPLAN, goal="{entity changed")]
    ),
    "goal with an attribute lookup": crew_decl(
        rules=[msgspec.structs.replace(REPLAN, goal="{entity.owner} changed")]
    ),
}


@pytest.mark.parametrize("decl", BAD_DECLARATIONS.values(), ids=BAD_DECLARATIONS.keys())
@pytest.mark.parametrize("first", [True, False], ids=["first", "redeclare"])
def test_invalid_declarations_change_nothing_but_the_conflict_log(
    decl: WorldDecl, first: bool
) -> None:
    c = Crew() if first else declared()
    before = dict(c.st.data)
    out = c.declare(decl)
    assert rejected(c, out, "henry").code == "invalid"
    assert_only_bookkeeping(before, c, "henry")


# --- authority --------------------------------------------------------------------


def test_set_field_without_a_grant_is_unauthorized() -> None:
    c = declared()
    for agent, ref, field in (
        ("zora", PROJECT, "phase"),  # no grant at all
        ("spock", COMPANY, "name"),  # works on the project, may not write the company
        ("ada", "agent:spock", "role"),  # grants on project/company/user only
    ):
        before = dict(c.st.data)
        out = c.set(agent, ref, field, "x")
        rejection = rejected(c, out, agent)
        assert rejection.code == "unauthorized"
        assert rejection.op_id == f"op-{W}-{c.seq}"
        assert_only_bookkeeping(before, c, agent)
    assert c.value(PROJECT, "phase") == "design"
    # The grant holder may.
    c.set("ada", PROJECT, "phase", "build")
    assert c.value(PROJECT, "phase") == "build"


def test_a_forged_author_is_unauthorized() -> None:
    c = declared()
    before = dict(c.st.data)
    # The body says ada (who holds the grant); the subject says zora sent it.
    out = c.set("ada", PROJECT, "phase", "build", sender="zora")
    rejection = rejected(c, out, "zora")
    assert rejection.code == "unauthorized"
    assert "zora" in rejection.reason
    assert_only_bookkeeping(before, c, "zora")
    assert c.value(PROJECT, "phase") == "design"


# --- per-field versions -----------------------------------------------------------


def test_different_fields_of_one_entity_are_versioned_independently() -> None:
    c = declared()
    seen = c.version(PROJECT, "phase")
    assert c.version(PROJECT, "budget") == seen
    # Both read the entity at the same moment, and write different fields.
    c.set("ada", PROJECT, "phase", "build", expect_version=seen)
    phase_seq = c.seq
    c.set("henry", PROJECT, "budget", 20, expect_version=seen)
    budget_seq = c.seq
    assert c.conflict(phase_seq) is None
    assert c.conflict(budget_seq) is None
    project = c.must(PROJECT)
    assert project.fields["phase"].value == "build"
    assert project.fields["phase"].version == phase_seq
    assert project.fields["phase"].author == "ada"
    assert project.fields["budget"].value == 20
    assert project.fields["budget"].version == budget_seq
    assert project.fields["budget"].author == "henry"
    assert project.version == budget_seq


def test_two_writers_on_one_field_with_the_same_expectation_one_wins() -> None:
    c = declared()
    seen = c.version(PROJECT, "phase")
    c.set("ada", PROJECT, "phase", "build", expect_version=seen)
    winner = c.seq
    before = dict(c.st.data)
    out = c.set("henry", PROJECT, "phase", "cancelled", expect_version=seen)
    rejection = rejected(c, out, "henry")
    assert rejection.code == "version_conflict"
    assert rejection.current_version == winner
    assert rejection.current_value == "build"
    assert_only_bookkeeping(before, c, "henry")
    assert (c.value(PROJECT, "phase"), c.version(PROJECT, "phase")) == ("build", winner)
    # Re-read and write again: applies.
    c.set("henry", PROJECT, "phase", "cancelled", expect_version=winner)
    assert (c.value(PROJECT, "phase"), c.version(PROJECT, "phase")) == (
        "cancelled",
        c.seq,
    )


def test_expect_version_zero_means_the_field_must_not_exist() -> None:
    c = declared()
    c.set("ada", PROJECT, "owner", "ada", expect_version=0)
    assert c.value(PROJECT, "owner") == "ada"
    out = c.set("henry", PROJECT, "owner", "henry", expect_version=0)
    rejection = rejected(c, out, "henry")
    assert rejection.code == "version_conflict"
    assert (rejection.current_version, rejection.current_value) == (c.seq - 1, "ada")


def test_a_no_op_write_changes_no_version_and_propagates_nothing() -> None:
    c = declared()
    c.set("ada", PROJECT, "phase", "build")
    before = dict(c.st.data)
    version = c.version(PROJECT, "phase")
    out = c.set("ada", PROJECT, "phase", "build", at=T0 + timedelta(days=2))
    assert out == []
    # Only bookkeeping changes: the last op, and the version the write kept.
    assert changed_keys(before, c.st.data) == {last_op_key(W), unchanged_key(W, c.seq)}
    assert c.st.get(unchanged_key(W, c.seq)) == str(version).encode()
    assert c.version(PROJECT, "phase") == version
    assert c.must(PROJECT).version == version
    out = c.upsert("ada", COMPANY, {"name": "Acme"}, at=T0 + timedelta(days=3))
    assert out == []
    assert c.must(COMPANY).version < version


def test_a_write_that_changes_the_value_type_is_a_change() -> None:
    c = declared()
    c.set("ada", PROJECT, "budget", 1)
    out = c.set("ada", PROJECT, "budget", True)
    value = c.value(PROJECT, "budget")
    assert value is True
    assert c.version(PROJECT, "budget") == c.seq
    assert len(feed(out, "entity")) == 1


def test_an_oversized_value_is_invalid() -> None:
    c = declared()
    at_limit = "x" * (MAX_VALUE_BYTES - 3)  # a str16 header takes 3 bytes
    assert len(msgspec.msgpack.encode(at_limit)) == MAX_VALUE_BYTES
    c.set("ada", PROJECT, "notes", at_limit)
    assert c.value(PROJECT, "notes") == at_limit
    sends: list[Callable[[Crew], list[Outgoing]]] = [
        lambda c: c.set("ada", PROJECT, "notes", at_limit + "x"),
        lambda c: c.upsert("ada", COMPANY, {"tags": ["y" * 1024] * 17}),
    ]
    for send in sends:
        before = dict(c.st.data)
        rejection = rejected(c, send(c), "ada")
        assert rejection.code == "invalid"
        assert str(MAX_VALUE_BYTES) in rejection.reason
        assert_only_bookkeeping(before, c, "ada")
    assert c.value(PROJECT, "notes") == at_limit
    assert "tags" not in c.must(COMPANY).fields


# --- propagation ------------------------------------------------------------------


def test_propagation_notifies_only_the_related_agents() -> None:
    c = declared()
    out = c.set("ada", PROJECT, "phase", "build")
    seq, op_id = c.seq, f"op-{W}-{c.seq}"
    got = delivered(out)
    assert set(got) == {"spock", "scotty"}  # not ada (the writer), not zora
    works = c.works()
    assert len(works) == 2
    for agent in ("spock", "scotty"):
        (note,) = of_type(got[agent], Notification)
        assert (note.entity, note.field, note.value) == (PROJECT, "phase", "build")
        assert (note.version, note.rule, note.cause, note.depth) == (
            seq,
            "replan",
            op_id,
            0,
        )
        (assigned,) = of_type(got[agent], WorkAssigned)
        assert len(got[agent]) == 2
        assert assigned.work_kind == "replan_request"
        assert assigned.goal == "Replan: project:soteria.phase is now build"
        assert (assigned.requested_by, assigned.rule, assigned.cause) == (
            "ada",
            "replan",
            op_id,
        )
        work = works[assigned.work]
        assert work.type == "work"
        assert {name: f.value for name, f in work.fields.items()}.items() >= {
            "assigned_to": agent,
            "kind": "replan_request",
            "status": "open",
            "requested_by": "ada",
        }.items()
        assert inbox_summary(out, agent).pending == 2
    assert {w.fields["assigned_to"].value for w in works.values()} == {
        "spock",
        "scotty",
    }
    changed = {m.entity.id for m in of_type(feed(out, "entity"), EntityChanged)}
    assert changed == {PROJECT, *works}


def test_an_edge_added_later_joins_the_propagation() -> None:
    c = declared()
    c.send(
        AddEdge(
            op_id="op-zora-joins",
            author="zora",
            at=T0,
            edge=Edge(
                id="e-zora", type="collaborates_on", source="agent:zora", target=PROJECT
            ),
        )
    )
    assert c.edge("e-zora") is not None
    assert set(delivered(c.set("ada", PROJECT, "phase", "build"))) == {
        "spock",
        "scotty",
        "zora",
    }
    c.send(RemoveEdge(op_id="op-zora-leaves", author="zora", at=T0, edge_id="e-zora"))
    assert c.edge("e-zora") is None
    later = T0 + timedelta(hours=2)
    assert set(delivered(c.set("ada", PROJECT, "phase", "ship", at=later))) == {
        "spock",
        "scotty",
    }


def test_the_dedupe_window_quiets_repeated_work_requests() -> None:
    c = declared()
    c.set("ada", PROJECT, "phase", "build", at=T0)
    assert len(c.works()) == 2
    out = c.set("ada", PROJECT, "phase", "review", at=T0 + timedelta(minutes=10))
    assert c.value(PROJECT, "phase") == "review"  # the write itself applies
    got = delivered(out)
    assert set(got) <= {"spock", "scotty"}
    assert all(of_type(m, WorkAssigned) == [] for m in got.values())
    assert len(c.works()) == 2
    out = c.set("ada", PROJECT, "phase", "ship", at=T0 + timedelta(hours=2))
    got = delivered(out)
    assert set(got) == {"spock", "scotty"}
    assert all(len(of_type(m, WorkAssigned)) == 1 for m in got.values())
    assert len(c.works()) == 4


def chain_decl(depth: int, chain: list[str]) -> WorldDecl:
    """Only spock works on the project. Each ``work:`` entity in ``chain`` is seeded
    and tracked by an agent (spock and scotty in turn), and rule ``chase`` turns every
    change of a tracked work item into a follow-up request for its tracker: each level
    of rule-made work sets off the next, as far as the chain reaches."""
    trackers = ("scotty", "spock")
    return crew_decl(
        entities=[
            *(EntitySeed(id=agent_ref(a)) for a in AGENTS),
            EntitySeed(id=PROJECT, fields={"phase": "design"}),
            *(EntitySeed(id=ref) for ref in chain),
        ],
        edges=[
            EdgeSeed(
                id="e-spock",
                type="collaborates_on",
                source="agent:spock",
                target=PROJECT,
            ),
            *(
                EdgeSeed(
                    id=f"t{i}",
                    type="tracks",
                    source=agent_ref(trackers[i % 2]),
                    target=ref,
                )
                for i, ref in enumerate(chain)
            ),
        ],
        rules=[
            REPLAN,
            Rule(
                id="chase", on="work.*", notify="tracks", work_kind="followup_request"
            ),
        ],
        depth=depth,
    )


def run_chain(depth: int, chain: list[str]) -> tuple[Crew, list[Outgoing]]:
    c = Crew()
    c.declare(chain_decl(depth, chain))
    return c, c.set("ada", PROJECT, "phase", "build")


def rule_work(out: list[Outgoing]) -> list[str]:
    return [
        m.work
        for messages in delivered(out).values()
        for m in of_type(messages, WorkAssigned)
    ]


@pytest.fixture(scope="module")
def chain() -> list[str]:
    """Discover the work ids rule-made work gets (they derive from the causing op),
    four levels deep, by seeding each level found and running again."""
    found: list[str] = []
    for level in range(4):
        _, out = run_chain(16, found)
        fresh = [ref for ref in rule_work(out) if ref not in found]
        assert len(fresh) == 1, (level, fresh)
        found.append(fresh[0])
    return found


@pytest.mark.parametrize("depth", [0, 1, 2, 3, 16])
def test_rule_chains_stop_at_the_declared_depth(depth: int, chain: list[str]) -> None:
    c, out = run_chain(depth, chain)
    made = rule_work(out)
    # Undamped, the chain runs its full length: the four seeded levels plus the work
    # the last of them sets off.
    expected = min(depth, len(chain) + 1)
    assert len(made) == len(set(made)) == expected
    assert set(chain[:expected]) <= set(made)  # the last level may be unseeded
    notes = [
        m
        for messages in delivered(out).values()
        for m in of_type(messages, Notification)
    ]
    # The phase change, and each level of work that may still set off rules.
    assert {n.entity for n in notes} == (
        {PROJECT, *chain[: expected - 1]} if expected else set()
    )
    assert all(n.depth < depth for n in notes)
    assert sorted({n.depth for n in notes}) == list(range(expected))
    assert len(notes) <= 1 + 16 * expected
    filled = [ref for ref, w in c.works().items() if "assigned_to" in w.fields]
    assert sorted(filled) == sorted(made)


def test_cyclic_rules_terminate() -> None:
    """Every field change of any entity notifies the agents it is linked to, and the
    agents track the work made for them: each change feeds the rules again."""
    everything = Rule(
        id="echo", on="*.*", notify="collaborates_on", work_kind="echo_request"
    )
    chase = Rule(id="chase", on="work.*", notify="tracks", work_kind="followup")
    c = Crew()
    c.declare(crew_decl(rules=[everything, chase, REPLAN], depth=3))
    out = c.set("ada", PROJECT, "phase", "build")
    got = delivered(out)
    assert set(got) == {"spock", "scotty"}
    # phase -> (echo, replan) x (spock, scotty); work items are linked to nobody.
    assert sum(len(of_type(m, WorkAssigned)) for m in got.values()) == 4
    assert len(c.works()) == 4


# --- subscriptions ----------------------------------------------------------------


def test_a_subscriber_is_notified_of_matching_changes() -> None:
    c = declared()
    out = c.set("ada", COMPANY, "name", "Acme Corp")
    got = delivered(out)
    assert set(got) == {"zora"}
    (note,) = got["zora"]
    assert isinstance(note, Notification)
    assert (note.entity, note.field, note.value, note.version) == (
        COMPANY,
        "name",
        "Acme Corp",
        c.seq,
    )
    assert note.rule == "subscription:zora"
    assert inbox_summary(out, "zora").pending == 1
    # A change outside company.* does not reach her.
    assert "zora" not in delivered(c.upsert("ada", "user:u1", {"name": "Uhura"}))


def test_a_subscriber_hears_of_a_change_back_to_an_earlier_value() -> None:
    """Subscriptions notify every matching change; whatever the dedupe window
    quiets, the subscriber's newest notice must not contradict the current value."""
    c = declared()
    values = ["Acme Corp", "Acme", "Acme Corp"]
    notices: list[Value] = []
    for minutes, value in enumerate(values):
        out = c.set("ada", COMPANY, "name", value, at=T0 + timedelta(minutes=minutes))
        notices += [
            m.value for m in of_type(delivered(out).get("zora", []), Notification)
        ]
    assert c.value(COMPANY, "name") == "Acme Corp"
    assert notices
    assert notices[-1] == c.value(COMPANY, "name")


# --- work requests ----------------------------------------------------------------


def test_anyone_may_file_work_requested_by_themselves() -> None:
    c = declared()
    due = T0 + timedelta(days=1)
    out = c.work(
        "spock", "review-1", assigned_to="scotty", requested_by="spock", due_at=due
    )
    got = delivered(out)
    assert set(got) == {"scotty"}
    (assigned,) = got["scotty"]
    assert isinstance(assigned, WorkAssigned)
    assert (assigned.work, assigned.work_kind, assigned.requested_by) == (
        "work:review-1",
        "review_request",
        "spock",
    )
    assert (assigned.priority, assigned.due_at, assigned.rule) == (2, due, "")
    work = c.must("work:review-1")
    assert work.version == c.seq
    assert {n: f.value for n, f in work.fields.items()} == {
        "kind": "review_request",
        "assigned_to": "scotty",
        "goal": "Review the Soteria plan.",
        "priority": 2,
        "due_at": due.isoformat(),
        "status": "open",
        "requested_by": "spock",
    }


def test_filing_work_in_someone_elses_name_is_unauthorized() -> None:
    c = declared()
    before = dict(c.st.data)
    out = c.work("spock", "review-1", assigned_to="scotty", requested_by="ada")
    assert rejected(c, out, "spock").code == "unauthorized"
    assert_only_bookkeeping(before, c, "spock")
    assert c.entity("work:review-1") is None


def test_the_assignee_may_update_status_and_a_third_agent_may_not() -> None:
    c = declared()
    c.work("spock", "review-1", assigned_to="scotty", requested_by="spock")
    filed = c.seq
    out = c.work(
        "scotty",
        "review-1",
        assigned_to="scotty",
        requested_by="spock",
        status="in_progress",
    )
    assert delivered(out) == {}  # same assignee: nothing new to announce
    work = c.must("work:review-1")
    assert (work.fields["status"].value, work.fields["status"].version) == (
        "in_progress",
        c.seq,
    )
    assert work.fields["assigned_to"].version == filed
    before = dict(c.st.data)
    out = c.work(
        "zora", "review-1", assigned_to="scotty", requested_by="spock", status="done"
    )
    assert rejected(c, out, "zora").code == "unauthorized"
    assert_only_bookkeeping(before, c, "zora")
    assert c.value("work:review-1", "status") == "in_progress"
    # The requester still owns it.
    c.work(
        "spock", "review-1", assigned_to="scotty", requested_by="spock", status="done"
    )
    assert c.value("work:review-1", "status") == "done"


def test_assigning_work_to_an_unknown_agent_is_unknown_entity() -> None:
    c = declared()
    before = dict(c.st.data)
    out = c.work("spock", "review-1", assigned_to="kirk", requested_by="spock")
    assert rejected(c, out, "spock").code == "unknown_entity"
    assert_only_bookkeeping(before, c, "spock")


# --- inbox acks -------------------------------------------------------------------


def spock_inbox(c: Crew) -> list[str]:
    out = c.set("ada", PROJECT, "phase", "build")
    ids = [str(getattr(m, "id", "")) for m in delivered(out)["spock"]]
    assert len(ids) == 2
    return ids


def test_acking_own_messages_lowers_the_pending_count() -> None:
    c = declared()
    first, second = spock_inbox(c)
    out = c.ack("spock", [first])
    assert inbox_summary(out, "spock").pending == 1
    assert delivered(out) == {}
    record = c.record("spock", first)
    assert record is not None
    assert record.acked
    out = c.ack("spock", [first, second])  # first again: counted once
    assert inbox_summary(out, "spock").pending == 0
    assert c.ack("spock", [first, second]) == []  # nothing left to ack


def test_acking_an_id_twice_in_one_op_counts_it_once() -> None:
    c = declared()
    first, _ = spock_inbox(c)
    out = c.ack("spock", [first, first])
    assert inbox_summary(out, "spock").pending == 1


def test_acking_an_unknown_id_rejects_the_whole_op() -> None:
    c = declared()
    first, second = spock_inbox(c)
    before = dict(c.st.data)
    out = c.ack("spock", [first, "note-does-not-exist", second])
    rejection = rejected(c, out, "spock")
    assert rejection.code == "unknown_entity"
    assert_only_bookkeeping(before, c, "spock")
    for message_id in (first, second):
        record = c.record("spock", message_id)
        assert record is not None
        assert not record.acked
    assert inbox_summary(out, "spock").pending == 3  # two waiting, plus the rejection


def test_an_agent_cannot_ack_another_agents_messages() -> None:
    c = declared()
    first, _ = spock_inbox(c)
    out = c.ack("scotty", [first])
    assert rejected(c, out, "scotty").code == "unknown_entity"
    record = c.record("spock", first)
    assert record is not None
    assert not record.acked


# --- beliefs pass through ---------------------------------------------------------


def test_add_belief_notes_the_belief_and_advances_the_last_applied_op() -> None:
    c = declared()
    before = dict(c.st.data)
    out = c.send(
        AddBelief(op_id="op-b", author="ada", at=T0, belief_id="b1", text="Risky.")
    )
    assert out == []
    # Links are checked against what the log created, not against posteriors.
    assert changed_keys(before, c.st.data) == {last_op_key(W), known_key(W, "b1")}
    assert c.st.get(last_op_key(W)) == str(c.seq).encode()


# --- determinism ------------------------------------------------------------------


def script(c: Crew) -> list[Outgoing]:
    """A bit of everything, rejections included."""
    out: list[Outgoing] = []
    out += c.set("ada", PROJECT, "phase", "build")  # before the declaration
    out += c.declare()
    out += c.set("ada", PROJECT, "phase", "build", at=T0 + timedelta(minutes=1))
    out += c.set("zora", PROJECT, "phase", "cancelled")
    out += c.set("ada", COMPANY, "name", "Acme Corp", expect_version=2)
    out += c.upsert("henry", "user:u1", {"name": "Uhura", "tags": ["comms"]})
    out += c.work("spock", "review-1", assigned_to="scotty", requested_by="spock")
    out += c.work(
        "scotty", "review-1", assigned_to="scotty", requested_by="spock", status="done"
    )
    out += c.ack("zora", ["nothing"])
    out += c.set("ada", PROJECT, "phase", "ship", at=T0 + timedelta(hours=3))
    return out


def test_the_same_ops_build_the_same_state() -> None:
    one, two = Crew(), Crew()
    out_one, out_two = script(one), script(two)
    assert out_one == out_two
    assert one.st.data == two.st.data
    assert state_hash(one.st, world=W) == state_hash(two.st, world=W)
    assert state_hash(one.st, world=W) != state_hash(MemoryState(), world=W)
    three = Crew()
    script(three)
    three.set("ada", PROJECT, "phase", "done")
    assert state_hash(three.st, world=W) != state_hash(one.st, world=W)


def test_another_worlds_ops_do_not_change_a_worlds_hash() -> None:
    alone = Crew()
    script(alone)
    shared = MemoryState()
    here = Crew(W, shared)
    there = Crew(W2, shared, first_seq=1000)
    there.declare(crew_decl(world=W2))
    script(here)
    there.set("ada", PROJECT, "phase", "build")
    there.set("zora", COMPANY, "name", "Other")
    assert any(k.split(b"/")[1:2] == [W2.encode()] for k in shared.data)
    assert state_hash(shared, world=W) == state_hash(alone.st, world=W)
    assert state_hash(shared, world=W2) != state_hash(alone.st, world=W2)
    assert state_hash(shared) != state_hash(alone.st)


def test_state_feed_msg_ids_are_unique_within_an_op() -> None:
    """Distinct change-feed messages need distinct Nats-Msg-Ids, or JetStream drops
    all but the first as duplicates. Entity types may be any declared name."""
    c = Crew()
    out = c.declare(
        crew_decl(
            entity_types=["project", "edge"],
            entities=[
                EntitySeed(id="agent:spock"),
                EntitySeed(id=PROJECT),
                EntitySeed(id="edge:e-spock", fields={"note": "an entity"}),
            ],
            edges=[
                EdgeSeed(
                    id="e-spock",
                    type="collaborates_on",
                    source="agent:spock",
                    target=PROJECT,
                )
            ],
            rules=[],
        )
    )
    assert len(out) == 1 + 3 + 1 + 1  # declared, 3 entities, 1 edge, op applied
    assert len({item.msg_id for item in out}) == len(out)

"""No single agent retracts its way through the shared world (issue 23): a belief is
retracted by its author (for an extracted one, the agent that observed it), the
operator, the world's admins and the agents of ``[trust] close``; a gap is resolved by
those and by every agent the declaration names. Anyone else gets the verdict
``unauthorized`` and nothing changes. Fusion decides; the materializer applies exactly
what fusion accepted, whatever the split into shards. Pure cores, no bus.

Before this change any agent closed any belief: spock retracted scotty's
measurement-backed claim, and the true answer of a question another agent had added.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worldline.actors.belief_model import charter
from worldline.actors.fusion import core as fusion
from worldline.actors.fusion import slots
from worldline.actors.materializer import core as materializer
from worldline.actors.registry import build
from worldline.actors.runtime.memory import MemoryState, state_hash
from worldline.actors.runtime.spec import Context
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import (
    AddBelief,
    AddEvidence,
    BeliefChanged,
    CloseBelief,
    DeclareWorld,
    OpsInbox,
    OpStatus,
    OpStatusReply,
    OpVerdict,
    PosteriorUpdate,
    Statement,
    encode,
)
from worldline.protocols.subjects import (
    MATERIALIZER_IN,
    MATERIALIZER_OPS_IN,
    author_of,
    ops,
    world_of,
)
from worldline.protocols.world import (
    OPERATOR,
    Authority,
    TrustRules,
    WorldDecl,
    WorldInfo,
    agents_named,
)
from worldline.sdk.declaration import parse_declaration
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Outgoing

W: Final = "w1"
AT: Final = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
How = Literal["retracted", "resolved"]

# henry rules the world, book may close any belief, ada, spock and scotty are crew
# (named: they report sources); mallory is named nowhere.
DECL: Final = WorldDecl(
    world=WorldInfo(id=W),
    authority=Authority(admins=["henry"]),
    sources={"lab": ["ada", "spock", "scotty"]},
    trust=TrustRules(close=["book"]),
)


def ctx(agent: str, seq: int) -> Context:
    return Context(world=W, author=agent, subject=ops(W, agent), seq=seq, now=AT)


def declare() -> DeclareWorld:
    return DeclareWorld(op_id="op-declare", author="henry", at=AT, declaration=DECL)


def add(
    belief_id: str,
    author: str,
    *,
    type: str = "claim",
    slot: str | None = None,
    text: str | None = None,
) -> AddBelief:
    return AddBelief(
        op_id=f"op-add-{belief_id}-{author}",
        author=author,
        at=AT,
        belief_id=belief_id,
        text=text or f"Statement {belief_id}.",
        type=type,  # type: ignore[arg-type]
        slot=slot,
    )


def item(belief_id: str, author: str, n: int = 0, **kw: Any) -> Evidence:
    fields: dict[str, Any] = {
        "direction": "supports",
        "kind": "measurement",
        "source": f"agent:{author}",
    }
    fields.update(kw)
    return Evidence(
        id=f"ev-{belief_id}-{author}-{n}",
        belief_id=belief_id,
        observed_at=AT,
        author=author,
        **fields,
    )


def measure(belief_id: str, author: str) -> AddEvidence:
    return AddEvidence(
        op_id=f"op-ev-{belief_id}-{author}",
        author=author,
        at=AT,
        evidence=item(belief_id, author),
    )


def extracted(belief_id: str, observer: str, n: int = 0) -> Statement:
    """What the extractor publishes for ``observer``'s observation: its op, the
    observer's evidence."""
    return Statement(
        op_id=f"op-st-{belief_id}-{observer}-{n}",
        author="extractor",
        at=AT,
        belief_id=belief_id,
        text=f"Statement {belief_id}.",
        type="claim",
        evidence=item(belief_id, observer, n, kind="inference", source="notes"),
    )


def close(
    belief_id: str, author: str, how: How = "retracted", n: int = 0
) -> CloseBelief:
    return CloseBelief(
        op_id=f"op-close-{belief_id}-{author}-{n}",
        author=author,
        at=AT,
        belief_id=belief_id,
        how=how,
        reason="said so",
    )


@dataclass
class World:
    """One fusion store fed op by op (sequence numbers in log order)."""

    state: MemoryState = field(default_factory=MemoryState)
    seq: int = 0
    last: dict[str, PosteriorUpdate] = field(default_factory=dict)
    verdicts: dict[str, OpVerdict] = field(default_factory=dict)

    def op(self, op: OpsInbox) -> list[Outgoing]:
        self.seq += 1
        out = self.state.apply(fusion.handle(self.state, op, ctx(op.author, self.seq)))
        for o in out:
            if isinstance(o.message, PosteriorUpdate):
                self.last[o.message.belief.id] = o.message
            elif isinstance(o.message, OpVerdict):
                self.verdicts[o.message.op_id] = o.message
        return out

    def run(self, *log: OpsInbox) -> World:
        for op in log:
            self.op(op)
        return self

    def status(self, belief_id: str) -> str:
        return self.last[belief_id].belief.status

    def refused(self, op: CloseBelief) -> OpVerdict:
        """``op`` applied: refused ``unauthorized``, with nothing written or sent but
        that verdict."""
        before = dict(self.state.data)
        out = self.op(op)
        assert [type(o.message) for o in out] == [OpVerdict]
        verdict = self.verdicts[op.op_id]
        assert (verdict.outcome, verdict.code) == ("rejected", "unauthorized")
        assert self.state.data == before  # nothing half-applied
        return verdict


def measured() -> World:
    """scotty's claim backed by his own measurement, in henry's declared world."""
    return World().run(declare(), add("b1", "scotty"), measure("b1", "scotty"))


# --- the attacks ----------------------------------------------------------------------


def test_spock_cannot_retract_scottys_measured_belief() -> None:
    world = measured()
    held = world.last["b1"]
    verdict = world.refused(close("b1", "spock"))
    assert "spock may not retract a claim scotty added" in verdict.reason
    assert "[trust] close" in verdict.reason
    assert world.last["b1"] == held
    world.op(close("b1", "scotty", n=1))  # its author may
    assert world.status("b1") == "retracted"


def test_spock_cannot_retract_the_true_answer_another_agent_added() -> None:
    world = World().run(
        declare(),
        add("truth", "ada", slot="who wrote it", text="Tolkien"),
        add("rival", "spock", slot="who wrote it", text="Lewis"),
        measure("truth", "ada"),
    )
    slot_key = slots.slot_key(W, "who wrote it", "truth")
    assert world.state.get(slot_key) is not None
    world.refused(close("truth", "spock"))
    assert world.state.get(slot_key) is not None  # still an answer, still weighing
    assert world.status("truth") == "active"
    world.op(close("rival", "spock"))  # its own answer it may withdraw
    assert world.status("rival") == "retracted"
    world.op(close("truth", "henry"))  # and an admin may retract any
    assert world.status("truth") == "retracted"
    assert world.state.get(slot_key) is None


@pytest.mark.parametrize(
    ("author", "allowed"),
    [
        ("scotty", True),  # its author
        ("henry", True),  # an admin
        (OPERATOR, True),  # the operator
        ("book", True),  # [trust] close
        ("spock", False),  # a crew member
        ("ada", False),  # another one
        ("mallory", False),  # a stranger
    ],
)
def test_who_may_retract_a_claim(author: str, allowed: bool) -> None:
    world = measured()
    op = close("b1", author)
    if allowed:
        world.op(op)
        assert world.status("b1") == "retracted"
        assert op.op_id not in world.verdicts  # applied: a posterior, no verdict
    else:
        world.refused(op)


def test_an_extracted_belief_is_the_observing_agents_to_retract() -> None:
    """The extractor's op creates it, but ada observed it: she may retract it; spock,
    whose later observation corroborated it, may not, nor may the extractor."""
    world = World().run(extracted("b1", "ada"), extracted("b1", "spock"))
    assert world.last["b1"].belief.author == "extractor"
    world.refused(close("b1", "spock"))
    world.refused(close("b1", "extractor"))
    world.op(close("b1", "ada"))
    assert world.status("b1") == "retracted"


@pytest.mark.parametrize(
    ("author", "declared", "allowed"),
    [
        ("scotty", True, True),  # its author
        ("spock", True, True),  # any agent the declaration names
        ("book", True, True),  # [trust] close
        ("henry", True, True),  # an admin
        ("mallory", True, False),  # named nowhere
        ("scotty", False, True),  # undeclared: its author
        (OPERATOR, False, True),  # and the operator
        ("spock", False, False),  # nobody else
    ],
)
def test_who_may_resolve_a_gap(author: str, declared: bool, allowed: bool) -> None:
    log: list[OpsInbox] = [declare()] if declared else []
    world = World().run(*log, add("g1", "scotty", type="gap"))
    op = close("g1", author, "resolved")
    if allowed:
        world.op(op)
        assert world.status("g1") == "resolved"
    else:
        verdict = world.refused(op)
        assert "resolve a gap" in verdict.reason


def test_a_goal_is_retracted_by_the_retract_rule_only() -> None:
    """A goal is retracted, not resolved; a crew member may not drop another's goal."""
    world = World().run(declare(), add("g1", "scotty", type="goal"))
    world.refused(close("g1", "spock"))
    world.op(close("g1", "book"))
    assert world.status("g1") == "retracted"


def test_in_an_undeclared_world_only_the_author_and_the_operator_retract() -> None:
    world = World().run(add("b1", "scotty"), add("b2", "scotty"))
    verdict = world.refused(close("b1", "spock"))
    assert "no declaration" in verdict.reason
    world.refused(close("b1", "henry"))  # admin of nothing yet
    world.op(close("b1", "scotty"))
    world.op(close("b2", OPERATOR))
    assert (world.status("b1"), world.status("b2")) == ("retracted", "retracted")


def test_an_unauthorized_close_of_a_closed_belief_is_still_refused() -> None:
    world = measured().run(close("b1", "scotty"))
    world.refused(close("b1", "spock"))
    again = close("b1", "scotty", n=1)
    world.op(again)
    assert world.verdicts[again.op_id].outcome == "unchanged"  # its author: a repeat


def test_an_unauthorized_close_is_answered_by_one_shard_only() -> None:
    op = close("b1", "spock")
    answers: list[OpVerdict] = []
    for shard in range(3):
        state = MemoryState()
        setups: list[OpsInbox] = [declare(), add("b1", "scotty")]
        for seq, setup in enumerate(setups, start=1):
            step = fusion.handle(state, setup, ctx(setup.author, seq), shard=(shard, 3))
            state.apply(step)
        step = fusion.handle(state, op, ctx("spock", 3), shard=(shard, 3))
        assert not step.writes
        answers += [o.message for o in step.out if isinstance(o.message, OpVerdict)]
    assert [(a.outcome, a.code) for a in answers] == [("rejected", "unauthorized")]


# --- the declaration ------------------------------------------------------------------


def test_trust_close_is_declared_in_toml_and_old_declarations_stay_valid() -> None:
    head = '[world]\nid = "w1"\n[authority]\nadmins = ["henry"]\n'
    old = parse_declaration(head + '[trust]\nsettle = ["spock"]\n')
    assert old.trust.close == []
    new = parse_declaration(head + '[trust]\nsettle = ["spock"]\nclose = ["book"]\n')
    assert new.trust.close == ["book"]
    assert "book" in agents_named(new)
    charter.check_declaration(new, W)
    # The bytes of a declaration without `close` are what they were: no default
    # field is encoded, so a log written before reads and hashes the same.
    assert b"close" not in encode(old)
    with pytest.raises(BadRequest, match="unknown key 'closers'"):
        parse_declaration(head + '[trust]\nclosers = ["book"]\n')
    reserved = msgspec.structs.replace(new, trust=TrustRules(close=["fusion"]))
    with pytest.raises(charter.Refused, match="reserved"):
        charter.check_declaration(reserved, W)


# --- fusion decides, the materializer follows (hypothesis) ---------------------------

AGENTS: Final = ("scotty", "spock", "ada", "henry", "book", "mallory", OPERATOR)
NAMED: Final = agents_named(DECL)
BELIEFS: Final = {  # id -> (type, slot)
    "c1": ("claim", "q"),
    "c2": ("claim", "q"),
    "c3": ("claim", None),
    "g1": ("gap", None),
    "g2": ("goal", None),
}


def allowed(declared: bool, author: str, owner: str, how: str, kind: str) -> bool:
    """The rule, written out again here (not read from the charter)."""
    if author in (owner, OPERATOR):
        return True
    if declared and author in ("henry", "book"):  # the admin, [trust] close
        return True
    question = how == "resolved" and kind in ("gap", "goal")
    return declared and question and author in NAMED


Drawn = tuple[str, str, str, str]  # (what, belief, agent, how)


@st.composite
def logs(draw: st.DrawFn) -> tuple[bool, list[Drawn]]:
    step = st.tuples(
        st.sampled_from(["add", "add", "observe", "close", "close", "close"]),
        st.sampled_from(sorted(BELIEFS)),
        st.sampled_from(AGENTS),
        st.sampled_from(["retracted", "resolved"]),
    )
    return draw(st.booleans()), draw(st.lists(step, min_size=1, max_size=14))


def build_log(declared: bool, drawn: list[Drawn]) -> list[OpsInbox]:
    log: list[OpsInbox] = [declare()] if declared else []
    for n, (what, belief_id, agent, how) in enumerate(drawn):
        kind, slot = BELIEFS[belief_id]
        match what:
            case "add":
                op: OpsInbox = add(belief_id, agent, type=kind, slot=slot)
                log.append(msgspec.structs.replace(op, op_id=f"op-{n}"))
            case "observe":
                # Statements carry no slot: they name answers only by their own ids
                # (a slot's answers are added, and routed to the slot's shard).
                observer = agent if agent != OPERATOR else "ada"
                log.append(extracted(belief_id if slot is None else "c3", observer, n))
            case _:
                log.append(close(belief_id, agent, how, n))  # type: ignore[arg-type]
    return log


def expected(
    declared: bool, log: list[OpsInbox]
) -> tuple[dict[str, str], dict[str, str]]:
    """The statuses the log leaves, and each close's outcome, by the rule."""
    owners: dict[str, tuple[str, str]] = {}  # id -> (owner, type)
    status: dict[str, str] = {}
    outcomes: dict[str, str] = {}
    for op in log:
        match op:
            case AddBelief() if op.belief_id not in owners:
                owners[op.belief_id] = (op.author, op.type)
                status[op.belief_id] = "active"
            case Statement() if op.belief_id not in owners:
                owners[op.belief_id] = (op.evidence.author, op.type)
                status[op.belief_id] = "active"
            case CloseBelief():
                if op.belief_id not in owners:
                    outcomes[op.op_id] = "unknown_belief"
                    continue
                owner, kind = owners[op.belief_id]
                if not allowed(declared, op.author, owner, op.how, kind):
                    outcomes[op.op_id] = "unauthorized"
                elif status[op.belief_id] != "active":
                    outcomes[op.op_id] = "unchanged"
                elif (op.how == "resolved") != (kind == "gap"):
                    outcomes[op.op_id] = "invalid"
                else:
                    outcomes[op.op_id] = "applied"
                    status[op.belief_id] = op.how
    return status, outcomes


def pipeline(log: list[OpsInbox], shards: int) -> tuple[MemoryState, dict[int, str]]:
    """Fusion (in ``shards`` shards) and the materializer fed the log as live: each
    op to every shard and to the materializer's op input, then what fusion
    published to its posterior input. Returns the materializer's store and each
    op's sequence by id."""
    fusion_in = [
        build("fusion", shard=f"{i}/{shards}").inputs[0] for i in range(shards)
    ]
    stores = [MemoryState() for _ in range(shards)]
    inputs = build("materializer").inputs
    mat_ops = next(i for i in inputs if i.consumer == MATERIALIZER_OPS_IN)
    mat_post = next(i for i in inputs if i.consumer == MATERIALIZER_IN)
    mat = MemoryState()
    seqs: dict[int, str] = {}
    n = 0
    for seq, op in enumerate(log, start=1):
        seqs[seq] = op.op_id
        payload = encode(op)
        c = ctx(op.author, seq)
        published = [
            out
            for inp, st_ in zip(fusion_in, stores, strict=True)
            for out in st_.feed(inp, payload, c)
        ]
        mat.feed(mat_ops, payload, c)
        for out in published:
            n += 1
            d = Context(world=world_of(out.subject), author=author_of(out.subject),
                        subject=out.subject, seq=n, now=AT)  # fmt: skip
            mat.feed(mat_post, encode(out.message), d)
    return mat, seqs


_CHANGED: Final = msgspec.msgpack.Decoder(BeliefChanged)


@settings(max_examples=80, deadline=None)
@given(logs())
def test_fusion_and_the_materializer_apply_exactly_the_closes_the_rule_allows(
    drawn: tuple[bool, list[Drawn]],
) -> None:
    declared, steps = drawn
    log = build_log(declared, steps)
    status, outcomes = expected(declared, log)
    hashes = set()
    for shards in (1, 3):
        mat, seqs = pipeline(log, shards)
        hashes.add(state_hash(mat, world=W))
        held = {
            belief_id: _CHANGED.decode(raw).belief.status
            for belief_id in BELIEFS
            if (raw := mat.get(materializer.belief_key(W, belief_id))) is not None
        }
        assert held == status
        for seq, op_id in seqs.items():
            if op_id not in outcomes:
                continue
            reply = materializer.serve(mat, OpStatus(seq=seq), W)
            assert isinstance(reply, OpStatusReply)
            assert reply.state == "applied"  # the materializer never decides a close
            verdict = reply.verdict
            outcome = outcomes[op_id]
            if outcome == "applied":
                assert verdict is None
            elif outcome == "unchanged":
                assert verdict is not None
                assert verdict.outcome == "unchanged"
            else:
                assert verdict is not None
                assert (verdict.outcome, verdict.code) == ("rejected", outcome)
    assert len(hashes) == 1  # any split into shards: the same canonical state

"""A world's declaration (what ``worldline world load FILE`` reads from TOML) and the
records the materializer keeps: entities with per-field versions, typed edges.

The declaration is data, not code: environment, intent, policy, actions, authority,
seed entities and edges, subscriptions, and typed propagation rules with dampening.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, Literal

import msgspec

from worldline.protocols.subjects import ACTOR_NAMES

__all__ = [
    "AGENT",
    "MAX_VALUE_BYTES",
    "OPERATOR",
    "RESERVED_AGENTS",
    "WORK",
    "Action",
    "Authority",
    "Constraint",
    "Dampening",
    "Edge",
    "EdgeSeed",
    "Entity",
    "EntityRef",
    "EntitySeed",
    "Environment",
    "FieldName",
    "FieldState",
    "Goal",
    "Grant",
    "Intent",
    "Policy",
    "Rule",
    "SourceName",
    "Subscription",
    "TrustGrant",
    "TrustRules",
    "Value",
    "WorldDecl",
    "WorldInfo",
    "agent_ref",
    "agents_named",
    "entity_type",
    "ref_name",
]

AGENT: Final = "agent"  # entity type of crew members: ``agent:<bus name>``
WORK: Final = "work"  # entity type of work requests: ``work:<id>``
MAX_VALUE_BYTES: Final = 16 * 1024  # one field value, encoded
# Who runs worldline rather than works in it: with credentials, only the operator may
# declare a world first. Its name and the actors' (the extractor writes ops as
# ``extractor``) are never agents, or an agent could speak as one of them.
OPERATOR: Final = "operator"
RESERVED_AGENTS: Final = frozenset((*ACTOR_NAMES, OPERATOR))

Token = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}\Z")]
FieldName = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,63}\Z")]
EntityRef = Annotated[
    str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.-]{1,128}\Z")
]
"""``type:name``, e.g. ``project:soteria-pilot`` or ``agent:spock``."""
FieldPattern = Annotated[
    str, msgspec.Meta(pattern=r"^([a-z][a-z0-9_]*|\*)\.([a-z][a-z0-9_]*|\*)\Z")
]
"""``entity-type.field`` where either side may be ``*``."""
Text = Annotated[str, msgspec.Meta(max_length=4096)]
Value = str | int | float | bool | list[str] | None
"""A field value: a scalar, a list of strings, or None (cleared)."""


def entity_type(ref: str) -> str:
    """``project`` for ``project:soteria``."""
    return ref.split(":", 1)[0]


def ref_name(ref: str) -> str:
    """``soteria`` for ``project:soteria``."""
    return ref.split(":", 1)[1]


def agent_ref(agent: str) -> str:
    """The entity an agent's bus name stands for: ``agent:<name>``."""
    return f"{AGENT}:{agent}"


class _Decl(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pass


class WorldInfo(_Decl, frozen=True):
    """Identity of the world."""

    id: Token
    kind: Text = ""
    description: Text = ""


class Environment(_Decl, frozen=True):
    """Where agents are: entity types, observation surfaces, source ranking."""

    entity_types: list[FieldName] = msgspec.field(default_factory=list)
    surfaces: list[Text] = msgspec.field(default_factory=list)
    source_ranking: list[Text] = msgspec.field(default_factory=list)


class Goal(_Decl, frozen=True):
    """A pursued outcome with its success criteria."""

    id: Token
    text: Text
    success: list[Text] = msgspec.field(default_factory=list)


class Constraint(_Decl, frozen=True):
    """A bound on how goals may be pursued."""

    id: Token
    text: Text


class Intent(_Decl, frozen=True):
    goals: list[Goal] = msgspec.field(default_factory=list)
    constraints: list[Constraint] = msgspec.field(default_factory=list)


class Policy(_Decl, frozen=True):
    invariants: list[Text] = msgspec.field(default_factory=list)
    source_hierarchy: list[Text] = msgspec.field(default_factory=list)
    conventions: list[Text] = msgspec.field(default_factory=list)
    anti_patterns: list[Text] = msgspec.field(default_factory=list)


class Action(_Decl, frozen=True):
    """An affordance of the world with its safety class."""

    id: Token
    text: Text
    safety: Literal["info", "mutates", "needs-approval"] = "info"
    constraints: list[Token] = msgspec.field(default_factory=list)  # ids that bound it


class Grant(_Decl, frozen=True):
    """These agents may write these ``entity-type.field`` patterns."""

    agents: list[Token]
    fields: list[FieldPattern]


class Authority(_Decl, frozen=True):
    """Who may write what. Admins may write anything and re-declare the world; every
    agent owns the work items assigned to it or requested by it."""

    admins: list[Token] = msgspec.field(default_factory=list)
    grants: list[Grant] = msgspec.field(default_factory=list)


SourceName = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
"""A source name as evidence names it (``sec-filing``), or a pattern of them
(``store:*``, :func:`fnmatch.fnmatchcase`), or ``agent:<name>``."""


class TrustGrant(_Decl, frozen=True):
    """These agents may set (raise, lower or lock) the trust of these names: source
    names or ``agent:<name>``, exact or as patterns (``store:*``, ``agent:*``)."""

    agents: list[Token]
    names: list[SourceName]


class TrustRules(_Decl, frozen=True):
    """Who may weigh whom (docs/crew.md, "Sources and trust"). Besides these, the
    operator and the world's admins may set any trust, settle any contradiction and
    close any belief, every agent may lower (never raise, never lock) its own
    ``agent:<self>``, and a belief's author may retract it."""

    grants: list[TrustGrant] = msgspec.field(default_factory=list)
    settle: list[Token] = msgspec.field(default_factory=list)  # may settle conflicts
    close: list[Token] = msgspec.field(default_factory=list)  # may close any belief


class EntitySeed(_Decl, frozen=True):
    """An entity present when the world is declared."""

    id: EntityRef
    fields: dict[FieldName, Value] = msgspec.field(default_factory=dict)


class EdgeSeed(_Decl, frozen=True, rename={"source": "from", "target": "to"}):
    """A typed edge present when the world is declared."""

    id: Token
    type: FieldName
    source: EntityRef
    target: EntityRef


class Subscription(_Decl, frozen=True):
    """An agent notified of every change matching one of ``on`` (``type.field``)."""

    agent: Token
    on: list[FieldPattern]


class Rule(_Decl, frozen=True):
    """When a field matching ``on`` changes, notify the agents related to the changed
    entity by an edge of type ``notify`` (selective, never broadcast), and, if
    ``work_kind`` is set, assign each of them a typed work request."""

    id: Token
    on: FieldPattern
    notify: FieldName  # edge type linking agent:x and the entity (either direction)
    work_kind: Text = ""
    goal: Text = "{entity}.{field} is now {value}"  # template for the work goal
    priority: Annotated[int, msgspec.Meta(ge=0, le=9)] = 3
    due_in_hours: Annotated[float, msgspec.Meta(ge=0, le=87_600)] | None = None


class Dampening(_Decl, frozen=True):
    """Limits that make propagation terminate and stay quiet."""

    depth: Annotated[int, msgspec.Meta(ge=0, le=16)] = 2  # rule-caused change chains
    # seconds per (rule, entity, agent); at most ten years
    dedupe_window: Annotated[float, msgspec.Meta(ge=0, le=315_360_000)] = 3600.0
    max_fanout: Annotated[int, msgspec.Meta(ge=1)] = 256  # agents per rule firing


class WorldDecl(_Decl, frozen=True):
    """Everything ``worldline world load`` declares."""

    world: WorldInfo
    environment: Environment = msgspec.field(default_factory=Environment)
    intent: Intent = msgspec.field(default_factory=Intent)
    policy: Policy = msgspec.field(default_factory=Policy)
    actions: list[Action] = msgspec.field(default_factory=list)
    authority: Authority = msgspec.field(default_factory=Authority)
    entities: list[EntitySeed] = msgspec.field(default_factory=list)
    edges: list[EdgeSeed] = msgspec.field(default_factory=list)
    subscriptions: list[Subscription] = msgspec.field(default_factory=list)
    rules: list[Rule] = msgspec.field(default_factory=list)
    dampening: Dampening = msgspec.field(default_factory=Dampening)
    # Source name (or pattern) -> the agents allowed to report it. Evidence naming a
    # source its reporter is not allowed to report counts as that agent's own voice
    # (``agent:<reporter>``), never as an independent one (docs/belief-math.md,
    # "Source identity").
    sources: dict[SourceName, list[Token]] = msgspec.field(default_factory=dict)
    trust: TrustRules = msgspec.field(default_factory=TrustRules)


def agents_named(decl: WorldDecl) -> set[str]:
    """Every agent ``decl`` names: admins, grantees, subscribers, ``agent:<name>``
    entities, the reporters of its sources and who it lets set trust, settle or
    close beliefs."""
    names = set(decl.authority.admins)
    for grant in decl.authority.grants:
        names.update(grant.agents)
    for reporters in decl.sources.values():
        names.update(reporters)
    for trust_grant in decl.trust.grants:
        names.update(trust_grant.agents)
    names.update(decl.trust.settle)
    names.update(decl.trust.close)
    names.update(sub.agent for sub in decl.subscriptions)
    prefix = f"{AGENT}:"
    names.update(
        seed.id.removeprefix(prefix)
        for seed in decl.entities
        if seed.id.startswith(prefix)
    )
    return names


# --- materialized records -------------------------------------------------------------


class FieldState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One field's value with its own version: the OPS sequence of its last write."""

    value: Value
    version: int
    author: str
    at: datetime


class Entity(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An entity of the world; each field is versioned on its own."""

    id: EntityRef
    type: FieldName
    fields: dict[str, FieldState] = msgspec.field(default_factory=dict)
    version: int = 0  # OPS sequence of the entity's last change


class Edge(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    rename={"source": "from", "target": "to"},
):
    """A typed relation ``from`` -> ``to``: agent:spock collaborates_on project:x."""

    id: Token
    type: FieldName
    source: EntityRef
    target: EntityRef
    version: int = 0
    author: str = ""

"""A world's declaration as every actor applies it: which declarations a world accepts,
whose voice a piece of evidence counts as, and who may set trust or settle a
contradiction. Pure (a declaration and names in, a verdict out), shared so that the
materializer and fusion, which each read every ``DeclareWorld`` of the log, accept
exactly the same declarations and apply them alike (no actor imports another).

- **Acceptance** (:func:`accept`): a world nobody has declared is declared first by
  the operator on a bus that authenticates its users, else by an admin the
  declaration names; a re-declaration needs an admin of the current one; and the
  declaration must be valid (:func:`check_declaration`). A refusal is
  :class:`Refused` (code ``unauthorized`` or ``invalid``).
- **Voices** (:class:`Charter.voice`): a source counts as itself only when the
  declaration's ``[sources]`` table lets the reporting agent report it; anything else
  (an undeclared name, a declared one reported by an agent not listed, or another
  agent's ``agent:<name>``, which no declaration lends) counts as the reporting agent,
  ``agent:<author>``. Twenty names invented by one agent are one
  voice (docs/belief-math.md, "Source identity").
- **Trust** (:func:`trust_refusal`): the operator and the world's admins may set any
  trust; a ``[[trust.grants]]`` entry lets its agents set the names it lists; every
  agent may lower its own ``agent:<self>`` (never raise it, never lock it).
- **Settling** (:func:`may_settle`): the operator, the admins, and the agents of
  ``[trust] settle``.
- **Closing** (:func:`close_refusal`): a belief is retracted by its author (who
  added it; for an extracted belief, the agent that observed it), the operator, the
  admins, and the agents of ``[trust] close``; a question (a gap) is resolved by
  those and by every agent the declaration names. Fusion decides each close by it
  (the materializer applies fusion's posterior or keeps its verdict, so both
  agree).
- **Changing a belief edge** (:func:`edge_refusal`): anyone may link a new edge;
  re-stating an existing one (a new strength or type, new ends, removing it or
  bringing it back) is for its author (who first linked its id), the operator, the
  admins and the agents of ``[trust] close``. Evidence about an edge stays open to
  all (it is weighed by its voice). The materializer decides each link by it; fusion
  records a statement only where the same rule, on the same first linker, allows it.
"""

from __future__ import annotations

import functools
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.protocols.world import (
    AGENT,
    MAX_VALUE_BYTES,
    OPERATOR,
    RESERVED_AGENTS,
    WORK,
    WorldDecl,
    agents_named,
    entity_type,
)

if TYPE_CHECKING:
    from worldline.protocols.world import Value

__all__ = [
    "QUESTIONS",
    "WILDCARDS",
    "Charter",
    "Refused",
    "accept",
    "charter_of",
    "check_declaration",
    "check_value_sizes",
    "close_refusal",
    "declared_types",
    "edge_refusal",
    "encode_value",
    "fill_goal",
    "is_admin",
    "may_settle",
    "trust_refusal",
]

WILDCARDS: Final = frozenset("*?[")  # a [sources] key or trust name with one: a pattern
_DECL = msgspec.msgpack.Decoder(WorldDecl)


class Refused(Exception):
    """A declaration (or an act) the world's declaration does not allow."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


# --- acceptance -----------------------------------------------------------------------


def fill_goal(template: str, *, entity: str, field: str, value: str, agent: str) -> str:
    """Fill a rule's goal template. Every argument is a string, both when the
    declaration is checked and when a rule fires, so a template that passed the
    check cannot fail later (``{value:s}`` on an int, say)."""
    return template.format(entity=entity, field=field, value=value, agent=agent)


def declared_types(decl: WorldDecl) -> set[str]:
    return {*decl.environment.entity_types, AGENT, WORK}


def encode_value(value: Value) -> bytes:
    return msgspec.msgpack.encode(value)


def check_value_sizes(ref: str, fields: dict[str, Value]) -> None:
    for name, value in fields.items():
        size = len(encode_value(value))
        if size > MAX_VALUE_BYTES:
            raise Refused(
                "invalid",
                f"{ref}.{name}: value is {size} bytes, over the {MAX_VALUE_BYTES}-byte "
                "limit; store large content as an artifact and reference it",
            )


def check_declaration(decl: WorldDecl, world: str) -> None:
    """Whether ``decl`` is a valid declaration of ``world``.

    Raises:
        Refused: ``invalid``, saying what to fix.
    """
    if decl.world.id != world:
        raise Refused(
            "invalid",
            f"declaration is for world {decl.world.id!r}, not {world!r}; "
            "load it with --world matching [world] id",
        )
    reserved = sorted(agents_named(decl) & RESERVED_AGENTS)
    if reserved:
        raise Refused(
            "invalid",
            f"agent name(s) {', '.join(reserved)} are reserved for worldline's "
            f"actors and operator ({', '.join(sorted(RESERVED_AGENTS))}); rename "
            "those agents in the declaration",
        )
    types = declared_types(decl)
    refs = {e.id for e in decl.entities}
    for seed in decl.entities:
        if entity_type(seed.id) not in types:
            raise Refused(
                "invalid",
                f"entity {seed.id}: unknown entity type {entity_type(seed.id)!r}; "
                "declare it in [environment] entity_types "
                f"({', '.join(sorted(types))})",
            )
        check_value_sizes(seed.id, seed.fields)
    for edge in decl.edges:
        for end in (edge.source, edge.target):
            if end not in refs:
                raise Refused(
                    "invalid", f"edge {edge.id}: {end} is not among [[entities]]"
                )
    for rule in decl.rules:
        etype = rule.on.split(".", 1)[0]
        if etype != "*" and etype not in types:
            raise Refused(
                "invalid", f"rule {rule.id}: unknown entity type {etype!r} in on"
            )
        try:
            fill_goal(rule.goal, entity="e", field="f", value="v", agent="a")
        except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
            raise Refused(
                "invalid",
                f"rule {rule.id}: goal template {rule.goal!r} is not valid ({exc!r}); "
                "use only {entity}, {field}, {value} and {agent}",
            ) from exc


def _check_first_declarer(
    decl: WorldDecl, world: str, author: str, *, secured: bool
) -> None:
    """Who may declare a world nobody has declared yet (no world squatting)."""
    if secured:
        if author != OPERATOR:
            raise Refused(
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
        raise Refused(
            "unauthorized",
            f"world {world!r} is not declared yet: its first declaration must come "
            f"from an admin it names (admins: {named}), not {author!r}; declare it "
            "as one of them (--agent ADMIN), or add yourself to [authority] admins",
        )


def accept(
    current: WorldDecl | None,
    decl: WorldDecl,
    world: str,
    author: str,
    *,
    secured: bool,
) -> None:
    """Whether ``author`` may declare ``world`` as ``decl`` when ``current`` is its
    declaration (None: not declared yet). ``secured``: the bus authenticates authors.

    Raises:
        Refused: ``unauthorized`` (not an admin, a squatter) or ``invalid``.
    """
    if current is not None and author not in current.authority.admins:
        raise Refused(
            "unauthorized",
            f"only the world's admins ({', '.join(current.authority.admins)}) may "
            "re-declare it",
        )
    if current is None:
        _check_first_declarer(decl, world, author, secured=secured)
    check_declaration(decl, world)


# --- voices ---------------------------------------------------------------------------


class Charter:
    """A declaration compiled for the questions asked per evidence item."""

    def __init__(self, decl: WorldDecl | None) -> None:
        self.decl = decl
        table = {} if decl is None else decl.sources
        self.exact = {name: frozenset(agents) for name, agents in table.items()}
        self.patterns = tuple(
            (name, agents)
            for name, agents in sorted(self.exact.items())
            if WILDCARDS & set(name)
        )

    def reporters(self, source: str) -> frozenset[str]:
        """The agents allowed to report ``source`` (exact entry, else every pattern
        entry that matches it)."""
        held = self.exact.get(source)
        if held is not None:
            return held
        found: set[str] = set()
        for pattern, agents in self.patterns:
            if fnmatchcase(source, pattern):
                found |= agents
        return frozenset(found)

    def voice(self, source: str, author: str) -> str:
        """Whose independent voice evidence from ``source`` reported by ``author``
        is: the source when the declaration lets ``author`` report it, else the
        author as an agent."""
        agent = f"{AGENT}:{author}"
        if source.startswith(f"{AGENT}:"):
            return agent  # an agent's voice is its own: no declaration lends it
        if author in self.reporters(source):
            return source
        return agent


@functools.lru_cache(maxsize=64)
def charter_of(raw: bytes | None) -> Charter:
    """The charter of a stored declaration (msgpack ``WorldDecl``; None: none),
    cached by its exact bytes (a declaration is read for every evidence item)."""
    return Charter(None if raw is None else _DECL.decode(raw))


# --- trust and settling ---------------------------------------------------------------


def is_admin(decl: WorldDecl | None, author: str) -> bool:
    """Whether ``author`` rules the world: the operator, or an admin of ``decl``
    (who may re-declare it, and with it every rule here)."""
    return author == OPERATOR or (decl is not None and author in decl.authority.admins)


def _granted(decl: WorldDecl | None, author: str, name: str) -> bool:
    if decl is None:
        return False
    return any(
        author in grant.agents
        and any(
            name == pattern or (WILDCARDS & set(pattern) and fnmatchcase(name, pattern))
            for pattern in grant.names
        )
        for grant in decl.trust.grants
    )


def trust_refusal(
    decl: WorldDecl | None,
    author: str,
    name: str,
    trust: float,
    *,
    lock: bool,
    current: float,
) -> str | None:
    """Why ``author`` may not set ``name``'s trust to ``trust`` (``lock``: and lock
    it) when it is ``current`` now; None when it may."""
    if is_admin(decl, author):
        return None
    # One's own voice before any grant: a grant naming ``agent:*`` (or the agent
    # itself) must not let it raise or lock its own trust.
    own = name == f"{AGENT}:{author}"
    if own and not lock and trust <= current:
        return None
    if not own and _granted(decl, author, name):
        return None
    if own:
        what = "lock" if lock else f"raise ({current:g} -> {trust:g})"
        return (
            f"{author} may not {what} its own trust ({name}), only lower it; the "
            f"{OPERATOR}, the world's admins or a [[trust.grants]] entry may"
        )
    return (
        f"{author} may not set the trust of {name!r}: only the {OPERATOR}, the "
        "world's admins, agents a [[trust.grants]] entry of the declaration names "
        f"for it, and {name.removeprefix(AGENT + ':')} lowering itself may"
        if name.startswith(AGENT + ":")
        else f"{author} may not set the trust of {name!r}: only the {OPERATOR}, the "
        "world's admins and agents a [[trust.grants]] entry of the declaration "
        "names for it may"
    )


def may_settle(decl: WorldDecl | None, author: str) -> bool:
    """Whether ``author`` may settle the world's contradictions."""
    return is_admin(decl, author) or (decl is not None and author in decl.trust.settle)


# --- closing beliefs ------------------------------------------------------------------

QUESTIONS: Final = frozenset({"gap", "goal"})
"""Belief types that are questions a crew answers, not claims: resolving one records
an answer (fusion accepts ``resolved`` for a gap only; a goal, like a claim, is
retracted)."""


def _rules_over(decl: WorldDecl | None, author: str, owner: str) -> bool:
    """Whether ``author`` may retract what ``owner`` added: ``owner`` itself, the
    operator, the world's admins and the agents of ``[trust] close``."""
    return (
        author == owner
        or is_admin(decl, author)
        or (decl is not None and author in decl.trust.close)
    )


def close_refusal(
    decl: WorldDecl | None,
    author: str,
    owner: str,
    *,
    how: str,
    belief_type: str,
) -> str | None:
    """Why ``author`` may not close (``how``: ``retracted`` or ``resolved``) a
    belief of ``belief_type`` that ``owner`` added (for an extracted belief, the
    agent that observed it); None when it may.

    The belief's author, the operator, the world's admins and the agents of
    ``[trust] close`` may close it. Resolving a question (:data:`QUESTIONS`) is
    open besides to every agent the declaration names (:func:`agents_named`): any
    crew member may record that a question is answered. Retracting (or resolving)
    anything else tombstones a claim, so it needs the first kind of authority.
    """
    if _rules_over(decl, author, owner):
        return None
    question = how == "resolved" and belief_type in QUESTIONS
    if question and decl is not None and author in agents_named(decl):
        return None
    verb = "resolve" if how == "resolved" else "retract"
    if decl is None:
        return (
            f"{author} may not {verb} a {belief_type} {owner} added: in a world with "
            f"no declaration only its author and the {OPERATOR} may (a declaration "
            "names admins, and [trust] close agents, who may too)"
        )
    who = f"its author ({owner}), the {OPERATOR}, the world's admins"
    refusal = f"{author} may not {verb} a {belief_type} {owner} added: only {who}"
    if question:
        return f"{refusal}, the agents of [trust] close and every agent it names may"
    return f"{refusal} and the agents of the declaration's [trust] close may"


# --- changing belief edges ------------------------------------------------------------


def edge_refusal(
    decl: WorldDecl | None, author: str, owner: str, *, edge_id: str
) -> str | None:
    """Why ``author`` may not re-state (re-weigh, re-type, re-aim, remove or restore)
    the belief edge ``edge_id`` that ``owner`` linked first; None when it may.

    The same authority as retracting a claim (:func:`close_refusal`): the edge's
    author, the operator, the world's admins and the agents of ``[trust] close``.
    Linking a new edge needs none, and evidence about an edge is open to every agent
    (weighed by its voice), so this is asked only of a ``LinkBeliefs`` naming an
    edge id already linked.
    """
    if _rules_over(decl, author, owner):
        return None
    what = (
        f"{author} may not change or remove belief edge {edge_id}, which {owner} linked"
    )
    instead = (
        "; link a new edge (another id) to state your own view, or weigh in on this "
        "one with evidence (`worldline evidence --edge`)"
    )
    if decl is None:
        return (
            f"{what}: in a world with no declaration only its author and the "
            f"{OPERATOR} may (a declaration names admins, and [trust] close agents, "
            f"who may too){instead}"
        )
    return (
        f"{what}: only its author, the {OPERATOR}, the world's admins and the agents "
        f"of the declaration's [trust] close may{instead}"
    )

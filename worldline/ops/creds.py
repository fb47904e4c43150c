"""NATS accounts and users from world declarations: ``worldline creds``.

Two kinds of NATS account keep agents and actors apart at the bus:

* ``WORLDLINE``, the actors' account: JetStream (every stream and bucket), the five
  actors and the operator. Each actor is a user with only what it does on the bus
  (:func:`actor_permissions`); the operator keeps broad rights.
* ``AGENT_<name>``, one per agent a declaration names (admins, grants,
  subscriptions, ``agent:<name>`` entities): no JetStream of its own, and nothing of
  the actors' account but the services it imports (:func:`agent_imports`): its own
  ``wl.<world>.ops|obs.<agent>`` (JetStream publishes: the PubAck comes back to it),
  every RPC verb of its worlds (``share: true``: the actor receives the
  ``Nats-Request-Info`` header the server writes, naming the account and user), its
  own presence key, and its own JetStream subjects (inbox durable info, fetch and
  ack; its view and its worlds' presence by direct get), mapped under
  ``$JS.worldline.API`` (:data:`~worldline.actors.runtime.auth.AGENT_JS_API`).

A message an agent publishes can only reach the actors' account through one of its
imports, and whatever answers it (a PubAck, an RPC reply) is delivered back in the
agent's own account, on the reply subject it named there: a reply subject naming a
lease key, another agent's inbox, ops, state, derived records or presence lands in
the agent's own account, where nothing reads it. The agent's user keeps an allow
list equal to its imports (so a forbidden publish is the server's permissions
violation, which the SDK names, instead of vanishing) and may subscribe only under
``_INBOX.<public key>``. Agents create no consumer (not even a push consumer aimed
at an actor's subject): the materializer opens an agent's inbox durable before its
first message, and ``watch`` polls the view by direct get.

Each actor's rights: declare (info, create, update) worldline's streams and buckets,
run the durables of its input streams, publish its own outputs (only fusion writes
``derived``, only the materializer ``state`` and ``inbox`` and opens inbox durables,
only the projector views, only the extractor ops as ``extractor``) and dead letters,
heartbeat, serve its RPC verbs and answer on ``_INBOX.`` and import reply (``_R_.``)
subjects. No actor may purge or delete a stream or its messages, fetch from or delete
an agent's inbox durable, or write an agent's ops. ``actors/all.creds`` is the union
of the five, for ``worldline up`` (one process). The ``operator`` (``export``,
``replay``, ``status``, declaring worlds first) keeps broad rights on ``wl.>``,
``$JS.>``, ``$KV.>`` and ``_INBOX.>``.

The permission sets, imports and the config text are pure functions;
:func:`write_credentials` is the only part that touches files (never the bus). Keys
are kept across runs unless ``rotate`` is set, so re-running after a declaration
change never locks anyone out.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, get_args

import nkeys

from worldline.actors.extractor.core import AUTHOR as EXTRACTOR_AUTHOR
from worldline.actors.registry import ACTORS
from worldline.actors.runtime.auth import (
    AGENT_JS_API,
    CredentialsError,
    load_credentials,
    public_key_of,
    reply_prefix,
)
from worldline.ops.nats_config import (
    ACTORS_ACCOUNT,
    ALL_ACTORS,
    Export,
    Import,
    Permissions,
    Role,
    User,
    credentials_text,
    server_config,
)
from worldline.protocols.subjects import (
    ACTOR_NAMES,
    BUCKETS,
    IMPORTED_REPLY_ROOT,
    INBOX,
    LEASES,
    OPS,
    PREFIX,
    PRESENCE,
    REPLY_ROOT,
    STATUS,
    STREAMS,
    VIEWS,
    RpcVerb,
    bucket_key,
    bucket_put,
    bucket_stream,
    check_name,
    derived,
    dlq,
    every_bucket_key,
    every_rpc,
    inbox,
    inbox_in,
    obs,
    ops,
    rpc,
    state,
)
from worldline.protocols.world import OPERATOR, RESERVED_AGENTS, agents_named
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from pathlib import Path

    from worldline.protocols.world import WorldDecl

__all__ = [
    "ACTORS_ACCOUNT",
    "ALL_ACTORS",
    "OPERATOR",
    "CredsReport",
    "Export",
    "Import",
    "Permissions",
    "Role",
    "User",
    "actor_exports",
    "actor_permissions",
    "agent_imports",
    "agent_permissions",
    "all_actors_permissions",
    "credentials_text",
    "declared_agents",
    "new_seed",
    "operator_permissions",
    "plan_users",
    "server_config",
    "write_credentials",
]

AUTH_CONF: Final = "auth.conf"
_JS_API: Final = "$JS.API"
_JS_ALL: Final = "$JS.>"
_JS_ACK: Final = "$JS.ACK"
_ALL_REPLIES: Final = f"{REPLY_ROOT}.>"
# The reply subjects the server maps a request that crossed a service import to: an
# actor answers an agent there, and the server delivers it in the agent's account.
_IMPORTED_REPLIES: Final = f"{IMPORTED_REPLY_ROOT}.>"
_ANY: Final = "*"  # one subject token, any value
_FOLDERS: Final[dict[Role, str]] = {"agent": "agents", "actor": "actors"}


def declared_agents(decl: WorldDecl) -> list[str]:
    """Every agent the declaration names, sorted: admins, grantees, subscribers, and
    ``agent:<name>`` entities.

    Raises:
        BadRequest: a name is not usable as a subject token, or is reserved for an
            actor or the operator (an agent of that name could write as it).
    """
    names = agents_named(decl)
    reserved = sorted(names & RESERVED_AGENTS)
    if reserved:
        every = ", ".join(sorted(RESERVED_AGENTS))
        raise BadRequest(
            f"world {decl.world.id}: agent name(s) {', '.join(reserved)} are reserved "
            f"for worldline's actors and operator ({every}); rename those agents in "
            "the declaration"
        )
    try:
        return sorted(check_name("agent", name) for name in names)
    except ValueError as exc:
        raise BadRequest(f"world {decl.world.id}: {exc}") from exc


def _js(rest: str) -> Import:
    """A JetStream API subject of the actors' account, as an agent's account reaches
    it (under ``AGENT_JS_API``: its own account has no JetStream, and the server
    would answer ``$JS.API`` there itself)."""
    return Import(f"{_JS_API}.{rest}", to=f"{AGENT_JS_API}.{rest}")


def agent_imports(worlds: Iterable[str], agent: str) -> tuple[Import, ...]:
    """What ``agent``'s account imports from the actors' account: the least the SDK
    needs in ``worlds`` as ``agent``, and nothing of another agent's."""
    imports: list[Import] = []
    views, presence = bucket_stream(VIEWS), bucket_stream(PRESENCE)
    for world in sorted(set(worlds)):
        key = bucket_key(world, agent)
        everyone = bucket_put(PRESENCE, bucket_key(world, _ANY))
        inbox = inbox_in(world, agent)
        stream, durable = inbox.stream.name, inbox.durable
        imports += [
            # Its ops and observations: JetStream publishes, PubAck back to it.
            Import(ops(world, agent)),
            Import(obs(world, agent)),
            # Every verb, with the server's word on who asks.
            *(Import(rpc(world, verb), share=True) for verb in get_args(RpcVerb)),
            Import(bucket_put(PRESENCE, key)),
            # Its inbox durable (the materializer opens it): info, fetch, ack. Acks
            # go to the delivered message's own reply subject, $JS.ACK.<...>.
            _js(f"CONSUMER.INFO.{stream}.{durable}"),
            _js(f"CONSUMER.MSG.NEXT.{stream}.{durable}"),
            Import(f"{_JS_ACK}.{stream}.{durable}.>"),
            # Its own view by key (read and watched), presence of its world's agents.
            _js(f"DIRECT.GET.{views}.{bucket_put(VIEWS, key)}"),
            _js(f"DIRECT.GET.{presence}.{everyone}"),
        ]
    imports += [_js(f"STREAM.INFO.{views}"), _js(f"STREAM.INFO.{presence}")]
    return tuple(dict.fromkeys(imports))


def agent_permissions(
    worlds: Iterable[str], agent: str, public_key: str
) -> Permissions:
    """The agent user's own rights inside its account: publish exactly what its
    account imports (anything else is the server's permissions violation, named to
    the caller, rather than a publish that vanishes), receive replies only under its
    own ``_INBOX.<public key>``."""
    publish = [imp.local for imp in agent_imports(worlds, agent)]
    return Permissions(tuple(publish), (f"{reply_prefix(public_key)}.>",))


def actor_exports() -> tuple[Export, ...]:
    """What the actors' account offers agents' accounts (each imports its own part:
    :func:`agent_imports`)."""
    api = _JS_API
    views, presence = bucket_stream(VIEWS), bucket_stream(PRESENCE)
    return (
        Export(ops(_ANY, _ANY)),
        Export(obs(_ANY, _ANY)),
        Export(every_rpc(_ANY)),
        Export(bucket_put(PRESENCE, bucket_key(_ANY, _ANY))),
        Export(f"{api}.CONSUMER.INFO.{INBOX.name}.{_ANY}"),
        Export(f"{api}.CONSUMER.MSG.NEXT.{INBOX.name}.{_ANY}", stream=True),
        Export(f"{_JS_ACK}.{INBOX.name}.{_ANY}.>"),
        Export(f"{api}.DIRECT.GET.{views}.>"),
        Export(f"{api}.DIRECT.GET.{presence}.>"),
        Export(f"{api}.STREAM.INFO.{views}"),
        Export(f"{api}.STREAM.INFO.{presence}"),
    )


# What each actor's core publishes (its outputs; every actor also dead-letters and
# heartbeats). The rest of an actor's rights follow from its spec: the streams its
# inputs read, its RPC verbs, its lease.
_OUTPUTS: Final[dict[str, tuple[str, ...]]] = {
    "extractor": (
        ops(_ANY, EXTRACTOR_AUTHOR),
        # A duplicate PubAck in WL_OPS, which agents write too, is checked against
        # the stored message (runtime/preempt.py): its ops may have been pre-empted.
        f"{_JS_API}.STREAM.MSG.GET.{OPS.name}",
    ),
    "fusion": (derived(_ANY, _ANY, _ANY),),
    "materializer": (
        state(_ANY, _ANY),
        inbox(_ANY, _ANY),
        # It opens an agent's inbox durable (pull, filtered to that inbox) before
        # the first message: agents create no consumer.
        f"{_JS_API}.CONSUMER.INFO.{INBOX.name}.{_ANY}",
        f"{_JS_API}.CONSUMER.CREATE.{INBOX.name}.{_ANY}.{inbox(_ANY, _ANY)}",
    ),
    "projector": (bucket_put(VIEWS, ">"),),
    "simulator": (),
}


def actor_permissions(actor: str, public_key: str) -> Permissions:
    """What ``actor`` does on the bus, and nothing more.

    Every actor declares (info, create, update; never purge or delete) worldline's
    streams and buckets, dead-letters on ``wl.*.dlq.*``, heartbeats in
    ``wl-status``, and answers requests on ``_INBOX.`` reply subjects. Per its spec:
    create, read (and, for a durable it owns, re-create) the durables of its input
    streams, fetch and ack there; subscribe to its RPC verbs; keep its lease. Per
    its core: publish its outputs (``_OUTPUTS``). Replies come back under its own
    prefix ``_INBOX.<public key>`` only.

    Raises:
        KeyError: ``actor`` is not one of ``ACTOR_NAMES``.
    """
    spec = ACTORS[actor]()
    api = _JS_API
    managed = [s.name for s in STREAMS] + [bucket_stream(b) for b in BUCKETS]
    publish = [
        *(f"{api}.STREAM.{verb}.{name}" for name in managed
          for verb in ("INFO", "CREATE", "UPDATE")),
        *_OUTPUTS[actor],
        dlq(_ANY, _ANY),
        bucket_put(STATUS, ">"),
        _ALL_REPLIES,
        _IMPORTED_REPLIES,
    ]  # fmt: skip
    for inp in spec.inputs:
        stream = inp.consumer.stream.name
        publish += [
            f"{api}.CONSUMER.INFO.{stream}.{_ANY}",
            f"{api}.CONSUMER.CREATE.{stream}.{_ANY}.>",
            f"{api}.CONSUMER.MSG.NEXT.{stream}.{_ANY}",
            f"{_JS_ACK}.{stream}.>",
        ]
        if inp.skip_applied:  # a durable it owns is re-created at its store's place
            publish.append(f"{api}.CONSUMER.DELETE.{stream}.{_ANY}")
    if spec.lease:
        leases = bucket_put(LEASES, ">")
        publish += [leases, f"{api}.DIRECT.GET.{bucket_stream(LEASES)}.{leases}"]
    subscribe = [f"{reply_prefix(public_key)}.>", *(s.subject for s in spec.services)]
    return Permissions(_unique(publish), _unique(subscribe))


def all_actors_permissions(public_key: str) -> Permissions:
    """Every actor's rights in one user: the five actors in one process (``up``)."""
    each = [actor_permissions(actor, public_key) for actor in ACTOR_NAMES]
    return Permissions(
        _unique([s for p in each for s in p.publish]),
        _unique([s for p in each for s in p.subscribe]),
    )


def operator_permissions() -> Permissions:
    """Broad rights: the operator exports, replays, inspects and administers."""
    every = (f"{PREFIX}.>", _JS_ALL, every_bucket_key(), _ALL_REPLIES)
    return Permissions(every, every)


def _unique(subjects: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(subjects))


def new_seed() -> str:
    """A fresh NATS user nkey seed (``SU...``)."""
    seed: bytes = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)
    return seed.decode()


def plan_users(
    decls: Sequence[WorldDecl], seeds: Mapping[tuple[Role, str], str]
) -> list[User]:
    """Every user for these declarations, given each one's seed (keyed by role and
    name): the agents of all worlds (one user per agent across its worlds), then the
    actors, then the operator.

    Raises:
        BadRequest: two declarations name the same world, or a name is unusable.
    """
    worlds_of: dict[str, list[str]] = {}
    seen: set[str] = set()
    for decl in decls:
        world = decl.world.id
        if world in seen:
            raise BadRequest(f"world {world} is declared twice; pass each world once")
        seen.add(world)
        for agent in declared_agents(decl):
            worlds_of.setdefault(agent, []).append(world)
    users = []
    for agent, worlds in sorted(worlds_of.items()):
        public = public_key_of(seeds["agent", agent])
        permissions = agent_permissions(worlds, agent, public)
        imports = agent_imports(worlds, agent)
        users.append(User("agent", agent, public, permissions, tuple(worlds), imports))
    for actor in ACTOR_NAMES:
        public = public_key_of(seeds["actor", actor])
        users.append(User("actor", actor, public, actor_permissions(actor, public)))
    public = public_key_of(seeds["actor", ALL_ACTORS])
    users.append(User("actor", ALL_ACTORS, public, all_actors_permissions(public)))
    public = public_key_of(seeds["operator", OPERATOR])
    users.append(User("operator", OPERATOR, public, operator_permissions()))
    return users


def _path(out: Path, role: Role, name: str) -> Path:
    if role == "operator":
        return out / f"{OPERATOR}.creds"
    return out / _FOLDERS[role] / f"{name}.creds"


@dataclass
class CredsReport:
    """What :func:`write_credentials` did."""

    config: Path
    created: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    rotated: list[Path] = field(default_factory=list)
    stale: list[Path] = field(default_factory=list)  # files no declaration names now
    users: list[User] = field(default_factory=list)


def _write_secret(path: Path, text: str) -> None:
    """Write ``text`` readable by its owner only, replacing ``path`` atomically."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_credentials(
    decls: Sequence[WorldDecl],
    out: Path,
    *,
    rotate: bool = False,
    sources: Sequence[str] = (),
) -> CredsReport:
    """Write ``out/auth.conf`` and one credentials file per agent, actor and the
    operator (``agents/NAME.creds``, ``actors/NAME.creds``, ``operator.creds``).

    An existing credentials file keeps its key unless ``rotate``: re-running after a
    declaration change adds the new agents and leaves everyone else's key alone.

    Raises:
        BadRequest: an existing credentials file is unreadable or holds no key (fix
            or delete it, or pass rotate), or a declaration names an unusable agent.
    """
    wanted: list[tuple[Role, str]] = []
    for decl in decls:
        wanted += [("agent", name) for name in declared_agents(decl)]
    wanted += [("actor", name) for name in (*ACTOR_NAMES, ALL_ACTORS)]
    wanted.append(("operator", OPERATOR))
    report = CredsReport(config=out / AUTH_CONF)
    seeds: dict[tuple[Role, str], str] = {}
    for role, name in dict.fromkeys(wanted):
        path = _path(out, role, name)
        if not path.exists():
            seeds[role, name] = new_seed()
            report.created.append(path)
            continue
        if rotate:
            seeds[role, name] = new_seed()
            report.rotated.append(path)
            continue
        try:
            auth = load_credentials(path)
        except CredentialsError as exc:
            raise BadRequest(
                f"{exc}; delete it to issue a new key, or pass --rotate"
            ) from exc
        if auth is None or not auth.seed:
            raise BadRequest(f"{path} holds no nkey seed; delete it or pass --rotate")
        seeds[role, name] = auth.seed
        report.kept.append(path)
    report.users = plan_users(decls, seeds)
    for user in report.users:
        # A kept file is rewritten with its own key when its comments (the worlds it
        # names) changed.
        path = _path(out, user.role, user.name)
        text = credentials_text(user, seeds[user.role, user.name])
        if path in report.kept and path.read_text(encoding="utf-8") == text:
            continue
        _write_secret(path, text)
    known = {_path(out, role, name) for role, name in wanted}
    for folder in _FOLDERS.values():
        report.stale += sorted(
            p for p in (out / folder).glob("*.creds") if p not in known
        )
    config = server_config(report.users, actor_exports(), sources=sources)
    report.config.parent.mkdir(parents=True, exist_ok=True)
    tmp = report.config.with_name(f".{AUTH_CONF}.tmp")
    tmp.write_text(config, encoding="utf-8")
    os.replace(tmp, report.config)
    return report

"""Per-agent NATS users from world declarations: ``worldline creds``.

Each agent a declaration names (admins, grants, subscriptions, ``agent:<name>``
entities) gets its own NATS nkey user whose permissions follow exactly how the SDK
talks to the bus, and no further:

* publish its own ops and observations (``wl.<world>.ops|obs.<agent>``), ask every
  RPC verb of its worlds, put its own presence key;
* bind, create (filtered to its own inbox subject only), fetch and ack its own inbox
  durable; read its own view key (direct get) and watch it; read presence;
* receive replies only under its own prefix ``_INBOX.<public key>`` (so it cannot
  overhear another agent's inbox deliveries or view reads), and fusion's dead letters
  of its worlds (``add``/``evidence`` wait on them).

Everything else is denied: another agent's ops, obs, inbox or view; the
``state``/``derived``/``inbox`` channels; stream and consumer admin.

Each actor gets its own user with what it does on the bus and no more
(:func:`actor_permissions`): declare (info, create, update) worldline's streams and
buckets, run the durables of its input streams, publish its own outputs (only fusion
writes ``derived``, only the materializer ``state`` and ``inbox``, only the projector
views, only the extractor ops as ``extractor``) and dead letters, heartbeat, serve its
RPC verbs and answer on ``_INBOX.`` reply subjects. No actor may purge or delete a
stream or its messages, touch an agent's inbox durable, or write an agent's ops: an
actor tricked into publishing somewhere (a confused deputy) cannot do that harm.
``actors/all.creds`` is the union of the five, for ``worldline up`` (one process).
The ``operator`` (``export``, ``replay``, ``status``, declaring worlds first) keeps
broad rights on ``wl.>``, ``$JS.>``, ``$KV.>`` and ``_INBOX.>``.

The permission sets and the config text are pure functions; :func:`write_credentials`
is the only part that touches files (never the bus). Keys are kept across runs unless
``rotate`` is set, so re-running after a declaration change never locks anyone out.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, get_args

import nkeys

from worldline.actors.extractor.core import AUTHOR as EXTRACTOR_AUTHOR
from worldline.actors.registry import ACTORS
from worldline.actors.runtime.auth import (
    CredentialsError,
    load_credentials,
    public_key_of,
    reply_prefix,
)
from worldline.protocols.subjects import (
    ACTOR_NAMES,
    BUCKETS,
    LEASES,
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
    "ALL_ACTORS",
    "OPERATOR",
    "CredsReport",
    "Permissions",
    "Role",
    "User",
    "actor_permissions",
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

Role = Literal["agent", "actor", "operator"]
# The actor user with every actor's rights: the five actors in one process (`up`).
ALL_ACTORS: Final = "all"
AUTH_CONF: Final = "auth.conf"
_JS_API: Final = "$JS.API"
_JS_ALL: Final = "$JS.>"
_JS_ACK: Final = "$JS.ACK"
_ALL_REPLIES: Final = f"{REPLY_ROOT}.>"
_ANY: Final = "*"  # one subject token, any value
_FOLDERS: Final[dict[Role, str]] = {"agent": "agents", "actor": "actors"}


@dataclass(frozen=True, slots=True)
class Permissions:
    """What one NATS user may publish and subscribe to (everything else is denied)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class User:
    """One NATS user: who it is for, its public key and its permissions."""

    role: Role
    name: str
    public_key: str
    permissions: Permissions
    worlds: tuple[str, ...] = ()  # agents only: the worlds it is declared in


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


def agent_permissions(
    worlds: Iterable[str], agent: str, public_key: str
) -> Permissions:
    """The least an agent needs to use the SDK in ``worlds`` as ``agent``."""
    publish: list[str] = []
    subscribe = [f"{reply_prefix(public_key)}.>"]
    views, presence = bucket_stream(VIEWS), bucket_stream(PRESENCE)
    for world in sorted(set(worlds)):
        key = bucket_key(world, agent)
        everyone = bucket_put(PRESENCE, bucket_key(world, "*"))
        inbox = inbox_in(world, agent)
        stream, durable = inbox.stream.name, inbox.durable
        consumers = f"{_JS_API}.CONSUMER"
        publish += [
            ops(world, agent),
            obs(world, agent),
            *(rpc(world, verb) for verb in get_args(RpcVerb)),
            bucket_put(PRESENCE, key),
            # Its inbox durable: info, create (the server checks that the filter in
            # the subject is the one in the request), fetch, ack.
            f"{consumers}.INFO.{stream}.{durable}",
            f"{consumers}.CREATE.{stream}.{durable}.{inbox.filter_subject}",
            f"{consumers}.MSG.NEXT.{stream}.{durable}",
            f"{_JS_ACK}.{stream}.{durable}.>",
            # Its own view: read by key, and watched through an ephemeral consumer
            # filtered to that key.
            f"{_JS_API}.DIRECT.GET.{views}.{bucket_put(VIEWS, key)}",
            f"{consumers}.CREATE.{views}.*.{bucket_put(VIEWS, key)}",
            # Presence is public within the world.
            f"{_JS_API}.DIRECT.GET.{presence}.{everyone}",
        ]
    publish += [
        f"{_JS_API}.STREAM.INFO.{views}",
        f"{_JS_API}.STREAM.INFO.{presence}",
        f"{_JS_API}.CONSUMER.MSG.NEXT.{views}.*",
    ]
    return Permissions(tuple(publish), tuple(subscribe))


# What each actor's core publishes (its outputs; every actor also dead-letters and
# heartbeats). The rest of an actor's rights follow from its spec: the streams its
# inputs read, its RPC verbs, its lease.
_OUTPUTS: Final[dict[str, tuple[str, ...]]] = {
    "extractor": (ops(_ANY, EXTRACTOR_AUTHOR),),
    "fusion": (derived(_ANY, _ANY, _ANY),),
    "materializer": (state(_ANY, _ANY), inbox(_ANY, _ANY)),
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
        users.append(User("agent", agent, public, permissions, tuple(worlds)))
    for actor in ACTOR_NAMES:
        public = public_key_of(seeds["actor", actor])
        users.append(User("actor", actor, public, actor_permissions(actor, public)))
    public = public_key_of(seeds["actor", ALL_ACTORS])
    users.append(User("actor", ALL_ACTORS, public, all_actors_permissions(public)))
    public = public_key_of(seeds["operator", OPERATOR])
    users.append(User("operator", OPERATOR, public, operator_permissions()))
    return users


def _list(subjects: Sequence[str], indent: str) -> str:
    items = ",\n".join(f"{indent}  {json.dumps(s)}" for s in subjects)
    return f"[\n{items}\n{indent}]"


def _label(user: User) -> str:
    if user.role == "agent":
        return f"agent {user.name} (worlds: {', '.join(user.worlds)})"
    if user.role == "actor" and user.name == ALL_ACTORS:
        return "every actor in one process (worldline up)"
    return f"{user.role} {user.name}" if user.role == "actor" else user.name


def server_config(users: Sequence[User], *, sources: Sequence[str] = ()) -> str:
    """nats-server config text: an ``authorization`` block with one nkey user each.

    Only public keys are written: the file holds no secret. Include it from the
    server config (``include "auth.conf"``) or pass it alone with ``-c``.
    """
    lines = [
        "# Generated by `worldline creds`"
        + (f" from {', '.join(sources)}" if sources else "")
        + ". Do not edit: re-run it.",
        '# Include it in the nats-server config (include "auth.conf") or run',
        "# nats-server -c auth.conf. Public keys only: the seeds are in the .creds",
        "# files.",
        "authorization {",
        "  users = [",
    ]
    for user in users:
        pad = "        "
        lines += [
            f"    # {_label(user)}",
            "    {",
            f"      nkey: {json.dumps(user.public_key)}",
            "      permissions: {",
            f"        publish: {{ allow: {_list(user.permissions.publish, pad)} }}",
            f"        subscribe: {{ allow: {_list(user.permissions.subscribe, pad)} }}",
            "      }",
            "    }",
        ]
    lines += ["  ]", "}", ""]
    return "\n".join(lines)


def credentials_text(user: User, seed: str) -> str:
    """A credentials file: comments, then the seed in the decorated form NATS tools
    read (``nats --nkey FILE`` too)."""
    return (
        f"# worldline credentials: {_label(user)}\n"
        f"# public key: {user.public_key}\n"
        "# Secret: keep it mode 0600, on the machine of whoever it names. Use it with\n"
        "# --creds FILE (env WORLDLINE_CREDS) or worldline.connect(..., creds=FILE).\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n"
        "------END USER NKEY SEED------\n"
    )


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
    config = server_config(report.users, sources=sources)
    report.config.parent.mkdir(parents=True, exist_ok=True)
    tmp = report.config.with_name(f".{AUTH_CONF}.tmp")
    tmp.write_text(config, encoding="utf-8")
    os.replace(tmp, report.config)
    return report

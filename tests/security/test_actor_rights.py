"""Each actor's credentials allow what it does on the bus and nothing that a
confused deputy could be turned against: no stream purge or delete, no agent's ops,
inbox durable or view, no channel of another actor. Pure: the permission sets,
matched the way nats-server matches subjects (``*`` one token, ``>`` the rest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from worldline.actors.registry import build
from worldline.actors.runtime.auth import public_key_of, reply_prefix
from worldline.ops.creds import (
    ALL_ACTORS,
    actor_permissions,
    all_actors_permissions,
    new_seed,
    write_credentials,
)
from worldline.protocols.subjects import (
    ACTOR_NAMES,
    DERIVED,
    INBOX,
    LEASES,
    OPS,
    STATUS,
    STREAMS,
    VIEWS,
    bucket_key,
    bucket_put,
    bucket_stream,
    derived,
    dlq,
    inbox,
    inbox_in,
    lease_key,
    obs,
    ops,
    rpc,
    state,
    status_key,
)

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from worldline.actors.runtime.spec import ActorSpec

JS_API = "$JS.API"
PUBLIC = public_key_of(new_seed())


def allowed(patterns: Iterable[str], subject: str) -> bool:
    """Whether nats-server's allow list ``patterns`` admits ``subject``."""
    tokens = subject.split(".")
    for pattern in patterns:
        parts = pattern.split(".")
        for n, part in enumerate(parts):
            if part == ">":
                if len(tokens) > n:
                    return True
                break
            if n >= len(tokens) or (part != "*" and part != tokens[n]):
                break
        else:
            if len(parts) == len(tokens):
                return True
    return False


def test_the_matcher_matches_like_nats() -> None:
    extractor = ops("*", "extractor")
    assert allowed([extractor], ops("w", "extractor"))
    assert not allowed([extractor], ops("w", "zora"))
    views = bucket_put(VIEWS, ">")
    assert allowed([views], bucket_put(VIEWS, bucket_key("w", "zora")))
    assert not allowed([views], views.removesuffix(".>"))
    assert not allowed(["a.*"], "a.b.c")


OPEN_ZORAS_INBOX = (
    f"{JS_API}.CONSUMER.CREATE.{INBOX.name}.{inbox_in('w', 'zora').durable}."
    f"{inbox('w', 'zora')}"
)
# What an agent's request could name as its reply (the outside attack's list).
DEPUTY_TARGETS = (
    f"{JS_API}.STREAM.PURGE.{OPS.name}",
    f"{JS_API}.STREAM.DELETE.{OPS.name}",
    f"{JS_API}.STREAM.MSG.DELETE.{OPS.name}",
    f"{JS_API}.CONSUMER.DELETE.{INBOX.name}.{inbox_in('w', 'zora').durable}",
    OPEN_ZORAS_INBOX,
    f"{JS_API}.CONSUMER.MSG.NEXT.{INBOX.name}.{inbox_in('w', 'zora').durable}",
    ops("w", "zora"),
    obs("w", "zora"),
)


@pytest.mark.parametrize("actor", [*ACTOR_NAMES, ALL_ACTORS])
def test_no_actor_may_destroy_the_record_or_touch_an_agents_things(
    actor: str,
) -> None:
    rights = (
        all_actors_permissions(PUBLIC)
        if actor == ALL_ACTORS
        else actor_permissions(actor, PUBLIC)
    )
    opens_inboxes = actor in ("materializer", ALL_ACTORS)
    for target in DEPUTY_TARGETS:
        if opens_inboxes and target == OPEN_ZORAS_INBOX:
            continue  # the materializer opens inbox durables (agents may not)
        assert not allowed(rights.publish, target), target
    # Opening one is creating it filtered to its inbox, nothing wider.
    unfiltered = (
        f"{JS_API}.CONSUMER.CREATE.{INBOX.name}.{inbox_in('w', 'zora').durable}"
    )
    assert not allowed(rights.publish, unfiltered)
    assert allowed(rights.publish, OPEN_ZORAS_INBOX) == opens_inboxes
    for stream in [s.name for s in STREAMS] + [bucket_stream(VIEWS)]:
        for verb in ("PURGE", "DELETE"):
            assert not allowed(rights.publish, f"{JS_API}.STREAM.{verb}.{stream}")
    # Replies: answered on anyone's _INBOX, received only under its own prefix.
    assert allowed(rights.publish, "_INBOX.UAGENT.x")
    assert [s for s in rights.subscribe if s.startswith("_INBOX")] == [
        f"{reply_prefix(PUBLIC)}.>"
    ]
    assert not allowed(rights.subscribe, "_INBOX.UAGENT.x")


# Who may write each channel: derived records, the change feed, inboxes, views,
# the extractor's ops, the lease.
CHANNELS = {
    derived("w", "posterior", "0"): {"fusion"},
    derived("w", "transition", "0"): {"fusion"},
    state("w", "field"): {"materializer"},
    state("w", "batch"): {"materializer"},
    inbox("w", "spock"): {"materializer"},
    bucket_put(VIEWS, bucket_key("w", "spock")): {"projector"},
    ops("w", "extractor"): {"extractor"},
    bucket_put(LEASES, lease_key("materializer", 1, 2)): {"materializer"},
}


@pytest.mark.parametrize("actor", ACTOR_NAMES)
def test_each_channel_is_written_by_its_actor_only(actor: str) -> None:
    rights = actor_permissions(actor, PUBLIC)
    for subject, writers in CHANNELS.items():
        assert allowed(rights.publish, subject) == (actor in writers), subject
    every = all_actors_permissions(PUBLIC)
    assert all(allowed(every.publish, s) for s in CHANNELS)


def _instances(actor: str) -> list[ActorSpec]:
    """The actor as deployed: default, replicas, shards and partitions."""
    match actor:
        case "fusion":
            return [build(actor), build(actor, shard="1/3")]
        case "materializer":
            return [build(actor), build(actor, replica="b", partition="1/2")]
        case "projector":
            return [build(actor), build(actor, replica="east")]
        case _:
            return [build(actor)]


@pytest.mark.parametrize("actor", ACTOR_NAMES)
def test_each_actor_may_do_what_its_runtime_does(actor: str) -> None:
    """Every call the shell makes for this actor's instances (actors/runtime:
    declare, bind and re-create its durables, fetch, ack, publish outputs, dead-letter,
    heartbeat, lease, serve) is allowed."""
    rights = actor_permissions(actor, PUBLIC)
    for spec in _instances(actor):
        wanted = [
            f"{JS_API}.STREAM.{verb}.{name}"
            for name in [s.name for s in STREAMS] + [bucket_stream(STATUS)]
            for verb in ("INFO", "CREATE", "UPDATE")
        ]
        wanted += [
            dlq("w", spec.instance),
            bucket_put(STATUS, status_key(spec.instance, "host.example", 42)),
            f"{reply_prefix(PUBLIC)}.abc",  # its own PubAcks come here
            "_INBOX.UAGENT.reply",  # answering an agent
        ]
        for inp in spec.inputs:
            c = inp.consumer
            wanted += [
                f"{JS_API}.CONSUMER.INFO.{c.stream.name}.{c.durable}",
                f"{JS_API}.CONSUMER.CREATE.{c.stream.name}.{c.durable}."
                f"{c.filter_subject}",
                f"{JS_API}.CONSUMER.MSG.NEXT.{c.stream.name}.{c.durable}",
                f"$JS.ACK.{c.stream.name}.{c.durable}.1.2.3.4.5",
            ]
            if inp.skip_applied:
                wanted.append(f"{JS_API}.CONSUMER.DELETE.{c.stream.name}.{c.durable}")
        if spec.lease:
            key = bucket_put(LEASES, spec.lease)
            wanted += [key, f"{JS_API}.DIRECT.GET.{bucket_stream(LEASES)}.{key}"]
        missing = [s for s in wanted if not allowed(rights.publish, s)]
        assert missing == [], spec.instance
        for service in spec.services:
            assert allowed(rights.subscribe, service.subject.replace("*", "w"))
        assert allowed(rights.subscribe, f"{reply_prefix(PUBLIC)}.abc")


def test_only_actors_that_consume_a_stream_touch_its_durables() -> None:
    fusion = actor_permissions("fusion", PUBLIC)
    assert not allowed(fusion.publish, f"{JS_API}.CONSUMER.DELETE.{DERIVED.name}.x")
    projector = actor_permissions("projector", PUBLIC)
    assert not allowed(projector.publish, f"{JS_API}.CONSUMER.DELETE.{OPS.name}.x")
    for actor in ACTOR_NAMES:
        serves = allowed(actor_permissions(actor, PUBLIC).subscribe, rpc("w", "get"))
        assert serves == (actor == "projector"), actor


def test_creds_writes_every_actor_and_the_all_actors_user(tmp_path: Path) -> None:
    report = write_credentials([], tmp_path)
    names = [u.name for u in report.users if u.role == "actor"]
    assert names == [*ACTOR_NAMES, ALL_ACTORS]
    assert (tmp_path / "actors" / f"{ALL_ACTORS}.creds").exists()
    config = report.config.read_text()
    assert "every actor in one process (worldline up)" in config

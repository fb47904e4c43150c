"""``worldline creds`` without a server: the permission sets, the files it writes, the
keys it keeps, and its errors."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from worldline.actors.runtime.auth import (
    AGENT_JS_API,
    load_credentials,
    public_key_of,
    reply_prefix,
)
from worldline.cli import main
from worldline.ops.creds import (
    actor_permissions,
    agent_permissions,
    declared_agents,
    new_seed,
    operator_permissions,
    write_credentials,
)
from worldline.protocols.subjects import (
    ACTOR_NAMES,
    INBOX,
    PREFIX,
    PRESENCE,
    VIEWS,
    bucket_key,
    bucket_put,
    bucket_stream,
    dlq,
    every_bucket_key,
    inbox,
    inbox_in,
    obs,
    ops,
    state,
)
from worldline.protocols.world import (
    Authority,
    Grant,
    Subscription,
    WorldDecl,
    WorldInfo,
)
from worldline.sdk.declaration import load_declaration
from worldline.sdk.errors import BadRequest

CREW_TOML = Path(__file__).resolve().parents[2] / "examples" / "crew.toml"
JS_API = "$JS.API"


def _decl(world: str, *agents: str) -> WorldDecl:
    return WorldDecl(
        world=WorldInfo(id=world),
        authority=Authority(
            admins=[agents[0]], grants=[Grant(agents=list(agents), fields=["x.*"])]
        ),
    )


def _public(path: Path) -> str:
    auth = load_credentials(path)
    assert auth is not None
    return auth.public_key


def test_declared_agents_are_every_name_the_declaration_gives() -> None:
    decl = load_declaration(CREW_TOML)
    assert declared_agents(decl) == [
        "ada",
        "book",
        "geordi",
        "henry",
        "scotty",
        "spock",
        "zora",
    ]
    only_subscribed = msgspec.structs.replace(
        _decl("w", "ada"), subscriptions=[Subscription(agent="kim", on=["x.y"])]
    )
    assert declared_agents(only_subscribed) == ["ada", "kim"]


def test_an_agent_may_publish_only_its_own_subjects() -> None:
    seed = new_seed()
    public = public_key_of(seed)
    rights = agent_permissions(["w1", "w2"], "ada", public)
    pub, sub = set(rights.publish), set(rights.subscribe)
    for world in ("w1", "w2"):
        assert {ops(world, "ada"), obs(world, "ada")} <= pub
        assert bucket_put(PRESENCE, bucket_key(world, "ada")) in pub
        mine = inbox_in(world, "ada")
        # Its JetStream subjects, as its own account reaches the actors' JetStream.
        assert f"{AGENT_JS_API}.CONSUMER.MSG.NEXT.{INBOX.name}.{mine.durable}" in pub
        own_view = bucket_put(VIEWS, bucket_key(world, "ada"))
        assert f"{AGENT_JS_API}.DIRECT.GET.{bucket_stream(VIEWS)}.{own_view}" in pub
        # Fusion answers an agent's mistakes through op_status; the dead letters
        # are the operator's (they hold other agents' payloads).
        assert not any(s.startswith(dlq(world, "")) for s in sub)
    # Not its inbox channel (only the materializer writes there), nor state.
    assert not {inbox("w1", "ada"), state("w1", "field")} & (pub | sub)
    everything = " ".join(pub | sub)
    # Nothing of another agent, no admin API, no wildcard over agents or worlds.
    for forbidden in (
        ops("w1", "bob"),
        obs("w1", "bob"),
        inbox_in("w1", "bob").durable,
        bucket_key("w1", "bob"),
        "w3",
        "STREAM.CREATE",
        "STREAM.DELETE",
        "STREAM.PURGE",
        "STREAM.MSG.GET",
        "CONSUMER.DELETE",
        "CONSUMER.LIST",
        "CONSUMER.CREATE",  # no consumer at all: a create could aim a push anywhere
        "_INBOX.>",
        f"{JS_API}.",  # the server would answer that in the agent's own account
    ):
        assert forbidden not in everything, forbidden
    assert not any(s.startswith(f"{PREFIX}.>") or s == ">" for s in pub | sub)
    # Replies come back only under its own prefix.
    assert [s for s in sub if s.startswith("_INBOX")] == [f"{reply_prefix(public)}.>"]


def test_only_the_operator_has_broad_rights() -> None:
    rights = operator_permissions()
    assert set(rights.publish) == set(rights.subscribe)
    assert {f"{PREFIX}.>", "$JS.>", every_bucket_key(), "_INBOX.>"} <= set(
        rights.publish
    )
    # Actors: least privilege (tests/security/test_actor_rights.py has the detail).
    public = public_key_of(new_seed())
    for actor in ACTOR_NAMES:
        assert not {f"{PREFIX}.>", "$JS.>", every_bucket_key()} & set(
            actor_permissions(actor, public).publish
        ), actor


def test_files_are_secret_keys_are_kept_and_rotated_only_on_request(
    tmp_path: Path,
) -> None:
    out = tmp_path / "creds"
    first = write_credentials([_decl("w", "ada", "bob")], out)
    ada = out / "agents" / "ada.creds"
    assert {p.name for p in first.created} >= {"ada.creds", "bob.creds"}
    assert (out / "actors" / "materializer.creds").exists()
    assert (out / "operator.creds").exists()
    for path in first.created:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    config = first.config.read_text()
    assert _public(ada) in config
    assert load_credentials(ada) is not None
    # Public keys only: no seed in the server config.
    seeds = {load_credentials(p).seed for p in first.created}  # type: ignore[union-attr]
    assert not any(seed in config for seed in seeds)
    assert len(first.users) == 2 + 5 + 1 + 1  # agents, actors, all actors, operator

    # A new agent: everyone else keeps their key; a dropped one is named stale.
    key = _public(ada)
    second = write_credentials([_decl("w", "ada", "cy")], out)
    assert _public(ada) == key
    assert [p.name for p in second.created] == ["cy.creds"]
    assert [p.name for p in second.stale] == ["bob.creds"]
    assert _public(out / "agents" / "bob.creds") not in second.config.read_text()

    third = write_credentials([_decl("w", "ada", "cy")], out, rotate=True)
    assert _public(ada) != key
    assert ada in third.rotated
    assert _public(ada) in third.config.read_text()


def test_an_agent_in_two_worlds_is_one_user(tmp_path: Path) -> None:
    report = write_credentials([_decl("w1", "ada"), _decl("w2", "ada")], tmp_path)
    (ada,) = [u for u in report.users if u.role == "agent"]
    assert ada.worlds == ("w1", "w2")
    assert ops("w2", "ada") in ada.permissions.publish
    with pytest.raises(BadRequest, match="declared twice"):
        write_credentials([_decl("w1", "ada"), _decl("w1", "bob")], tmp_path)


def test_a_damaged_credentials_file_is_not_overwritten(tmp_path: Path) -> None:
    write_credentials([_decl("w", "ada")], tmp_path)
    damaged = tmp_path / "agents" / "ada.creds"
    damaged.write_text("garbage\n")
    with pytest.raises(BadRequest, match="--rotate"):
        write_credentials([_decl("w", "ada")], tmp_path)
    assert damaged.read_text() == "garbage\n"
    write_credentials([_decl("w", "ada")], tmp_path, rotate=True)
    assert load_credentials(damaged) is not None


def test_cli_writes_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["creds", str(CREW_TOML), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "agents: ada, book, geordi, henry, scotty, spock, zora" in printed
    assert "14 new, 0 kept" in printed
    assert main(["creds", str(CREW_TOML), "--out", str(out)]) == 0
    assert "0 new, 14 kept" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("[world\nid = 'x'\n", "not valid TOML"),
        ("[world]\nid = 'x'\nbogus = 1\n", "unknown key 'bogus'"),
        ("[world]\nid = 'x'\n[authority]\nadmins = ['a.b']\n", "admins"),
    ],
)
def test_cli_rejects_a_bad_declaration_with_a_usage_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    message: str,
) -> None:
    source = tmp_path / "world.toml"
    if content is not None:
        source.write_text(content)
    with pytest.raises(SystemExit) as exited:
        main(["creds", str(source), "--out", str(tmp_path / "out")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("worldline: ")
    assert message in err
    assert str(source) in err
    assert not (tmp_path / "out").exists()


def test_cli_rejects_a_missing_credentials_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["get", "b-1", "--creds", str(tmp_path / "none.creds")])
    assert exited.value.code == 2
    assert "cannot read credentials" in capsys.readouterr().err


@pytest.mark.cli
def test_up_with_auth_and_verbs_with_their_creds(tmp_path: Path) -> None:
    """``up --server-config auth.conf --creds actors/all.creds``: the embedded server
    requires credentials; the operator declares the world first; a verb passes with
    its agent's file and is refused without."""
    worldline = str(Path(sys.executable).parent / "worldline")
    out = tmp_path / "creds"
    assert main(["creds", str(CREW_TOML), "--out", str(out)]) == 0
    up = subprocess.Popen(
        [
            worldline,
            "up",
            "--data",
            str(tmp_path / "data"),
            "--server-config",
            str(out / "auth.conf"),
            "--creds",
            str(out / "actors" / "all.creds"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert up.stdout is not None
        url = up.stdout.readline().split()[-1]
        assert url.startswith("nats://127.0.0.1:")
        assert up.stdout.readline() == "ready\n"
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}
        env |= {"WORLDLINE_NATS": url, "WORLDLINE_WORLD": "enterprise"}
        load = [worldline, "world", "load", str(CREW_TOML), "--agent", "operator"]
        declared = subprocess.run(
            [*load, "--creds", str(out / "operator.creds")],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
            check=False,
        )
        assert declared.returncode == 0, declared.stderr
        verb = [worldline, "inbox", "--agent", "spock", "--json"]
        allowed = subprocess.run(
            [*verb, "--creds", str(out / "agents" / "spock.creds")],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
            check=False,
        )
        assert allowed.returncode == 0, allowed.stderr
        refused = subprocess.run(
            verb, capture_output=True, text=True, timeout=30, env=env, check=False
        )
        assert refused.returncode == 4
        assert "refused an anonymous client" in refused.stderr
    finally:
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=15)
        assert up.stdout is not None
        up.stdout.close()
    assert code == 0


def test_up_on_a_secured_server_refuses_to_declare_a_world_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With credentials, up holds only the actors' rights and a world's first
    declaration must come from the operator: `--world-file` is refused before anything
    starts, naming the command that does it."""
    out = tmp_path / "creds"
    assert main(["creds", str(CREW_TOML), "--out", str(out)]) == 0
    # main() sets WORLDLINE_CREDS from --creds: restore it after the test.
    monkeypatch.setenv("WORLDLINE_CREDS", "")
    monkeypatch.delenv("WORLDLINE_CREDS")
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "up",
                "--data",
                str(tmp_path / "data"),
                "--server-config",
                str(out / "auth.conf"),
                "--creds",
                str(out / "actors" / "all.creds"),
                "--world-file",
                str(CREW_TOML),
            ]
        )
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--agent operator --creds operator.creds" in err
    assert "--world enterprise" in err
    assert not (tmp_path / "data" / "nats.url").exists()

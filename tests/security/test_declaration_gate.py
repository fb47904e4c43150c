"""Who may declare a world first (no world squatting), and reserved agent names.

Pure: the materializer's ops input, as its spec wires it, over a ``MemoryState``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec
import pytest

from worldline.actors.materializer.declaration import load_decl
from worldline.actors.materializer.service import spec as materializer
from worldline.actors.runtime.auth import CREDS_ENV
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.cli import main
from worldline.ops.creds import declared_agents
from worldline.protocols.messages import DeclareWorld, Rejection, encode
from worldline.protocols.subjects import ACTOR_NAMES, author_of, ops
from worldline.protocols.world import (
    OPERATOR,
    RESERVED_AGENTS,
    Authority,
    EntitySeed,
    Grant,
    Subscription,
    WorldDecl,
    WorldInfo,
    agent_ref,
)
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from pathlib import Path

W = "gate"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _decl(admins: list[str]) -> WorldDecl:
    grants = [Grant(agents=["ada"], fields=["x.*"])]
    return WorldDecl(
        world=WorldInfo(id=W), authority=Authority(admins=admins, grants=grants)
    )


class _Materializer:
    """The materializer's ops input over one in-memory state (one OPS seq per op)."""

    def __init__(self, *, secured: bool | None) -> None:
        self.input = materializer(secured=secured).inputs[0]
        self.state = MemoryState()
        self.seq = 0

    def declare(self, author: str, decl: WorldDecl) -> Rejection | None:
        """Send ``decl`` on ``author``'s ops subject; the rejection, if any."""
        self.seq += 1
        subject = ops(W, author)
        op = DeclareWorld(
            op_id=f"op-{self.seq}", author=author, at=T0, declaration=decl
        )
        ctx = Context(
            world=W, author=author_of(subject), subject=subject, seq=self.seq, now=T0
        )
        out = self.state.feed(self.input, encode(op), ctx)
        rejections = [o.message for o in out if isinstance(o.message, Rejection)]
        return rejections[0] if rejections else None

    @property
    def declared(self) -> WorldDecl | None:
        return load_decl(self.state, W)


def test_on_an_open_bus_the_first_declaration_comes_from_an_admin_it_names() -> None:
    m = _Materializer(secured=False)
    squat = m.declare("mallory", _decl(admins=["mallory"]))
    assert squat is None  # names itself admin: an open bus cannot tell who is who
    m = _Materializer(secured=False)
    refused = m.declare("mallory", _decl(admins=["henry"]))
    assert refused is not None
    assert refused.code == "unauthorized"
    assert "first declaration must come from an admin it names" in refused.reason
    assert "henry" in refused.reason
    assert m.declared is None
    no_admins = m.declare("henry", _decl(admins=[]))
    assert no_admins is not None
    assert no_admins.code == "unauthorized"
    assert m.declared is None
    assert m.declare("henry", _decl(admins=["henry"])) is None
    assert m.declared is not None


def test_with_credentials_only_the_operator_declares_first() -> None:
    m = _Materializer(secured=True)
    # An agent holding credentials for the world (they are issued before worlds are
    # declared) cannot squat it, even naming itself admin.
    for author in ("spock", "henry"):
        refused = m.declare(author, _decl(admins=[author]))
        assert refused is not None
        assert refused.code == "unauthorized"
        assert "only the operator declares a world first" in refused.reason
        assert "--agent operator --creds operator.creds" in refused.reason
        assert m.declared is None
    assert m.declare(OPERATOR, _decl(admins=["henry"])) is None
    first = m.declared
    assert first is not None
    # Re-declarations: the current admins, as before; not the operator.
    again = _decl(admins=["henry", "ada"])
    refused = m.declare(OPERATOR, again)
    assert refused is not None
    assert refused.code == "unauthorized"
    assert "re-declare" in refused.reason
    assert m.declare("henry", again) is None
    assert m.declared == again


def test_the_spec_is_secured_when_the_materializer_runs_with_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(CREDS_ENV, raising=False)
    assert _Materializer(secured=None).declare("henry", _decl(["henry"])) is None
    monkeypatch.setenv(CREDS_ENV, str(tmp_path / "materializer.creds"))
    refused = _Materializer(secured=None).declare("henry", _decl(["henry"]))
    assert refused is not None
    assert refused.code == "unauthorized"


@pytest.mark.parametrize("name", sorted(RESERVED_AGENTS))
@pytest.mark.parametrize("where", ["admin", "grant", "subscription", "entity"])
def test_reserved_names_are_refused_as_agents(name: str, where: str) -> None:
    decl = _decl(admins=["henry"])
    match where:
        case "admin":
            decl = _decl(admins=["henry", name])
        case "grant":
            grants = [Grant(agents=[name], fields=["x.*"])]
            decl = msgspec.structs.replace(
                decl, authority=Authority(admins=["henry"], grants=grants)
            )
        case "subscription":
            subs = [Subscription(agent=name, on=["x.y"])]
            decl = msgspec.structs.replace(decl, subscriptions=subs)
        case _:
            seeds = [EntitySeed(id=agent_ref(name))]
            decl = msgspec.structs.replace(decl, entities=seeds)
    for secured, author in ((False, "henry"), (True, OPERATOR)):
        m = _Materializer(secured=secured)
        refused = m.declare(author, decl)
        assert refused is not None
        assert refused.code == "invalid"
        assert f"{name} are reserved for worldline's actors and operator" in (
            refused.reason
        )
        assert m.declared is None
    with pytest.raises(BadRequest, match=f"{name} are reserved"):
        declared_agents(decl)


def test_every_actor_name_is_reserved() -> None:
    assert {*ACTOR_NAMES, OPERATOR} == RESERVED_AGENTS


def test_creds_cli_refuses_a_reserved_agent_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "world.toml"
    source.write_text(
        "[world]\nid = 'w'\n[authority]\nadmins = ['henry']\n"
        "[[authority.grants]]\nagents = ['extractor']\nfields = ['x.*']\n"
    )
    with pytest.raises(SystemExit) as exited:
        main(["creds", str(source), "--out", str(tmp_path / "out")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "extractor are reserved" in err
    assert "rename those agents" in err
    assert not (tmp_path / "out").exists()

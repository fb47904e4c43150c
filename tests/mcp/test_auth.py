"""The HTTP server's tokens file: hashes to agents and their credentials, each bad
entry refused with the file, the entry and the fix."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pytest

from worldline.mcp.auth import load_tokens
from worldline.ops.creds import new_seed
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from pathlib import Path


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tokens.toml"
    path.write_text(text)
    return path


def test_a_token_maps_to_its_agent_and_credentials(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    creds = tmp_path / "agents" / "ada.creds"
    creds.write_text(new_seed() + "\n")
    path = _write(
        tmp_path,
        f'[agents.ada]\ntoken_sha256 = "{_sha("a" * 64)}"\n'
        'creds = "agents/ada.creds"\n'
        f'[agents.bob]\ntoken_sha256 = "{_sha("b" * 64)}"\n',
    )
    tokens = load_tokens(path)
    assert tokens.agents == ("ada", "bob")
    ada = tokens.agent_for("a" * 64)
    assert ada is not None
    assert (ada.agent, ada.creds) == ("ada", creds.resolve())
    bob = tokens.agent_for("b" * 64)
    assert bob is not None
    assert (bob.agent, bob.creds) == ("bob", None)
    assert tokens.agent_for("a" * 63) is None
    assert tokens.agent_for("") is None
    assert tokens.agent_for(_sha("a" * 64)) is None  # the hash is not the token


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[agents]\n", "expected only [agents.NAME] tables"),
        ('[agent.ada]\ntoken_sha256 = "x"\n', "expected only [agents.NAME] tables"),
        ('[agents.ada]\ntoken_sha256 = "abc"\n', "64 lower-case hex digits"),
        ('[agents.ada]\ntoken = "secret"\n', "unknown key(s) token"),
        ('[agents."a b"]\ntoken_sha256 = "' + "0" * 64 + '"\n', "[agents.a b]"),
        (
            '[agents.ada]\ntoken_sha256 = "' + "0" * 64 + '"\ncreds = "nope.creds"\n',
            "nope.creds",
        ),
        (
            '[agents.ada]\ntoken_sha256 = "' + "0" * 64 + '"\n'
            '[agents.bob]\ntoken_sha256 = "' + "0" * 64 + '"\n',
            "two agents share one token",
        ),
        ("not toml [", "is not valid TOML"),
    ],
)
def test_a_bad_tokens_file_is_refused_naming_the_cause(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(BadRequest) as refused:
        load_tokens(path)
    assert message in str(refused.value)
    assert str(path) in str(refused.value)


def test_an_entry_without_creds_is_refused_when_a_process_wide_one_is_set(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, f'[agents.ada]\ntoken_sha256 = "{_sha("t")}"\n')
    assert load_tokens(path).agents == ("ada",)
    with pytest.raises(BadRequest, match="give each agent its own creds"):
        load_tokens(path, env_creds=True)


def test_a_missing_tokens_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="cannot read tokens file"):
        load_tokens(tmp_path / "absent.toml")

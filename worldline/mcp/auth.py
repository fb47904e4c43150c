"""Who an HTTP caller is: bearer tokens mapped to agents and their bus credentials.

``worldline mcp --http --tokens FILE`` reads a TOML file with one table per agent::

    [agents.ada]
    token_sha256 = "9f86d0..."        # sha256 (hex) of ada's bearer token
    creds = "creds/agents/ada.creds"  # ada's bus credentials (`worldline creds`)

The file holds only the tokens' hashes, never the tokens. A caller presenting
``Authorization: Bearer <token>`` whose sha256 matches an entry is that agent: every
tool it calls runs on a bus connection made with that agent's credentials file, so the
bus grants it exactly what it grants the agent (its own ops, inbox and view). A
request without a matching token is refused (HTTP 401) before it reaches a tool.

Pure: parsing and checking; :class:`Tokens` compares hashes in constant time over every
entry, so the time taken says nothing about which entry (if any) came close.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import tomllib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from worldline.actors.runtime.auth import CredentialsError, load_credentials
from worldline.protocols.subjects import check_name
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["AgentToken", "Tokens", "load_tokens", "token_digest"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_KEYS = frozenset({"token_sha256", "creds"})
_FIX = (
    "make a token with `openssl rand -hex 32` and store its hash: "
    "`printf %s TOKEN | sha256sum`"
)


def token_digest(token: str) -> bytes:
    """The sha256 of a bearer token, as the tokens file stores it (in hex)."""
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True, slots=True)
class AgentToken:
    """One agent the HTTP server serves: its token's hash and its credentials."""

    agent: str
    digest: bytes
    creds: Path | None  # None: connect without credentials (an open bus)


@dataclass(frozen=True, slots=True)
class Tokens:
    """Every agent the HTTP server serves."""

    entries: tuple[AgentToken, ...]

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(entry.agent for entry in self.entries)

    def agent_for(self, token: str) -> AgentToken | None:
        """The entry whose hash matches ``token``: every entry compared, in constant
        time each, whatever matched."""
        digest = token_digest(token)
        found: AgentToken | None = None
        for entry in self.entries:
            if hmac.compare_digest(digest, entry.digest):
                found = entry
        return found

    def entry(self, agent: str) -> AgentToken:
        for entry in self.entries:
            if entry.agent == agent:
                return entry
        raise KeyError(agent)


def _entry(path: Path, agent: str, table: Any, *, env_creds: bool) -> AgentToken:
    where = f"{path}: [agents.{agent}]"
    try:
        check_name("agent", agent)
    except ValueError as exc:
        raise BadRequest(f"{where}: {exc}") from exc
    if not isinstance(table, dict):
        raise BadRequest(f"{where} must be a table with token_sha256 (and creds)")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise BadRequest(
            f"{where}: unknown key(s) {', '.join(unknown)}; the keys are "
            "token_sha256 and creds"
        )
    digest = table.get("token_sha256")
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise BadRequest(
            f"{where}: token_sha256 must be 64 lower-case hex digits (the sha256 "
            f"of the agent's bearer token); {_FIX}"
        )
    creds = table.get("creds")
    if creds is None:
        if env_creds:
            raise BadRequest(
                f"{where} has no creds while --creds or WORLDLINE_CREDS is set: "
                "every agent would run as that one bus user; give each agent its "
                "own creds (agents/NAME.creds from `worldline creds`)"
            )
        return AgentToken(agent, bytes.fromhex(digest), None)
    if not isinstance(creds, str) or not creds:
        raise BadRequest(f"{where}: creds must be a path to the agent's .creds file")
    file = (path.parent / creds).resolve()
    try:
        load_credentials(file)
    except CredentialsError as exc:
        raise BadRequest(f"{where}: {exc}") from exc
    return AgentToken(agent, bytes.fromhex(digest), file)


def load_tokens(path: Path, *, env_creds: bool = False) -> Tokens:
    """Read and check a tokens file (``env_creds``: a process-wide credentials file
    is set, so an entry without its own would silently run as that user).

    Raises:
        BadRequest: the file is missing or not TOML, an entry is malformed, names a
            bad agent or an unreadable credentials file, or two entries share a
            token; the message names the file, the entry and the fix.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadRequest(f"cannot read tokens file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise BadRequest(f"{path} is not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - {"agents"})
    agents = data.get("agents")
    if unknown or not isinstance(agents, dict) or not agents:
        raise BadRequest(
            f"{path}: expected only [agents.NAME] tables (token_sha256, creds), one "
            f"per agent; {_FIX}"
        )
    entries = tuple(
        _entry(path, name, table, env_creds=env_creds) for name, table in agents.items()
    )
    digests = [entry.digest for entry in entries]
    if len(set(digests)) != len(digests):
        raise BadRequest(f"{path}: two agents share one token; give each its own")
    return Tokens(entries)

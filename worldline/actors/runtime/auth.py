"""Client credentials for a NATS server that requires them (``worldline creds``).

A credentials file holds one NATS user nkey seed, in the decorated form the NATS tools
read (``-----BEGIN USER NKEY SEED-----``); the server knows only the public key, so no
secret lives in the server config. A file holding a NATS user JWT as well
(decentralized auth, ``nsc``) is passed to nats-py as it is.

Each nkey user gets its own reply prefix (``_INBOX.<public key>``): the server lets a
user subscribe only under its own prefix, so one agent cannot listen to the replies
meant for another (inbox deliveries, view reads).

An agent's credentials file also names the JetStream API prefix its account reaches
JetStream through (``# jetstream api: $JS.worldline.API``): each agent is a NATS
account of its own without JetStream, importing from the actors' account only its own
JetStream subjects, mapped under that prefix (the server answers ``$JS.API`` in an
account without JetStream itself, with "JetStream not enabled").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import nkeys

from worldline.protocols.subjects import REPLY_ROOT

__all__ = [
    "AGENT_JS_API",
    "CREDS_ENV",
    "JS_API_MARK",
    "ClientAuth",
    "CredentialsError",
    "load_credentials",
    "public_key_of",
    "reply_prefix",
]

CREDS_ENV: Final = "WORLDLINE_CREDS"
_SEED_MARK: Final = "SU"  # a user nkey seed starts with these two letters
_JWT_MARK: Final = "BEGIN NATS USER JWT"
# Where an agent's account reaches the actors' JetStream: its imports map
# ``$JS.API.<rest>`` to ``$JS.worldline.API.<rest>`` (a JetStream "domain" prefix:
# ``nats --js-domain worldline`` reaches it too).
AGENT_JS_API: Final = "$JS.worldline.API"
# The comment line of a credentials file that names that prefix.
JS_API_MARK: Final = "# jetstream api: "


class CredentialsError(ValueError):
    """A credentials file is missing, unreadable, or holds no user nkey seed."""


def reply_prefix(public_key: str) -> str:
    """The reply subjects of the user with this public key: ``_INBOX.<key>``."""
    return f"{REPLY_ROOT}.{public_key}"


def public_key_of(seed: str) -> str:
    """The public key (``U...``) of a user nkey seed (``SU...``).

    Raises:
        CredentialsError: not a valid user seed.
    """
    try:
        keys = nkeys.from_seed(bytearray(seed.strip().encode()))
        public: bytes = keys.public_key
    except (nkeys.NkeysError, ValueError, TypeError) as exc:
        raise CredentialsError(f"not a NATS user nkey seed ({exc!r})") from exc
    if not public.startswith(b"U"):
        raise CredentialsError("the nkey seed is not a user key (U...)")
    return public.decode()


@dataclass(frozen=True, slots=True)
class ClientAuth:
    """How one client authenticates: the options nats-py's ``connect`` takes."""

    path: Path
    seed: str = ""  # empty for a JWT credentials file
    public_key: str = ""
    # The JetStream API prefix the user's account reaches JetStream through; empty:
    # the default ``$JS.API`` (actors, the operator, the open bus).
    js_api: str = ""

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect``."""
        if not self.seed:
            return {"user_credentials": str(self.path)}
        return {
            "nkeys_seed_str": self.seed,
            "inbox_prefix": reply_prefix(self.public_key),
        }


def load_credentials(path: str | os.PathLike[str] | None = None) -> ClientAuth | None:
    """Read a credentials file: ``path``, else ``$WORLDLINE_CREDS``, else none.

    Raises:
        CredentialsError: the file is missing or unreadable, or holds neither a user
            nkey seed nor a user JWT; the message names the file and the fix.
    """
    chosen = path if path is not None else os.environ.get(CREDS_ENV) or None
    if chosen is None:
        return None
    file = Path(chosen)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsError(
            f"cannot read credentials {file}: {exc}; pass the file `worldline creds` "
            f"wrote (--creds FILE or env {CREDS_ENV})"
        ) from exc
    if _JWT_MARK in text:
        return ClientAuth(file)
    js_api = next(
        (
            line.removeprefix(JS_API_MARK).strip()
            for line in text.splitlines()
            if line.startswith(JS_API_MARK)
        ),
        "",
    )
    seeds = [line.strip() for line in text.splitlines()]
    seeds = [line for line in seeds if line.startswith(_SEED_MARK)]
    if len(seeds) != 1:
        raise CredentialsError(
            f"{file} holds no single NATS user nkey seed (a line starting with "
            f"{_SEED_MARK}); generate one with `worldline creds WORLD.toml --out DIR`"
        )
    try:
        public = public_key_of(seeds[0])
    except CredentialsError as exc:
        raise CredentialsError(f"{file}: {exc}") from exc
    return ClientAuth(file, seed=seeds[0], public_key=public, js_api=js_api)

"""The ``mcp`` verb: serve an agent's world model as an MCP server, over stdio (one
agent) or streamable HTTP (``--http``: the agents of a tokens file, each with its own
bus credentials; :mod:`worldline.mcp`). Over HTTP it is the whole gateway: the
console at ``/console/``, ``/healthz``, ``/readyz`` and ``/metrics`` beside ``/mcp``
(:mod:`worldline.console.gateway`).

The MCP SDK is an extra (``pip install 'worldline[mcp]'``): it is imported only when
this verb runs, and without it the verb says how to install it and exits 2.
"""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from worldline.actors.runtime.auth import (
    CREDS_ENV,
    CredentialsError,
    load_credentials,
)
from worldline.cli.common import EXIT_OK, EXIT_USAGE, default_url

if TYPE_CHECKING:
    import argparse

__all__ = ["DEFAULT_PORT", "INSTALL", "add_arguments", "run_mcp"]

DEFAULT_PORT = 8765
INSTALL = "pip install 'worldline[mcp]'"


def _port(text: str) -> int:
    import argparse

    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535)")
    return int(text)


def _hosts(text: str) -> tuple[str, ...]:
    import argparse

    from worldline.mcp.hosts import allowed_host

    entries = tuple(part.strip() for part in text.split(","))
    for entry in entries:
        try:
            allowed_host(entry)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc
    return entries


def add_arguments(verb: argparse.ArgumentParser, *, http: bool = False) -> None:
    """The ``mcp`` verb's own options (the client options come from its parent);
    ``http``: the ``console`` verb's, always over HTTP."""
    if not http:
        verb.add_argument(
            "--http",
            action="store_true",
            help="serve streamable HTTP at http://HOST:PORT/mcp, with the console "
            "at /console/, instead of stdio (needs --tokens)",
        )
    verb.add_argument(
        "--host",
        default="127.0.0.1",
        help="--http: the address to listen on (default loopback only; any other "
        "needs --allowed-hosts)",
    )
    verb.add_argument(
        "--allowed-hosts",
        type=_hosts,
        default=(),
        metavar="HOST[,HOST...]",
        help="--http: the host names (NAME or NAME:PORT) clients use to reach this "
        "server; requests whose Host or Origin header names another are refused "
        "(DNS-rebinding protection; loopback names always pass); required with a "
        "non-loopback --host",
    )
    verb.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"--http: the port (default {DEFAULT_PORT})",
    )
    verb.add_argument(
        "--tokens",
        type=Path,
        default=None,
        help="--http: TOML file mapping each agent's bearer-token sha256 to its "
        "credentials file ([agents.NAME] token_sha256, creds; docs/agents.md)",
    )
    verb.add_argument(
        "--console-creds",
        type=Path,
        default=None,
        metavar="FILE",
        help="--http: the credentials the console reads the world with (an "
        "operator's or a read-only user's; default --creds or WORLDLINE_CREDS); "
        "refused or missing on a secured bus: MCP still serves, the console says why",
    )
    verb.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=None,
        help="--http: log lines as text (time, level) or JSON objects (env "
        "WORLDLINE_LOG_FORMAT; default text)",
    )


def run_mcp(args: argparse.Namespace) -> int:
    """Serve the world model as MCP tools: over stdio (stdout is the protocol; logs go
    to stderr) as ``--agent``, or over HTTP as each authenticated agent."""
    try:  # the MCP SDK is only loaded here
        from worldline.console.gateway import gateway
        from worldline.mcp.auth import load_tokens
        from worldline.mcp.server import serve, serve_http, transport_security
    except ImportError as exc:
        if exc.name is None or exc.name.split(".")[0] not in (
            "mcp",
            "uvicorn",
            "pydantic",
            "starlette",
        ):
            raise
        sys.stderr.write(
            f"worldline: `worldline mcp` needs the MCP SDK, an extra: {INSTALL}\n"
        )
        return EXIT_USAGE
    url = args.nats or default_url()
    http = getattr(args, "http", False)
    tokens_file = getattr(args, "tokens", None)
    if not http:
        for flag, given in (
            ("--tokens", tokens_file is not None),
            ("--allowed-hosts", bool(getattr(args, "allowed_hosts", ()))),
            ("--log-format", getattr(args, "log_format", None) is not None),
            ("--console-creds", getattr(args, "console_creds", None) is not None),
        ):
            if given:
                sys.stderr.write(f"worldline: {flag} is for --http only\n")
                return EXIT_USAGE
        anyio.run(
            partial(
                serve,
                url,
                world=args.world,
                agent=args.agent,
                request_timeout=args.timeout,
            ),
            backend="asyncio",
        )
        return EXIT_OK
    if tokens_file is None:
        verb = "console" if args.verb == "console" else "--http"
        sys.stderr.write(
            f"worldline: {verb} needs --tokens FILE: who may call, as which agent "
            "(docs/agents.md, 'Over HTTP'); unauthenticated HTTP is not served\n"
        )
        return EXIT_USAGE
    # Refuse a non-loopback bind without --allowed-hosts before reading anything.
    transport_security(args.host, args.allowed_hosts)
    tokens = load_tokens(tokens_file, env_creds=bool(os.environ.get(CREDS_ENV)))
    if args.console_creds is not None:  # named, so it must be readable: say so now
        try:
            load_credentials(args.console_creds)
        except CredentialsError as exc:
            raise CredentialsError(f"--console-creds: {exc}") from exc
    anyio.run(
        partial(
            serve_http,
            url,
            world=args.world,
            tokens=tokens,
            host=args.host,
            port=args.port,
            allowed_hosts=args.allowed_hosts,
            request_timeout=args.timeout,
            gateway=partial(gateway, creds=args.console_creds),
        ),
        backend="asyncio",
    )
    return EXIT_OK

"""The ``mcp`` verb: serve this agent's world model as MCP tools over stdio
(:mod:`worldline.mcp`)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import anyio

from worldline.cli.common import EXIT_OK, default_url

if TYPE_CHECKING:
    import argparse

__all__ = ["run_mcp"]


def run_mcp(args: argparse.Namespace) -> int:
    """Serve this agent's world model as MCP tools over stdio (stdout is the
    protocol; logs go to stderr)."""
    from worldline.mcp.server import serve  # the MCP SDK is only loaded here

    anyio.run(
        partial(
            serve,
            args.nats or default_url(),
            world=args.world,
            agent=args.agent,
            request_timeout=args.timeout,
        ),
        backend="asyncio",
    )
    return EXIT_OK

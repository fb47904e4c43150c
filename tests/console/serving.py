"""``worldline mcp --http`` (the gateway) as a subprocess, for the console's tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["gateway", "get"]

WORLDLINE = str(Path(sys.executable).parent / "worldline")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get(url: str, token: str = "") -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return int(reply.status), reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _text(path: Path) -> str:
    return path.read_text()


@asynccontextmanager
async def gateway(
    url: str,
    world: str,
    tokens: Path,
    log: Path,
    *extra: str,
    verb: tuple[str, ...] = ("mcp", "--http"),
) -> AsyncIterator[str]:
    """The gateway (``verb``: ``mcp --http`` or ``console``) serving ``world``;
    yields its base URL once /readyz says 200."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}
    command = [WORLDLINE, *verb, "--port", str(port), "--tokens", str(tokens)]
    command += ["--nats", url, "--world", world, "--log-format", "json", *extra]
    with log.open("w") as errlog:
        server = await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=None, stderr=errlog, env=env
        )
    base = f"http://127.0.0.1:{port}"
    try:
        with anyio.fail_after(30):
            while True:
                assert server.returncode is None, _text(log)
                try:
                    code, _ = await anyio.to_thread.run_sync(get, f"{base}/readyz")
                except OSError:
                    code = 0
                if code == 200:
                    break
                await anyio.sleep(0.1)
        yield base
    finally:
        server.terminate()
        with anyio.fail_after(10):
            await server.wait()

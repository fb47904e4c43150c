"""A 3-node JetStream cluster on loopback, started from ``deploy/nats/cluster/``.

Each node runs the operator's own ``node-N.conf``; only what must differ on one
machine is substituted (client, monitoring and route ports, the store folder, a log
file). Every substitution must match exactly as often as expected, so a change to
the deploy configs that this harness no longer understands fails the test instead of
silently testing something else.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import anyio
import nats
import nats.errors

from worldline.actors.runtime.embedded import nats_server_binary

__all__ = ["CLUSTER_CONFIGS", "NatsCluster", "render"]

CLUSTER_CONFIGS = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "cluster"
NODES = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _sub(pattern: str, repl: str, text: str, count: int) -> str:
    text, found = re.subn(pattern, repl, text, flags=re.MULTILINE)
    if found != count:
        raise AssertionError(
            f"deploy config: {pattern!r} matched {found} times, expected {count}; "
            "update tests/cluster/cluster.py along with deploy/nats/cluster/"
        )
    return text


def render(
    template: str,
    *,
    client: int,
    http: int,
    route: int,
    routes: list[int],
    store: Path,
    log: Path,
) -> str:
    """One node's deploy config, moved onto loopback ports and a private store."""
    text = _sub(
        r"^listen: 0\.0\.0\.0:4222$", f"listen: 127.0.0.1:{client}", template, 1
    )
    text = _sub(r"^http: .*$", f"http: 127.0.0.1:{http}", text, 1)
    text = _sub(r"^(\s+)store_dir: .*$", rf'\1store_dir: "{store}"', text, 1)
    text = _sub(
        r"^(\s+)listen: 0\.0\.0\.0:6222$", rf"\1listen: 127.0.0.1:{route}", text, 1
    )
    for i, port in enumerate(routes, start=1):
        text = _sub(
            rf"nats-route://nats-{i}:6222$", f"nats-route://127.0.0.1:{port}", text, 1
        )
    return text + f'\nlog_file: "{log}"\n'


class NatsCluster:
    """Three nats-servers forming one JetStream cluster; kill and restart nodes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.client_ports = [_free_port() for _ in range(NODES)]
        route_ports = [_free_port() for _ in range(NODES)]
        self.confs: list[Path] = []
        self.logs: list[Path] = []
        for n in range(1, NODES + 1):
            node = folder / f"nats-{n}"
            node.mkdir(parents=True)
            log = node / "nats-server.log"
            conf = node / "nats.conf"
            conf.write_text(
                render(
                    (CLUSTER_CONFIGS / f"node-{n}.conf").read_text(),
                    client=self.client_ports[n - 1],
                    http=_free_port(),
                    route=route_ports[n - 1],
                    routes=route_ports,
                    store=node / "jetstream",
                    log=log,
                )
            )
            self.confs.append(conf)
            self.logs.append(log)
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * NODES

    @property
    def url(self) -> str:
        """Every node, comma-separated: what actors and agents are given."""
        return ",".join(f"nats://127.0.0.1:{p}" for p in self.client_ports)

    def node_url(self, index: int) -> str:
        return f"nats://127.0.0.1:{self.client_ports[index]}"

    def start(self, index: int) -> None:
        """Start node ``index`` (0-based) on its config and store."""
        self.procs[index] = subprocess.Popen(
            [nats_server_binary(), "-c", str(self.confs[index])],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def restart(self, index: int, timeout: float = 30.0) -> None:
        """Start a killed node again on the same store; it rejoins and catches up."""
        self.logs[index].unlink(missing_ok=True)
        self.start(index)
        self.wait_listening(index, time.monotonic() + timeout)

    def start_all(self, timeout: float = 30.0) -> None:
        for index in range(NODES):
            self.logs[index].unlink(missing_ok=True)
            self.start(index)
        deadline = time.monotonic() + timeout
        for index in range(NODES):
            self.wait_listening(index, deadline)

    def wait_listening(self, index: int, deadline: float) -> None:
        while time.monotonic() < deadline:
            log = self.logs[index]
            text = log.read_text(errors="replace") if log.exists() else ""
            if "Server is ready" in text:
                return
            proc = self.procs[index]
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = self.logs[index].read_text(errors="replace").splitlines()[-5:]
        raise AssertionError(f"nats-{index + 1} did not start:\n" + "\n".join(tail))

    async def wait_jetstream(self, within: float = 30.0) -> None:
        """Wait until the cluster answers JetStream requests (a meta leader exists)."""
        nc = await nats.connect(self.url.split(","), connect_timeout=2)
        try:
            js = nc.jetstream()
            with anyio.fail_after(within):
                while True:
                    try:
                        await js.account_info()
                        return
                    except (nats.errors.Error, TimeoutError):
                        await anyio.sleep(0.2)
        finally:
            await nc.close()

    def kill(self, index: int) -> None:
        """``kill -9`` node ``index``: no shutdown, no flush, no leadership handoff."""
        proc = self.procs[index]
        assert proc is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        self.procs[index] = None

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for index, proc in enumerate(self.procs):
            if proc is None:
                continue
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
            self.procs[index] = None

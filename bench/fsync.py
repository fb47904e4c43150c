"""fsync benchmark: JetStream publish throughput with ``sync_interval: always`` against
the server's default (an fsync every 2 minutes), measured in the same run.

Run: ``python bench/fsync.py [--sequential 2000] [--pipelined 20000] [--size 300]``.

For each setting it starts a nats-server from ``deploy/nats/single.conf`` (the port,
the monitoring port, the store folder and the ``sync_interval`` line substituted; the
store is a fresh folder under ``--dir``, default the system temp folder), creates one
file stream with one replica, and publishes same-sized messages with nats-py:
one at a time (each publish waits for its PubAck, as an agent's write does) and
pipelined (``publish_async``, up to ``--window`` PubAcks outstanding, as the actors
publish an outbox). It prints msgs/s for both and the ratio always/default.

Put ``--dir`` on the disk the deployment will use: tmpfs or a RAM-backed folder makes
fsync free and the comparison meaningless.
"""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path

import anyio
import nats
from nats.js import api

from worldline.actors.runtime.embedded import nats_server_binary

CONFIG = Path(__file__).resolve().parent.parent / "deploy" / "nats" / "single.conf"
SUBJECT = "bench.fsync"
SETTINGS = {"default": None, "always": "always"}  # None: the line is removed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def render(template: str, *, store: Path, log: Path, sync: str | None) -> str:
    """``single.conf`` on free loopback ports, a private store and the given sync."""
    text = re.sub(r"(?m)^listen:.*$", f"listen: 127.0.0.1:{_free_port()}", template)
    text = re.sub(r"(?m)^http:.*$", f"http: 127.0.0.1:{_free_port()}", text)
    text = re.sub(r"(?m)^(\s*)store_dir:.*$", rf'\1store_dir: "{store}"', text)
    sync_line = "" if sync is None else rf"\1sync_interval: {sync}"
    text, found = re.subn(r"(?m)^(\s*)sync_interval:.*$", sync_line, text)
    if not found:
        raise SystemExit(f"{CONFIG} has no sync_interval line to substitute")
    return text + f'\nlog_file: "{log}"\n'


class Server:
    """A nats-server started from a rendered config, stopped on exit."""

    def __init__(self, folder: Path, sync: str | None) -> None:
        folder.mkdir(parents=True)
        self.log = folder / "nats-server.log"
        self.conf = folder / "nats.conf"
        self.conf.write_text(
            render(CONFIG.read_text(), store=folder / "js", log=self.log, sync=sync)
        )
        self.proc = subprocess.Popen(
            [nats_server_binary(), "-c", str(self.conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            text = self.log.read_text() if self.log.exists() else ""
            found = re.search(r"Listening for client connections on (\S+):(\d+)", text)
            if found and "Server is ready" in text:
                self.url = f"nats://127.0.0.1:{found.group(2)}"
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise SystemExit(f"nats-server did not start; see {self.log}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


async def measure(
    url: str, *, sequential: int, pipelined: int, size: int, window: int
) -> tuple[float, float]:
    """msgs/s one at a time, then pipelined, into a fresh R1 file stream."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(
        api.StreamConfig(
            name="BENCH_FSYNC",
            subjects=[SUBJECT],
            storage=api.StorageType.FILE,
            num_replicas=1,
        )
    )
    payload = b"x" * size
    try:
        start = time.perf_counter()
        for _ in range(sequential):
            await js.publish(SUBJECT, payload, timeout=10)
        one = sequential / (time.perf_counter() - start)

        start = time.perf_counter()
        sent = 0
        while sent < pipelined:
            n = min(window, pipelined - sent)
            futures = [await js.publish_async(SUBJECT, payload) for _ in range(n)]
            for future in futures:
                await future
            sent += n
        many = pipelined / (time.perf_counter() - start)
    finally:
        await nc.close()
    return one, many


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequential", type=int, default=2000)
    parser.add_argument("--pipelined", type=int, default=20000)
    parser.add_argument("--size", type=int, default=300, help="payload bytes")
    parser.add_argument("--window", type=int, default=256, help="PubAcks in flight")
    parser.add_argument("--dir", type=Path, default=None, help="store on this disk")
    args = parser.parse_args()
    results: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="wl-fsync-", dir=args.dir) as tmp:
        for name, sync in SETTINGS.items():
            server = Server(Path(tmp) / name, sync)
            try:
                results[name] = anyio.run(
                    partial(
                        measure,
                        server.url,
                        sequential=args.sequential,
                        pipelined=args.pipelined,
                        size=args.size,
                        window=args.window,
                    ),
                    backend="asyncio",
                )
            finally:
                server.stop()
    print(f"payload {args.size} B, file stream, 1 replica, deploy/nats/{CONFIG.name}")
    for name, (one, many) in results.items():
        label = f"sync_interval {name}" + (" (2m)" if name == "default" else "")
        print(f"{label:<28} one-at-a-time {one:>9,.0f} msgs/s  pipelined {many:>9,.0f}")
    (d1, dn), (a1, an) = results["default"], results["always"]
    print(f"always / default             one-at-a-time {a1 / d1:>9.2f}x       ", end="")
    print(f"pipelined {an / dn:>9.2f}x")


if __name__ == "__main__":
    main()

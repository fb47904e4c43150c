"""Starting up: actors wait for a JetStream that is not ready yet, and one process
per store (a second one is refused, naming who holds it)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import nats
import nats.errors
import nats.js.errors
import pytest

from worldline.actors.registry import build
from worldline.actors.runtime.consume import run_actor
from worldline.actors.runtime.declare import STARTUP_RETRY_MAX, transient
from worldline.actors.runtime.embedded import EmbeddedNats, nats_server_binary
from worldline.actors.runtime.lock import FolderLock, FolderLocked
from worldline.actors.runtime.supervise import run_actors
from worldline.protocols.subjects import OPS, STREAMS

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.nats


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_transient_errors_are_retried_and_refusals_are_not() -> None:
    api = nats.js.errors
    assert transient(nats.errors.TimeoutError())
    assert transient(nats.errors.NoRespondersError())
    assert transient(api.ServiceUnavailableError())  # JetStream not enabled (yet)
    assert transient(api.ServiceUnavailableError(code=503, err_code=10008))
    assert transient(api.ServerError(code=500, err_code=10009))  # not the leader
    assert transient(api.ServerError(code=500, err_code=10047))  # storage full
    # Configuration refusals stop with ConfigDrift instead of retrying forever.
    assert not transient(api.ServerError(code=500, err_code=10074))  # replicas
    assert not transient(api.ServerError(code=500, err_code=10052))  # retention
    assert not transient(api.NotFoundError(code=404, err_code=10059))
    assert not transient(api.BucketNotFoundError())
    assert not transient(ValueError("not a bus error"))


@pytest.fixture
def plain_server(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A nats-server without JetStream on a fixed port (as a cluster node is before
    its JetStream is ready)."""
    port = _free_port()
    proc = subprocess.Popen(
        [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield port, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def _wait_listening(port: int) -> None:
    with anyio.fail_after(10):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return


async def test_actors_wait_for_jetstream_then_come_up_without_a_restart(
    plain_server: tuple[int, subprocess.Popen[bytes]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The attack: on a cold cluster fusion and the simulator died on a stream_info
    # that JetStream could not answer yet. Here JetStream is off at first, then the
    # server comes back with it on the same port: the actors must come up by
    # themselves (before: ServiceUnavailableError out of ensure_streams, a crash).
    caplog.set_level(logging.WARNING, logger="worldline.bus")
    port, plain = plain_server
    url = f"nats://127.0.0.1:{port}"
    await _wait_listening(port)
    specs = [build("fusion"), build("simulator"), build("materializer")]
    started = anyio.Event()
    failed: list[BaseException] = []
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            try:
                await tg.start(partial(run_actors, specs, url=url, data=tmp_path))
            except BaseException as exc:
                failed.append(exc)
                raise
            started.set()

        tg.start_soon(run)
        await anyio.sleep(1.5)
        assert not failed
        assert not started.is_set()  # nothing to declare streams on yet
        assert "JetStream cannot serve it now" in caplog.text
        plain.send_signal(signal.SIGTERM)
        plain.wait(timeout=10)
        with EmbeddedNats(tmp_path / "nats", port=port):
            enabled = time.monotonic()
            with anyio.fail_after(30):
                await started.wait()
            # Measured 1.5 s (the back-off's next retry); bounded, not a race.
            assert time.monotonic() - enabled < STARTUP_RETRY_MAX + 10
            nc = await nats.connect(url)
            try:
                names = {(await nc.jetstream().stream_info(s.name)).config.name
                         for s in STREAMS}  # fmt: skip
            finally:
                await nc.close()
            assert OPS.name in names
            tg.cancel_scope.cancel()


async def test_a_second_process_on_one_store_is_refused_naming_the_holder(
    nats_url: str, tmp_path: Path
) -> None:
    fusion = build("fusion")
    async with anyio.create_task_group() as tg:
        await tg.start(partial(run_actors, [fusion], url=nats_url, data=tmp_path))
        with pytest.raises(FolderLocked) as refused:
            await run_actor(build("fusion"), url=nats_url, data=tmp_path)
        message = str(refused.value)
        assert str(tmp_path / "fusion") in message
        assert f"pid {os.getpid()}" in message
        assert nats_url in message
        assert "--replica" in message  # the fix
        # Another instance (its own store folder) may share the data folder.
        other = build("projector", replica="r2")
        await tg.start(partial(run_actors, [other], url=nats_url, data=tmp_path))
        tg.cancel_scope.cancel()
    # Stopped: the lock is free again, and the file says nothing stale matters.
    with FolderLock(tmp_path / "fusion.lock", what="x", fix="y").acquire():
        pass


def test_a_killed_holder_never_blocks_the_next_one(tmp_path: Path) -> None:
    lock = tmp_path / "worldline.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from worldline.actors.runtime.lock import FolderLock\n"
            "FolderLock(Path(sys.argv[1]), what='w', fix='f').acquire(url='nats://x')\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(FolderLocked, match=rf"pid {holder.pid}, nats://x"):
            FolderLock(lock, what="w", fix="f").acquire()
        holder.kill()  # kill -9: the kernel drops the lock
        holder.wait()
        with FolderLock(lock, what="w", fix="f").acquire():
            pass
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()

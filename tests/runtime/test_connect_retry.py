"""An actor's first connect waits for its server (issue 23).

An actor started before its nats-server (a compose file, a pod whose NATS is still
scheduling) used to exit 4 at once: only connections that had succeeded once were
retried. Now the first connect is retried with backoff for ``--connect-wait`` seconds
(env ``WORLDLINE_CONNECT_WAIT``, default 60), each attempt logged; a server that
refuses the credentials still fails at once. Commands and the SDK keep one attempt.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import nats
import pytest

from worldline.actors.runtime.bus import connect
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.actors.runtime.errors import BusUnavailable
from worldline.actors.runtime.patience import (
    CONNECT_WAIT,
    CONNECT_WAIT_ENV,
    connect_patiently,
    connect_wait,
)
from worldline.protocols.subjects import STATUS

WORLDLINE = str(Path(sys.executable).parent / "worldline")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _heartbeats(url: str) -> list[str]:
    nc = await nats.connect(url)
    try:
        kv = await nc.jetstream().key_value(STATUS.bucket)
        try:
            return list(await kv.keys())
        except nats.js.errors.NoKeysError:
            return []
    finally:
        await nc.close()


def _beating(url: str, instance: str) -> bool:
    """Whether ``instance`` has a heartbeat in the status bucket."""
    keys = anyio.run(_heartbeats, url)
    return any(key.startswith(f"{instance}.") for key in keys)


@pytest.mark.cli
@pytest.mark.nats
def test_an_actor_started_before_its_server_comes_up(tmp_path: Path) -> None:
    port = _free_port()
    url = f"nats://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}
    command = [WORLDLINE, "actor", "fusion", "--nats", url, "--data", str(tmp_path)]
    errlog = tmp_path / "actor-stderr.log"
    with (
        errlog.open("w") as err,
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=err, text=True, env=env
        ) as actor,
    ):
        try:
            time.sleep(3)  # no server yet: the actor keeps trying
            assert actor.poll() is None, errlog.read_text()
            with EmbeddedNats(tmp_path / "nats", port=port) as server:
                assert server.url == url
                assert actor.stdout is not None
                line = actor.stdout.readline()  # the test's timeout bounds it
                assert line.strip() == f"fusion: consuming from {url}", (
                    errlog.read_text()
                )
                deadline = time.monotonic() + 10
                while not _beating(url, "fusion"):
                    assert time.monotonic() < deadline, "no heartbeat from fusion"
                    time.sleep(0.1)
                actor.send_signal(signal.SIGTERM)
                assert actor.wait(timeout=20) == 0, errlog.read_text()
        finally:
            if actor.poll() is None:
                actor.kill()
                actor.wait()
    tried = [
        line for line in errlog.read_text().splitlines() if "cannot reach NATS" in line
    ]
    # Each attempt logged, at a sane rate: backing off (0.5, 1, 2 s...) over 3 s.
    assert 2 <= len(tried) <= 6, tried
    assert "attempt 1, again in 0.5s" in tried[0]
    assert "Traceback" not in errlog.read_text()


@pytest.mark.cli
def test_an_actor_waiting_for_its_server_stops_on_sigterm(tmp_path: Path) -> None:
    """The wait is no trap: SIGTERM (a pod deleted, Ctrl-C) stops it at once."""
    url = f"nats://127.0.0.1:{_free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}
    command = [WORLDLINE, "actor", "fusion", "--nats", url, "--data", str(tmp_path)]
    errlog = tmp_path / "actor-stderr.log"
    with (
        errlog.open("w") as err,
        subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=err, env=env
        ) as actor,
    ):
        try:
            deadline = time.monotonic() + 20
            while "attempt 2," not in errlog.read_text():
                assert actor.poll() is None, errlog.read_text()
                assert time.monotonic() < deadline, errlog.read_text()
                time.sleep(0.05)
            actor.send_signal(signal.SIGTERM)
            started = time.monotonic()
            assert actor.wait(timeout=10) == 0, errlog.read_text()
            assert time.monotonic() - started < 5
        finally:
            if actor.poll() is None:
                actor.kill()
                actor.wait()
    assert "Traceback" not in errlog.read_text()


async def test_the_first_connect_gives_up_after_its_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = time.monotonic()
    with (
        caplog.at_level(logging.WARNING, logger="worldline.bus"),
        pytest.raises(BusUnavailable) as failed,
    ):
        await connect_patiently("nats://127.0.0.1:1", name="patient", wait=1.6)
    took = time.monotonic() - started
    assert 1.6 <= took < 6
    message = str(failed.value)
    assert "cannot reach NATS at nats://127.0.0.1:1" in message
    assert "attempts in 1.6s" in message
    assert "--connect-wait" in message
    attempts = [r.getMessage() for r in caplog.records if "attempt" in r.getMessage()]
    # 0.5 s, then the time left; on a loaded machine the first attempt can take
    # so long that the second is the last, which gives up instead of warning.
    assert len(attempts) >= 1, attempts
    assert "giving up in" in attempts[0]


async def test_no_wait_is_one_attempt() -> None:
    for hasty in (
        connect("nats://127.0.0.1:1", name="hasty"),  # commands and the SDK
        connect_patiently("nats://127.0.0.1:1", name="hasty", wait=0),
    ):
        started = time.monotonic()
        with pytest.raises(BusUnavailable) as failed:
            await hasty
        assert time.monotonic() - started < 5
        assert "attempts" not in str(failed.value)


@pytest.mark.nats
async def test_refused_credentials_fail_at_once_however_long_the_wait(
    tmp_path: Path,
) -> None:
    config = tmp_path / "auth.conf"
    config.write_text('authorization { user: "actor", password: "secret" }\n')
    with EmbeddedNats(tmp_path / "nats", config=config) as server:
        started = time.monotonic()
        with pytest.raises(BusUnavailable, match="refused an anonymous client"):
            await connect_patiently(server.url, name="refused", wait=60)
        assert time.monotonic() - started < 5


def test_the_wait_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(CONNECT_WAIT_ENV, raising=False)
    assert connect_wait() == CONNECT_WAIT
    monkeypatch.setenv(CONNECT_WAIT_ENV, "2.5")
    assert connect_wait() == 2.5
    monkeypatch.setenv(CONNECT_WAIT_ENV, "0")
    assert connect_wait() == 0
    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv(CONNECT_WAIT_ENV, bad)
        with pytest.raises(ValueError, match=CONNECT_WAIT_ENV):
            connect_wait()

"""Crash test (short version runs in CI): kill -9 ``worldline up`` while a writer
streams ops, restart it on the same data, and compare the live state hash with a clean
replay of the log. Nothing acknowledged may be lost, nothing applied twice.

The long run is ``WORLDLINE_CRASH_ROUNDS=100 python -m pytest tests/reliability``.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
import nats
import pytest
from nats.js import api

from tests.runtime.test_crew import CREW_TOML
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import AddBelief, AddEvidence, SetField, encode
from worldline.protocols.subjects import ops

pytestmark = pytest.mark.crash

WORLDLINE = str(Path(sys.executable).parent / "worldline")
ROUNDS = int(os.environ.get("WORLDLINE_CRASH_ROUNDS", "3"))
WORLD = "crash"
PILOT = "project:soteria-pilot-conversion"


def _op(i: int, at: datetime) -> AddBelief | AddEvidence | SetField:
    if i % 3 == 0:
        return AddBelief(
            op_id=f"op-b{i}",
            author="ada",
            at=at,
            belief_id=f"b-{i}",
            text=f"belief number {i} about the pilot",
        )
    if i % 3 == 1:
        evidence = Evidence(
            id=f"ev-{i}",
            belief_id=f"b-{i - 1}",
            direction="supports",
            kind="citation",
            source=f"s{i % 5}",
            observed_at=at,
            author="ada",
        )
        return AddEvidence(op_id=f"op-e{i}", author="ada", at=at, evidence=evidence)
    return SetField(
        op_id=f"op-s{i}",
        author="ada",
        at=at,
        entity=PILOT,
        field="status",
        value=f"v{i}",
    )


def _start(data: Path, world_file: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [WORLDLINE, "up", "--data", str(data), "--world-file", str(world_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(3)]
    assert lines[-1] == "ready\n", lines
    return proc, lines[0].split()[1]


async def _write(
    url: str, first: int, count: int, acked: list[str], *, world: str = WORLD
) -> None:
    nc = await nats.connect(url, max_reconnect_attempts=0)
    js = nc.jetstream()
    at = datetime.now(UTC)
    try:
        for i in range(first, first + count):
            op = _op(i, at)
            await js.publish(
                ops(world, "ada"),
                encode(op),
                timeout=2,
                headers={api.Header.MSG_ID: op.op_id},
            )
            acked.append(op.op_id)
    except (nats.errors.Error, OSError, TimeoutError):
        pass  # the server went down mid-write: what was acknowledged counts
    finally:
        with contextlib.suppress(nats.errors.Error, OSError):
            await nc.close()


def _declare(tmp_path: Path, env: dict[str, str], world: str) -> None:
    """Load the example crew as ``world`` through the CLI (as henry, its admin)."""
    decl = CREW_TOML.read_text().replace('id = "enterprise"', f'id = "{world}"', 1)
    (tmp_path / "crew.toml").write_text(decl)
    subprocess.run(
        [WORLDLINE, "world", "load", str(tmp_path / "crew.toml"), "--agent", "henry"],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )


def _op_ids(exported: str) -> list[str]:
    """The writer's op ids in ``worldline export`` output, in log order."""
    return [
        line.split('"op_id":"', 1)[1].split('"', 1)[0]
        for line in exported.splitlines()
        if '"op_id":"op-' in line
    ]


def replay_until_match(
    env: dict[str, str], wait: float, every: float = 1.0
) -> subprocess.CompletedProcess[str]:
    """``worldline replay --json`` until the live hash matches the log's (or ``wait``
    runs out): the last run."""
    deadline = time.monotonic() + wait
    while True:
        replayed = subprocess.run(
            [WORLDLINE, "replay", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if '"match":true' in replayed.stdout or time.monotonic() > deadline:
            return replayed
        time.sleep(every)


def _settle(
    env: dict[str, str], wait: float
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """Replay until the live state matches (or ``wait`` runs out), then export."""
    replayed = replay_until_match(env, wait)
    exported = subprocess.run(
        [WORLDLINE, "export"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return replayed, exported


async def _round(
    url: str, first: int, acked: list[str], delay: float, pid: int
) -> None:
    """Write ops, and kill -9 worldline (and so its nats-server) ``delay`` in."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(_write, url, first, 400, acked)
        await anyio.sleep(delay)
        os.kill(pid, signal.SIGKILL)


def test_kill_9_mid_write_loses_and_doubles_nothing(tmp_path: Path) -> None:
    world_file = tmp_path / "crew.toml"
    world_file.write_text(
        CREW_TOML.read_text().replace('id = "enterprise"', f'id = "{WORLD}"', 1)
    )
    data = tmp_path / "data"
    rng = random.Random(ROUNDS)
    acked: list[str] = []
    kills = 0
    for round_ in range(ROUNDS):
        proc, url = _start(data, world_file)

        delay = rng.uniform(0.02, 0.4)
        anyio.run(_round, url, round_ * 1000, acked, delay, proc.pid, backend="asyncio")
        proc.wait()
        if proc.stdout:
            proc.stdout.close()
        kills += 1
    proc, url = _start(data, world_file)
    env = {**os.environ, "WORLDLINE_NATS": url, "WORLDLINE_WORLD": WORLD}
    try:
        replayed, exported = _settle(env, 60)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
        if proc.stdout:
            proc.stdout.close()
    logged = [line for line in exported.stdout.splitlines() if '"op-' in line]
    ids = [line.split('"op_id":"', 1)[1].split('"', 1)[0] for line in logged]
    print(f"crash: {kills} kills, {len(acked)} ops acknowledged, {len(ids)} in the log")
    assert set(acked) <= set(ids)  # nothing acknowledged was lost
    assert len(ids) == len(set(ids))  # nothing recorded twice
    assert '"match":true' in replayed.stdout, replayed.stdout  # applied exactly once


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _actor(name: str, url: str, data: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [WORLDLINE, "actor", name, "--nats", url, "--data", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    assert "consuming" in proc.stdout.readline()
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.stdout:
        proc.stdout.close()


def test_kill_9_of_single_actors_and_of_the_server(tmp_path: Path) -> None:
    from worldline.actors.runtime.embedded import EmbeddedNats

    port = _free_port()
    server = EmbeddedNats(tmp_path / "nats", port=port)
    url = server.start()
    data = tmp_path / "data"
    names = ("fusion", "materializer", "projector")
    actors = {name: _actor(name, url, data) for name in names}
    acked: list[str] = []
    rng = random.Random(7)
    kills = 0
    try:
        env = {**os.environ, "WORLDLINE_NATS": url, "WORLDLINE_WORLD": WORLD}
        _declare(tmp_path, env, WORLD)
        for round_ in range(ROUNDS + 1):
            victim = "server" if round_ == ROUNDS else rng.choice(names)
            pid = server.pid if victim == "server" else actors[victim].pid
            assert pid is not None
            delay = rng.uniform(0.02, 0.3)
            anyio.run(_round, url, round_ * 1000, acked, delay, pid, backend="asyncio")
            kills += 1
            if victim == "server":
                server.stop()  # reaps the killed process
                server = EmbeddedNats(tmp_path / "nats", port=port)
                server.start()
            else:
                _kill(actors[victim])
                actors[victim] = _actor(victim, url, data)
        replayed, exported = _settle(env, 90)
    finally:
        for proc in actors.values():
            _kill(proc)
        server.stop()
    ids = _op_ids(exported.stdout)
    lost = set(acked) - set(ids)
    print(
        f"crash (actors + server): {kills} kills, {len(acked)} acknowledged, "
        f"{len(lost)} lost, {len(ids) - len(set(ids))} doubled"
    )
    assert not lost
    assert len(ids) == len(set(ids))
    assert '"match":true' in replayed.stdout, replayed.stdout

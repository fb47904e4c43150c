"""Kill -9 the materializer that holds the lease: its hot standby takes over within
seconds with the same state hash, and no acknowledged op is lost or applied twice.
(Runs in CI; a few seconds per takeover.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import nats
import pytest

from tests.reliability.test_crash import (
    _declare,
    _kill,
    _op_ids,
    _write,
    replay_until_match,
)
from worldline.protocols.messages import LEASE_VALUE
from worldline.protocols.subjects import LEASES, lease_key

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.crash

WORLDLINE = str(Path(sys.executable).parent / "worldline")
KEY = lease_key("materializer", 0, 1)
_OURS = re.compile(r"op-([bes])(\d+)")  # the writer's op ids (see _op)


def _materializer(
    url: str, data: Path, replica: str, partition: str = "0/1"
) -> subprocess.Popen[str]:
    data.mkdir(parents=True, exist_ok=True)
    log = (data / f"{replica}.log").open("a")  # kept for a failure's autopsy
    proc = subprocess.Popen(
        [
            WORLDLINE,
            "actor",
            "materializer",
            "--replica",
            replica,
            "--partition",
            partition,
            "--nats",
            url,
            "--data",
            str(data / replica),
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    log.close()  # the child has its own descriptor
    assert proc.stdout is not None
    assert "consuming" in proc.stdout.readline()
    return proc


async def _holder(url: str, key: str = KEY) -> str:
    nc = await nats.connect(url)
    try:
        kv = await nc.jetstream().key_value(LEASES.bucket)
        entry = await kv.get(key)
        assert entry.value is not None
        return LEASE_VALUE.decode(entry.value).holder
    finally:
        await nc.close()


def _replay(env: dict[str, str], wait: float) -> dict[str, object]:
    """``worldline replay --json`` until the live hash matches the log's (or time
    runs out): the live hash comes from whichever replica holds the lease."""
    done = replay_until_match(env, wait, every=0.5)
    if not done.stdout.strip():
        raise AssertionError(f"replay failed: {done.stderr}")
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _takeover(url: str, dead: str, alive: str) -> float:
    """Seconds from now until ``alive`` holds the lease ``dead`` held."""
    start = time.monotonic()
    assert anyio.run(_holder, url, backend="asyncio") == f"materializer-{dead}"
    while anyio.run(_holder, url, backend="asyncio") != f"materializer-{alive}":
        assert time.monotonic() - start < 20, "the standby never took over"
        time.sleep(0.1)
    return time.monotonic() - start


@pytest.fixture
def others(nats_url: str, tmp_path: Path) -> Iterator[None]:
    """Fusion and a projector, in processes of their own."""
    procs = [
        subprocess.Popen(
            [WORLDLINE, "actor", name, "--nats", nats_url, "--data", str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for name in ("fusion", "projector")
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert "consuming" in proc.stdout.readline()
    yield
    for proc in procs:
        _kill(proc)


@pytest.mark.usefixtures("others")
@pytest.mark.timeout(180)
def test_standby_takes_over_with_the_same_state_and_loses_nothing(
    nats_url: str, tmp_path: Path
) -> None:
    world = "lease"
    env = {**os.environ, "WORLDLINE_NATS": nats_url, "WORLDLINE_WORLD": world}
    data = tmp_path / "replicas"
    replicas = {"a": _materializer(nats_url, data, "a")}
    replicas["b"] = _materializer(nats_url, data, "b")  # starts as the standby
    acked: list[str] = []
    try:
        _declare(tmp_path, env, world)
        # A quiet takeover: the standby's state is the holder's, hash for hash.
        anyio.run(_write_world, nats_url, world, 0, 300, acked, backend="asyncio")
        before = _replay(env, 60)
        assert before["match"], before
        _kill(replicas.pop("a"))
        took = _takeover(nats_url, "a", "b")
        after = _replay(env, 30)
        assert after["live_hash"] == before["live_hash"]

        # A takeover mid-write: the old holder comes back as the standby, the new
        # holder is killed while ops stream in.
        replicas["a"] = _materializer(nats_url, data, "a")
        anyio.run(_write_and_kill, nats_url, world, acked, replicas["b"].pid)
        _kill(replicas.pop("b"))
        took_again = _takeover(nats_url, "b", "a")
        anyio.run(_write_world, nats_url, world, 2000, 100, acked, backend="asyncio")
        final = _replay(env, 60)
        exported = subprocess.run(
            [WORLDLINE, "export"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        ids = _op_ids(exported.stdout)
        expected = _expected_beliefs(ids)
        projected = _projected_beliefs(env, expected)
    finally:
        for proc in replicas.values():
            _kill(proc)
    print(
        f"lease: takeovers in {took:.1f}s and {took_again:.1f}s, "
        f"{len(acked)} acknowledged, {len(set(acked) - set(ids))} lost"
    )
    assert took < 8
    assert took_again < 8
    assert set(acked) <= set(ids)
    assert len(ids) == len(set(ids))
    assert final["match"], final  # the new holder's state is the log's, exactly
    # What the holders published reached the projector: every belief, and every
    # piece of evidence, once (a standby that dropped outputs the dead holder had
    # not sent would leave gaps here).
    assert projected == expected


def _expected_beliefs(ids: list[str]) -> dict[str, int]:
    """belief id -> evidence count, from the op ids in the log (see ``_op``)."""
    ours = [(m[1], int(m[2])) for m in map(_OURS.fullmatch, ids) if m]
    beliefs = {f"b-{n}": 0 for kind, n in ours if kind == "b"}
    for kind, n in ours:
        target = f"b-{n - 1}"
        if kind == "e" and target in beliefs:  # else it was dead-lettered
            beliefs[target] += 1
    return beliefs


def _projected_beliefs(env: dict[str, str], expected: dict[str, int]) -> dict[str, int]:
    """belief id -> evidence count as the projector serves them, once it caught up
    (or after 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        listed = subprocess.run(
            [WORLDLINE, "list", "--json", "--limit", "10000"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        got = {b["id"]: b.get("evidence_count", 0) for b in json.loads(listed.stdout)}
        if got == expected or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


async def _write_world(
    url: str, world: str, first: int, count: int, acked: list[str]
) -> None:
    await _write(url, first, count, acked, world=world)


async def _write_and_kill(url: str, world: str, acked: list[str], pid: int) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(_write_world, url, world, 1000, 400, acked)
        await anyio.sleep(0.2)
        os.kill(pid, 9)

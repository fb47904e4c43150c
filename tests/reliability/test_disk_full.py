"""A full disk under ``worldline up``'s nats-server heals without a restart of ``up``.

The server's JetStream store lives on a 32 MiB tmpfs. A filler file and a burst of
ops fill it: the server cannot write, and (nats-server keeps a stream's write error
until it restarts) every later write goes unanswered, even after the filler is
removed. ``up`` must notice, wait for room, restart its server on the same URL, and
the actors must carry on: writes succeed again, nothing acknowledged is lost, and
the live state matches a replay of the log. Needs root (mount); skipped otherwise.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import nats
import nats.errors
import pytest
from nats.js import api

from tests.reliability.test_crash import replay_until_match
from worldline.protocols.messages import AddBelief, encode
from worldline.protocols.subjects import ops

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.crash

WORLDLINE = str(Path(sys.executable).parent / "worldline")
WORLD = "diskfull"


@pytest.fixture
def small_store(tmp_path: Path) -> Iterator[Path]:
    """``<data>/nats/jetstream`` on a 32 MiB tmpfs (the data folder is ``tmp_path /
    "data"``)."""
    store = tmp_path / "data" / "nats" / "jetstream"
    store.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(store)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs (needs root): {mounted.stderr}")
    try:
        yield store
    finally:
        subprocess.run(["umount", "-l", str(store)], check=False)


async def _burst(url: str, first: int, acked: list[str], limit: int) -> int:
    """Publish ops until ``limit`` or until the server stops confirming them."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    at = datetime.now(UTC)
    failures = 0
    try:
        for i in range(first, first + limit):
            op = AddBelief(
                op_id=f"op-{i}",
                author="ada",
                at=at,
                belief_id=f"b-{i}",
                text=f"belief {i} " + "x" * 400,
            )
            try:
                await js.publish(
                    ops(WORLD, "ada"),
                    encode(op),
                    timeout=1,
                    headers={api.Header.MSG_ID: op.op_id},
                )
            except (nats.errors.Error, TimeoutError):
                failures += 1
                if failures >= 3:
                    break
                continue
            acked.append(op.op_id)
    finally:
        with contextlib.suppress(nats.errors.Error, OSError):
            await nc.close()
    return failures


def _add(env: dict[str, str], text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WORLDLINE, "add", text, "--timeout", "5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# Its own waits add up past the suite's 60 s per test on a busy machine: up to 60 s
# for writes to resume, then a replay that may wait 60 s for the live hash.
@pytest.mark.timeout(240)
def test_writes_resume_after_a_full_disk_is_freed(
    small_store: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    err = (tmp_path / "up.err").open("w")
    up = subprocess.Popen(
        [WORLDLINE, "up", "--data", str(data)],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )
    try:
        assert up.stdout is not None
        url = up.stdout.readline().split()[1]
        assert up.stdout.readline() == "ready\n"
        env = {**os.environ, "WORLDLINE_NATS": url, "WORLDLINE_WORLD": WORLD}
        assert _add(env, "before the disk fills").returncode == 0
        stat = os.statvfs(small_store)
        filler = small_store / "filler"
        filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 2 * 2**20))
        acked: list[str] = []
        failures = anyio.run(_burst, url, 0, acked, 20_000)
        assert failures, f"all {len(acked)} writes fit: the disk never filled"
        full = _add(env, "while the disk is full")
        assert full.returncode == 4, full.stderr
        filler.unlink()
        freed = time.monotonic()
        deadline = freed + 60
        tries = 0
        while True:
            # A try that timed out may still land later: each try adds its own
            # belief, so a late one cannot make the next a conflict.
            tries += 1
            again = _add(env, f"after the disk is freed, try {tries}")
            if again.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)
        recovered = time.monotonic() - freed
        assert again.returncode == 0, again.stderr
        assert up.poll() is None  # the same `up`, never restarted
        after: list[str] = []
        assert anyio.run(_burst, url, 100_000, after, 200) == 0
        replayed = replay_until_match(env, 60)
        assert '"match":true' in replayed.stdout, replayed.stdout
        exported = subprocess.run(
            [WORLDLINE, "export"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        logged = {
            line.split('"op_id":"', 1)[1].split('"', 1)[0]
            for line in exported.stdout.splitlines()
            if '"op_id":"op-' in line
        }
        assert set(acked + after) <= logged  # nothing acknowledged was lost
        print(
            f"disk full: {len(acked)} ops acknowledged before the disk filled, "
            f"writes again {recovered:.1f}s after space was freed, "
            f"{len(after)} more acknowledged after"
        )
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
        if up.stdout is not None:
            up.stdout.close()
        err.close()
    log = (tmp_path / "up.err").read_text()
    assert "restarting nats-server" in log, log[-2000:]

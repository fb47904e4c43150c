"""``worldline up`` says who can reach the server it starts (issue 14, item 3): the
embedded nats-server binds 127.0.0.1 and, without a server config, requires no
credentials, so every local process can act as any agent. The notice goes to stderr;
stdout keeps its ``nats: URL`` then ``ready`` lines, which scripts and tests read."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from worldline.cli.operate import _reach

pytestmark = pytest.mark.cli

WORLDLINE = str(Path(sys.executable).parent / "worldline")


def test_up_says_its_server_is_loopback_only_and_open_to_local_processes(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen(
        [WORLDLINE, "up", "--data", str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        nats_line = proc.stdout.readline()
        assert nats_line.startswith("nats: nats://127.0.0.1:"), nats_line
        url = nats_line.split()[1]
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
        notices = [
            line for line in proc.stderr.read().splitlines() if line.startswith("nats:")
        ]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert notices == [
        f"nats: {url} (loopback only: every local process can act as any agent; "
        "see deploy/credentials.md for a secured server)"
    ]


def test_up_with_a_server_config_points_at_it_instead(tmp_path: Path) -> None:
    config = tmp_path / "auth.conf"
    line = _reach("nats://127.0.0.1:4222", config)
    assert line == (
        f"nats: nats://127.0.0.1:4222 (loopback only; clients authenticate as "
        f"{config} says)"
    )
    assert "any agent" not in line

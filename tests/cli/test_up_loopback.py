"""``worldline up`` says who can reach the server it starts (issue 14, item 3): the
embedded nats-server binds 127.0.0.1 and, without a server config, requires no
credentials, so every local process can act as any agent. The notice goes to stderr;
stdout keeps its ``nats: URL`` then ``ready`` lines, which scripts and tests read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from worldline.cli.notices import discovery_hint, reach

pytestmark = pytest.mark.cli

WORLDLINE = str(Path(sys.executable).parent / "worldline")


def test_up_says_its_server_is_loopback_only_and_open_to_local_processes(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "WORLDLINE_DATA"}
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [WORLDLINE, "up", "--data", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
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
        stderr = proc.stderr.read().splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    # The URL is said once (stdout), not again on stderr (issue 28: a terminal
    # showed two `nats:` lines).
    assert [line for line in stderr if line.startswith("nats:")] == []
    assert (
        "access: loopback only: every local process can act as any agent; "
        "see deploy/credentials.md for a secured server"
    ) in stderr
    # A --data folder clients do not look in: up says what to export (issue 28).
    hints = [line for line in stderr if line.startswith("clients: ")]
    assert len(hints) == 1, stderr
    assert f"export WORLDLINE_DATA={data.resolve()}" in hints[0]
    assert f"WORLDLINE_NATS={url}" in hints[0]


def test_up_in_the_folder_clients_read_needs_no_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLDLINE_DATA", str(tmp_path))
    assert discovery_hint(tmp_path, "nats://127.0.0.1:4222") == ""
    assert discovery_hint(tmp_path / "other", "nats://127.0.0.1:4222").startswith(
        "clients: export WORLDLINE_DATA="
    )


def test_up_with_a_server_config_points_at_it_instead(tmp_path: Path) -> None:
    config = tmp_path / "auth.conf"
    line = reach(config)
    assert line == f"access: loopback only; clients authenticate as {config} says"
    assert "any agent" not in line

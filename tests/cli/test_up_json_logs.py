"""``worldline up --log-format json`` (issue 28): every line on stderr is one JSON
object, the notice of who can reach the embedded server included (it was one
plain-text line first)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cli

WORLDLINE = str(Path(sys.executable).parent / "worldline")


def test_up_with_json_logs_writes_only_json_on_stderr(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [WORLDLINE, "up", "--data", str(tmp_path / "data"), "--log-format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert proc.stdout.readline().startswith("nats: nats://127.0.0.1:")
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
        lines = proc.stderr.read().splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    entries = [json.loads(line) for line in lines]  # a plain line fails here
    notices = [e for e in entries if "loopback only" in e["message"]]
    assert len(notices) == 1, entries
    assert notices[0]["level"] == "WARNING"
    assert notices[0]["message"].startswith("access: loopback only")

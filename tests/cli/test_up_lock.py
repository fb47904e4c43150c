"""One ``worldline up`` per data folder, one ``worldline actor`` per store."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cli

WORLDLINE = str(Path(sys.executable).parent / "worldline")


def _up(data: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [WORLDLINE, "up", "--data", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().split()[1]
    assert proc.stdout.readline() == "ready\n"
    return proc, url


def _stop(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_second_up_on_the_same_data_folder_is_refused(tmp_path: Path) -> None:
    # Before: the second `up` started a second server and actor set on the same
    # stores, and on exit deleted the first one's URL file.
    data = tmp_path / "data"
    first, url = _up(data)
    try:
        second = subprocess.Popen(
            [WORLDLINE, "up", "--data", str(data)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = second.communicate(timeout=30)
        finally:
            if second.poll() is None:  # the old code: it runs; stop it like a user
                second.send_signal(signal.SIGINT)
                second.communicate(timeout=20)
        assert second.returncode == 1, (out, err)
        assert out == ""  # no second server
        assert err.count("\n") == 1, err
        assert "Traceback" not in err
        assert f"data folder {data} is in use by worldline up" in err
        assert f"pid {first.pid}" in err
        assert url in err
        assert "--data" in err  # the fix
        assert (data / "nats.url").read_text() == url + "\n"  # still there
        # A second instance of an actor the first `up` runs, on its store: refused.
        actor = subprocess.run(
            [WORLDLINE, "actor", "fusion", "--nats", url, "--data", str(data)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert actor.returncode == 1, actor.stderr
        assert (
            f"the store of actor fusion ({data / 'actors' / 'fusion'})" in actor.stderr
        )
        assert f"pid {first.pid}" in actor.stderr
        assert first.poll() is None  # the first one runs on
    finally:
        assert _stop(first) == 0
    assert not (data / "nats.url").exists()  # its own file, removed on exit
    again, _ = _up(data)  # and the folder is free again
    assert _stop(again) == 0

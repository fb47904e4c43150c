"""Actor logs: time, level and actor on every line, as text or JSON objects."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Final

import anyio
import anyio.lowlevel
import pytest

from worldline.actors.runtime.logs import (
    FORMAT_ENV,
    JsonFormatter,
    bind_actor,
    log_format,
    setup_logging,
)

WORLDLINE: Final = str(Path(sys.executable).parent / "worldline")
TEXT_LINE: Final = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (?P<level>[A-Z]+) (?P<actor>\S+) "
    r"(?P<logger>[\w.]+): (?P<message>.*)$"
)


def test_the_format_comes_from_the_option_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(FORMAT_ENV, raising=False)
    assert log_format() == "text"
    monkeypatch.setenv(FORMAT_ENV, "JSON")
    assert log_format() == "json"
    assert log_format("text") == "text"
    monkeypatch.setenv(FORMAT_ENV, "yaml")
    with pytest.raises(ValueError, match=r"WORLDLINE_LOG_FORMAT='yaml'.*text, json"):
        log_format()


async def test_each_task_logs_under_its_own_actor() -> None:
    out = io.StringIO()
    handler = setup_logging(fmt="text", stream=out)
    assert handler is not None
    log = logging.getLogger("worldline.test")

    async def actor(name: str) -> None:
        bind_actor(name)
        await anyio.lowlevel.checkpoint()
        log.warning("%s: working", name)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(actor, "fusion")
            tg.start_soon(actor, "projector-0")
        log.warning("outside")
    finally:
        logging.getLogger().removeHandler(handler)
    lines = [TEXT_LINE.match(line) for line in out.getvalue().splitlines()]
    assert all(lines), out.getvalue()
    got = {(m["actor"], m["message"]) for m in lines if m}
    assert got == {
        ("fusion", "fusion: working"),
        ("projector-0", "projector-0: working"),
        ("-", "outside"),
    }
    assert {m["level"] for m in lines if m} == {"WARNING"}


def test_json_lines_are_objects_with_the_traceback_kept() -> None:
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        record = logging.LogRecord(
            "worldline.actor", logging.ERROR, __file__, 1, "failed %s", ("x",),
            sys.exc_info(),
        )  # fmt: skip
    record.actor = "fusion"
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "ERROR"
    assert entry["actor"] == "fusion"
    assert entry["logger"] == "worldline.actor"
    assert entry["message"] == "failed x"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"])
    assert "RuntimeError: boom" in entry["exc"]


def _actor_lines(nats_url: str, data: Path, *extra: str, env: str = "") -> list[str]:
    """Start `worldline actor fusion`, wait until it consumes, stop it, return its
    stderr lines."""
    environ = {k: v for k, v in os.environ.items() if k != FORMAT_ENV}
    if env:
        environ[FORMAT_ENV] = env
    proc = subprocess.Popen(
        [WORLDLINE, "actor", "fusion", "--nats", nats_url, "--data", str(data), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == f"fusion: consuming from {nats_url}\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    return err.splitlines()


@pytest.mark.nats
def test_the_actor_command_logs_json_or_text(nats_url: str, tmp_path: Path) -> None:
    entries = [
        json.loads(line)
        for line in _actor_lines(nats_url, tmp_path, "--log-format", "json")
    ]
    consuming = [e for e in entries if e["message"] == "fusion: consuming"]
    assert consuming, entries
    assert consuming[0]["actor"] == "fusion"
    assert consuming[0]["level"] == "INFO"
    # The environment asks for it as well; the option wins over it.
    assert json.loads(_actor_lines(nats_url, tmp_path, env="json")[0])["time"]
    text = _actor_lines(nats_url, tmp_path, "--log-format", "text", env="json")
    matches = [TEXT_LINE.match(line) for line in text]
    assert all(matches), text
    assert any(
        m["actor"] == "fusion" and m["message"] == "fusion: consuming"
        for m in matches
        if m
    )


def test_a_bad_format_in_the_environment_is_one_clear_line(tmp_path: Path) -> None:
    environ = dict(os.environ, **{FORMAT_ENV: "xml"})
    done = subprocess.run(
        [WORLDLINE, "actor", "fusion", "--nats", "nats://127.0.0.1:1"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "worldline: WORLDLINE_LOG_FORMAT='xml' is not a log format; use one of "
        "text, json"
    ]


def test_up_logs_each_actor_by_name_in_json(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if k != FORMAT_ENV}
    environ[FORMAT_ENV] = "json"
    proc = subprocess.Popen(
        [WORLDLINE, "up", "--data", str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().startswith("nats: ")
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    # Every line is a JSON record but `up`'s one notice about its server.
    lines = [line for line in err.splitlines() if not line.startswith("nats: ")]
    entries = [json.loads(line) for line in lines]
    consuming = {e["actor"] for e in entries if e["message"].endswith(": consuming")}
    assert consuming == {
        "extractor",
        "fusion",
        "materializer",
        "projector-0",
        "simulator",
    }
    assert all(e["time"] and e["level"] for e in entries)

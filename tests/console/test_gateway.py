"""The gateway's parts that need no browser: the metrics labels stay bounded, the
feed wakes its waiters, and the options of the `console` verb and `mcp --http` are
checked before anything starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from worldline.cli import main
from worldline.cli.common import EXIT_USAGE
from worldline.console.feed import Feed
from worldline.console.gateway import route_of

if TYPE_CHECKING:
    from pathlib import Path


def test_metrics_label_a_request_by_route_never_by_id() -> None:
    assert route_of("/console/api/beliefs/b-123") == "console"
    assert route_of("/mcp") == "mcp"
    assert route_of("/readyz") == "readyz"
    assert route_of("/wp-admin/x") == "other"
    assert route_of("/") == "other"


async def test_the_feed_wakes_a_waiter_and_times_out_without_a_change() -> None:
    feed = Feed()
    assert not await feed.wait_past(0, within=0.05)
    woke: list[bool] = []

    async def waiter() -> None:
        woke.append(await feed.wait_past(0, within=5))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.01)
        feed.bump("belief")
    assert woke == [True]
    assert feed.version == 1
    assert feed.kinds == {"belief"}


def test_log_format_is_for_the_http_gateway_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["mcp", "--log-format", "json"]) == EXIT_USAGE
    assert "--log-format is for --http only" in capsys.readouterr().err


def test_the_console_verb_needs_a_tokens_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["console"]) == EXIT_USAGE
    assert "worldline: console needs --tokens FILE" in capsys.readouterr().err


def test_console_credentials_that_cannot_be_read_stop_the_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[agents.ada]\ntoken_sha256 = "{"0" * 64}"\n')
    missing = tmp_path / "nowhere.creds"
    argv = ["console", "--tokens", str(tokens), "--console-creds", str(missing)]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == EXIT_USAGE
    said = capsys.readouterr().err
    assert said.startswith("worldline: --console-creds: cannot read credentials")
    assert str(missing) in said

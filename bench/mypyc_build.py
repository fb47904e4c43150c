"""The actors' per-op path compiled with mypyc, against the same code interpreted:
in-core ops per CPU second of fusion, the materializer and the projector, and
whether both builds stage the same bytes (issue 24's question "does compiling reach
35,000 ops per CPU second?"; the answer, in docs/benchmarks.md, is no).

Run: ``python bench/mypyc_build.py [--ops 5000] [--runs 5] [--out DIR]`` (needs mypy,
which ships mypyc, and a C compiler; about a minute to build). It copies this
checkout's ``worldline/`` (and ``tests/``, ``examples/``, ``pyproject.toml``, so
``cd DIR && PYTHONPATH=DIR python -m pytest tests/core`` runs the tests against the
compiled build) into ``--out`` (a temporary folder by default, removed after), makes
there the edits mypyc needs, compiles ``MODULES`` in place, then applies the pipeline
bench's ops (``pipeline.make_op``) through each actor's ``Store.apply_batch`` in a
fresh process per run, alternating the interpreted checkout and the compiled copy.
``PYTHONPATH=DIR python bench/cost.py`` and ``PYTHONPATH=DIR python bench/pipeline.py``
measure the compiled copy with the other benches.

The edits (this checkout is never changed):

- mypyc creates a class it cannot compile natively (a ``msgspec.Struct``) by calling
  its metaclass without the class keywords (python/mypy#21938): ``frozen``, ``tag``,
  ``tag_field``, ``kw_only``, ``gc`` and ``array_like`` vanish without an error, so a
  stored ``Card`` loses its tag and ``_HeldHead`` fails to import (and a
  ``msgspec.field`` default fails the compiled class body's type check). Every
  struct and every class with keywords in a compiled module moves to an interpreted
  sibling ``<module>_structs`` and is imported back under its name;
- a compiled (native) class takes no weak reference: the read limiter that
  ``runtime/serve.py`` keeps per ``Store`` in a ``WeakKeyDictionary`` is kept on the
  store instead (only the pipeline bench's live actors serve).

Left interpreted: the wire structs (``worldline/protocols/messages.py`` and the
like: nothing but classes with keywords) and ``runtime/memory.py`` (tests subclass
``MemoryState``; an interpreted class cannot subclass a compiled one).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worldline.actors.runtime.spec import Input

__all__ = ["MODULES", "main", "prepare"]

ROOT = Path(__file__).resolve().parent.parent
ACTORS = ("fusion", "materializer", "projector")

# What runs per op in bench/pipeline.py's (d) stage (cProfile of the interpreted
# build: every worldline function called once or more per op), less runtime/memory.py.
MODULES = (
    "worldline/actors/belief_model/charter.py",
    "worldline/actors/belief_model/contradictions.py",
    "worldline/actors/belief_model/posterior.py",
    "worldline/actors/belief_model/text.py",
    "worldline/actors/fusion/answers.py",
    "worldline/actors/fusion/core.py",
    "worldline/actors/fusion/declared.py",
    "worldline/actors/fusion/posteriors.py",
    "worldline/actors/fusion/records.py",
    "worldline/actors/fusion/slots.py",
    "worldline/actors/fusion/sources.py",
    "worldline/actors/materializer/core.py",
    "worldline/actors/materializer/crew.py",
    "worldline/actors/materializer/keys.py",
    "worldline/actors/materializer/ops_end.py",
    "worldline/actors/materializer/service.py",
    "worldline/actors/projector/beliefs.py",
    "worldline/actors/projector/calibration.py",
    "worldline/actors/projector/clocks.py",
    "worldline/actors/projector/context.py",
    "worldline/actors/projector/contradictions.py",
    "worldline/actors/projector/core.py",
    "worldline/actors/projector/history.py",
    "worldline/actors/projector/index.py",
    "worldline/actors/projector/lexical.py",
    "worldline/actors/projector/slots.py",
    "worldline/actors/projector/views.py",
    "worldline/actors/runtime/keys.py",
    "worldline/actors/runtime/store.py",
    "worldline/protocols/decode.py",
    "worldline/protocols/subjects.py",
)
COPIED = ("worldline", "tests", "examples", "pyproject.toml", "README.md")
_SERVE_WEAK = """_limiters: weakref.WeakKeyDictionary[Store, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)
"""
_SERVE_GET = """    limiter = _limiters.get(store)
    if limiter is None:
        limiter = _limiters[store] = anyio.CapacityLimiter(READ_THREADS)
"""
_SERVE_ON_STORE = """    limiter = store.read_limiter
    if not isinstance(limiter, anyio.CapacityLimiter):
        limiter = store.read_limiter = anyio.CapacityLimiter(READ_THREADS)
"""


# --- the compiled copy --------------------------------------------------------------


def keyword_classes(source: str) -> list[ast.ClassDef]:
    """Top-level classes defined with class keywords (``frozen=True`` and the like),
    and every ``msgspec.Struct`` (a field's ``msgspec.field(...)`` default fails the
    compiled module's type check of the class body)."""
    tree = ast.parse(source)
    return [
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and (
            any(k.arg != "metaclass" for k in node.keywords)
            or any(ast.unparse(b).endswith("Struct") for b in node.bases)
        )
    ]


def move_keyword_classes(out: Path, module: str) -> list[str]:
    """Move the classes of ``module`` (a path under ``out``) that
    :func:`keyword_classes` finds into ``<stem>_structs.py`` beside it (with a copy
    of the module's top-level imports) and import them back; their names."""
    path = out / module
    source = path.read_text()
    classes = keyword_classes(source)
    if not classes:
        return []
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    imports = [
        "".join(lines[n.lineno - 1 : n.end_lineno])
        for n in tree.body
        if isinstance(n, ast.Import | ast.ImportFrom)
    ]
    moved: list[str] = []
    keep = list(lines)
    for node in sorted(classes, key=lambda n: n.lineno, reverse=True):
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        moved.insert(0, "".join(lines[start : node.end_lineno]))
        del keep[start : node.end_lineno]
    names = [n.name for n in classes]
    structs = path.with_name(f"{path.stem}_structs.py")
    header = f'"""{", ".join(names)}, moved out of {path.name} for mypyc."""\n'
    structs.write_text(header + "".join(imports) + "\n\n" + "\n\n".join(moved))
    last_import = max(
        n.end_lineno or n.lineno
        for n in tree.body
        if isinstance(n, ast.Import | ast.ImportFrom)
    )
    removed_before = sum(
        (n.end_lineno or n.lineno) - n.lineno + 1
        for n in classes
        if n.lineno < last_import
    )
    package = ".".join(Path(module).parent.parts)
    at = last_import - removed_before
    keep.insert(at, f"from {package}.{structs.stem} import {', '.join(names)}\n")
    path.write_text("".join(keep))
    return names


def prepare(out: Path) -> dict[str, list[str]]:
    """Copy this checkout into ``out`` and make the edits mypyc needs; what moved."""
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, out / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, out / name)
    moved = {}
    for module in MODULES:
        names = move_keyword_classes(out, module)
        if names:
            moved[module] = names
    serve = out / "worldline/actors/runtime/serve.py"
    text = serve.read_text()
    if _SERVE_WEAK not in text or _SERVE_GET not in text:
        raise SystemExit(
            f"{serve}: the weak map of read limiters changed; update the edit in "
            "bench/mypyc_build.py (a compiled Store takes no weak reference)"
        )
    serve.write_text(text.replace(_SERVE_WEAK, "").replace(_SERVE_GET, _SERVE_ON_STORE))
    store = out / "worldline/actors/runtime/store.py"
    anchor = "        self._gate = Gate()\n"
    text = store.read_text()
    if anchor not in text:
        raise SystemExit(f"{store}: no `self._gate = Gate()` to add read_limiter after")
    store.write_text(
        text.replace(anchor, anchor + "        self.read_limiter: object = None\n", 1)
    )
    _no_keywords_left(out)
    return moved


def _no_keywords_left(out: Path) -> None:
    for module in MODULES:
        left = keyword_classes((out / module).read_text())
        if left:
            raise SystemExit(f"{module}: {[c.name for c in left]} were not moved")


def build(out: Path) -> None:
    """Compile ``MODULES`` in place in ``out`` (mypyc reads its pyproject's mypy
    settings: strict)."""
    script = (
        "import sys\n"
        "from setuptools import setup\n"
        "from mypyc.build import mypycify\n"
        f"setup(name='worldline-mypyc', ext_modules=mypycify({list(MODULES)!r},"
        " opt_level='3'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(out)}
    cmd = [sys.executable, "-c", script, "build_ext", "--inplace"]
    done = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(
            f"mypyc build failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )


# --- one measured process -----------------------------------------------------------


def child(n: int) -> dict[str, object]:
    """Apply ``n`` bench ops through the three cores in this process (as pipeline.py's
    (d) stage, with a fixed clock): ops per CPU second of each and a digest of every
    staged message (subject and payload)."""
    import hashlib
    import time
    from datetime import UTC, datetime

    sys.path.insert(0, str(ROOT / "bench"))
    import pipeline as bench

    from worldline.actors.registry import build as spec
    from worldline.actors.runtime import store as store_module
    from worldline.actors.runtime.deliveries import Delivery
    from worldline.actors.runtime.store import Store
    from worldline.protocols.messages import encode
    from worldline.protocols.subjects import DERIVED_CHANNEL, channel_of, ops

    subject = ops("apply", bench.AGENT)
    (fusion_in,) = spec("fusion").inputs
    ops_in, posteriors_in = spec("materializer").inputs
    (projector_in,) = spec("projector").inputs
    now = datetime(2026, 6, 1, tzinfo=UTC)
    deliveries = [
        Delivery(i + 1, subject, encode(bench.make_op("apply", i))) for i in range(n)
    ]
    digest = hashlib.sha256()
    rates: dict[str, float] = {}

    def feed(
        store: Store, inp: Input[Any], batch: list[Delivery], keep: str
    ) -> list[Delivery]:
        handed: list[Delivery] = []
        for start in range(0, len(batch), bench.FETCH):
            result = store.apply_batch(inp, batch[start : start + bench.FETCH], now)
            store.clear_outbox([item.key for item in result.outbox])
            for item in result.outbox:
                digest.update(item.subject.encode() + b"\0" + item.payload)
                if keep in ("", channel_of(item.subject)):
                    handed.append(Delivery(len(handed) + 1, item.subject, item.payload))
        return handed

    with tempfile.TemporaryDirectory(prefix="wl-mypyc-") as tmp:
        stores = {a: Store(Path(tmp) / a, actor=a) for a in ACTORS}
        cpu = time.thread_time()
        posteriors = feed(stores["fusion"], fusion_in, deliveries, DERIVED_CHANNEL)
        rates["fusion"] = n / (time.thread_time() - cpu)
        cpu = time.thread_time()
        changes = feed(stores["materializer"], ops_in, deliveries, "")
        changes += feed(stores["materializer"], posteriors_in, posteriors, "")
        rates["materializer"] = n / (time.thread_time() - cpu)
        cpu = time.thread_time()
        feed(stores["projector"], projector_in, changes, "")
        rates["projector"] = n / (time.thread_time() - cpu)
        for store in stores.values():
            store.close()
    compiled = Path(store_module.__file__ or "").suffix == ".so"
    return {"compiled": compiled, "rates": rates, "digest": digest.hexdigest()}


def run_child(path: Path, n: int) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    cmd = [sys.executable, __file__, "--child", str(n)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=path)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} (PYTHONPATH={path}) failed:\n{done.stderr}")
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _rates(result: dict[str, object]) -> dict[str, float]:
    rates = result["rates"]
    assert isinstance(rates, dict)
    return {str(k): float(v) for k, v in rates.items()}


# --- the run ------------------------------------------------------------------------


def compare(out: Path, n: int, runs: int) -> dict[str, dict[str, float]]:
    """Median ops per CPU second of each core, interpreted and compiled, alternated."""
    seen: dict[str, list[dict[str, object]]] = {"interpreted": [], "compiled": []}
    for _ in range(runs):
        seen["interpreted"].append(run_child(ROOT, n))
        seen["compiled"].append(run_child(out, n))
    if any(r["compiled"] for r in seen["interpreted"]) or not all(
        r["compiled"] for r in seen["compiled"]
    ):
        raise SystemExit(
            "a run loaded the wrong build: remove compiled modules (*.so) from this "
            "checkout, or rebuild --out"
        )
    digests = {str(r["digest"]) for rs in seen.values() for r in rs}
    medians = {
        build: {a: statistics.median(_rates(r)[a] for r in rs) for a in ACTORS}
        for build, rs in seen.items()
    }
    print(f"ops per run {n:,}, runs {runs} each (alternated), median ops per CPU s:")
    print(f"{'':14}{'interpreted':>13}{'compiled':>13}{'ratio':>8}")
    for a in ACTORS:
        pure, fast = medians["interpreted"][a], medians["compiled"][a]
        print(f"{a:14}{pure:>13,.0f}{fast:>13,.0f}{fast / pure:>8.2f}")
    print(f"same staged messages in every run: {'yes' if len(digests) == 1 else 'NO'}")
    return medians


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=5000, help="ops per measured run")
    parser.add_argument("--runs", type=int, default=5, help="runs of each build")
    parser.add_argument("--out", type=Path, help="keep the compiled copy here")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child)))
        return {}
    if args.ops < 1 or args.runs < 1:
        parser.error("--ops and --runs must be at least 1")
    if args.out is not None and args.out.exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out} is not empty: give a new or empty folder")
    out = args.out or Path(tempfile.mkdtemp(prefix="wl-mypyc-build-"))
    try:
        out.mkdir(parents=True, exist_ok=True)
        moved = prepare(out)
        for module, names in moved.items():
            print(f"moved out of {module}: {', '.join(names)}", file=sys.stderr)
        build(out)
        print(f"compiled {len(MODULES)} modules into {out}", file=sys.stderr)
        return compare(out, args.ops, args.runs)
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()

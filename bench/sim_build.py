"""Peak memory of ``worldline sim index`` on one big trace file, and on the same rows
split into many small files, each build in its own child process.

Run: ``python bench/sim_build.py [--transitions 100000] [--files 40] [--code DIR]
[--distinct-trials]``
(``--json``: one JSON object; ``--code DIR`` builds with the worldline checkout in
DIR, e.g. an older commit, to compare; ``--distinct-trials`` declares one lineage per
trial in the task's group, so no transition repeats: what a build from before
support counts could index).

The traces are synthetic, of real size: tau-bench-like customer-service
conversations (a shared policy system prompt of about 6 KB, a task request, then
about 20 exchanges, 53% of them message turns: an assistant text and the user's
reply; the rest a tool call with JSON arguments and a JSON result of about 800
bytes), four trials per task declared as one lineage (``"lineage": "task-<k>"``),
the four sharing their first exchange, as real trials of one task do. No real trace
is copied (the real ones in ``tests/data/traces`` are too few; a tau-bench dump is
not ours to commit). The rows are written once as one JSONL file and once split
into ``--files`` JSONL files, in a temporary folder; each layout is indexed by
``python -m worldline.cli sim index FILES --out DIR --json`` in a child process,
and its peak resident memory is the child's ``ru_maxrss`` (``os.wait4``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MB = 1024 * 1024
TURNS = 20  # exchanges per conversation
MESSAGE_SHARE = 0.53  # of exchanges that are message turns (tau: 53%)
TOOLS = (
    "get_user_details",
    "get_order_details",
    "get_product_details",
    "modify_pending_order_items",
    "cancel_pending_order",
    "return_delivered_order_items",
    "exchange_delivered_order_items",
    "find_user_id_by_name_zip",
)
SENTENCE = (
    "order item refund exchange address payment card gift shipped delivered pending "
    "cancel return size color price account email zip name policy confirm please "
    "thanks sorry check moment help change tracking warehouse status available"
)
WORDS = SENTENCE.split()


def _text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


POLICY = "# Retail agent policy\n" + _text(random.Random(0), 6000)


def _result(rng: random.Random, tool: str) -> str:
    items = [
        {
            "item_id": f"{rng.randrange(10**9):09d}",
            "name": _text(rng, 24),
            "options": {"color": rng.choice(WORDS), "size": rng.choice("SML")},
            "price": round(rng.uniform(5, 500), 2),
        }
        for _ in range(4)
    ]
    body = {"tool": tool, "status": rng.choice(WORDS), "items": items}
    return json.dumps(body)


def _exchange(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """One exchange: a message turn, or a tool call and its result."""
    if rng.random() < MESSAGE_SHARE:
        return [
            {"role": "assistant", "content": _text(rng, 300)},
            {"role": "user", "content": _text(rng, 150)},
        ]
    tool = rng.choice(TOOLS)
    arguments = json.dumps({"order_id": f"#W{rng.randrange(10**7):07d}"})
    call = {"id": f"call_{n}", "type": "function"}
    call["function"] = {"name": tool, "arguments": arguments}  # type: ignore[assignment]
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": _result(rng, tool)},
    ]


def conversation(task: int, trial: int, *, distinct: bool = False) -> dict[str, Any]:
    """Trial ``trial`` of task ``task``: its first exchange shared with the
    task's other trials, the rest its own. Declared as the task's lineage, or
    (``distinct``) as a lineage of its own in the task's group."""
    shared = random.Random(task)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": POLICY},
        {"role": "user", "content": f"task {task}: " + _text(shared, 200)},
        *_exchange(shared, 0),
    ]
    own = random.Random(task * 7919 + trial + 1)
    for n in range(1, TURNS):
        messages += _exchange(own, n)
    if distinct:
        declared = {"lineage": f"task-{task}-trial-{trial}", "group": f"task-{task}"}
    else:
        declared = {"lineage": f"task-{task}"}
    return {**declared, "messages": messages}


def lines(transitions: int, *, distinct: bool = False) -> list[bytes]:
    """JSONL lines holding about ``transitions`` transitions (4 trials a task)."""
    return [
        json.dumps(conversation(k // 4, k % 4, distinct=distinct)).encode() + b"\n"
        for k in range(max(1, transitions // TURNS))
    ]


def build(files: list[Path], out: Path, code: Path) -> dict[str, Any]:
    """Index ``files`` in a child process: its peak RSS, time and report."""
    env = dict(os.environ, PYTHONPATH=str(code))
    argv = [sys.executable, "-m", "worldline.cli", "sim", "index"]
    argv += [*map(str, files), "--out", str(out), "--json"]
    start = time.perf_counter()
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen(  # in ``code``: python -m imports from the cwd
            argv, cwd=code, env=env, stdout=stdout, stderr=stderr
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        stdout.seek(0)
        stderr.seek(0)
        if child.returncode != 0:
            tail = stderr.read().decode(errors="replace")[-800:]
            raise SystemExit(f"sim index exited {child.returncode}: {tail}")
        report = json.loads(stdout.read())
    return {
        "files": len(files),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
        "seconds": round(seconds, 1),
        "transitions": report.get("transitions"),
        "pair_count": report.get("pair_count"),
    }


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--transitions", type=int, default=100_000)
    cli.add_argument("--files", type=int, default=40)
    cli.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1])
    cli.add_argument(
        "--distinct-trials",
        action="store_true",
        help="one lineage per trial, in the task's group (no shared transition: "
        "what a build before support counts could index)",
    )
    cli.add_argument("--json", action="store_true")
    args = cli.parse_args()
    rows = lines(args.transitions, distinct=args.distinct_trials)
    result: dict[str, Any] = {
        "conversations": len(rows),
        "code": str(args.code),
        "lineages": "one per trial" if args.distinct_trials else "one per task",
    }
    with tempfile.TemporaryDirectory(prefix="sim-build-") as folder:
        root = Path(folder)
        big = root / "one" / "traces.jsonl"
        big.parent.mkdir()
        big.write_bytes(b"".join(rows))
        result["file_mb"] = round(big.stat().st_size / MB, 1)
        split = root / "many"
        split.mkdir()
        parts = []
        per = -(-len(rows) // args.files)
        for i in range(0, len(rows), per):
            part = split / f"traces-{i // per:03d}.jsonl"
            part.write_bytes(b"".join(rows[i : i + per]))
            parts.append(part)
        del rows
        result["one_file"] = build([big], root / "ix-one", args.code)
        result["many_files"] = build(parts, root / "ix-many", args.code)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['conversations']} conversations ({result['lineages']}), "
        f"{result['file_mb']} MB of JSONL (code: {result['code']})"
    )
    for name in ("one_file", "many_files"):
        r = result[name]
        print(
            f"{name:10}  {r['files']:3} file(s)  peak RSS {r['peak_rss_mb']:7.1f} MB  "
            f"{r['seconds']:6.1f} s  {r['transitions']} transitions "
            f"({r['pair_count']} pairs read)"
        )


if __name__ == "__main__":
    main()

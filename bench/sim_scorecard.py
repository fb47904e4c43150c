"""Simulator scorecard (issue 17): does the simulator predict held-out real
observations better than two trivial guesses computed in the same run.

Data: every ``*.json``, ``*.jsonl`` and ``*.traj`` file under ``--traces`` (default
``tests/data/traces/``: ToolBench, Apache-2.0, and SWE-agent, MIT; see
``tests/data/README.md``), read by the trace adapters (``parse_trace``). Never point
it at tau-bench traces: they are held out to judge the simulator, and a folder whose
path names tau-bench is refused.

Split: by lineage group (``--group-by``): ``family`` (the default) joins the lineages
(or declared groups) that share a task or a conversation source, so the trials and
replays of one task are one group; ``lineage`` takes each declared group, else each
lineage, alone. Groups are ordered by the sha256 of their name and the first
``round(--held-out * groups)`` (at least one, never all) are held out: deterministic,
and no transition of a held-out group is in the index. The index the simulator serves
is built from the fit transitions only (``held_out=0``), so nothing held out can be
retrieved.

Run: a real stack, an embedded nats-server on a free loopback port and every actor in
one ``worldline up --nats URL --sim-index DIR`` process, with the local provider
(``WORLDLINE_LLM_URL`` unset). Every held-out transition is asked through a session:
``sim_start(task, context=<its context>)``, ``sim_step(<its real action>)``, and the
answer is compared with the real observation. Every step asks for a best guess
(``best_guess``), as the baselines always answer: a step below the similarity floor
is answered by the nearest transition, flagged ``grounded=False``, and counted in
the report's "below floor" column (a step refused is scored 0). A tool call is sent
as an OpenAI-style
assistant message with ``tool_calls``; while sessions refuse those
(``tool_calls_unsupported``) it is sent as its text, ``name(arguments)``, and the
report says how each was sent.

Metrics, per kind (``tool``: a tool call's result; ``message``: the next user or
environment message after an assistant message): token-F1 (lower-cased ``\\w+``
tokens, multiset overlap), exact match (equal after stripping whitespace), same tool
(tool results only: the answer came from a transition of the same tool), kind correct
(a tool result for a tool call, a message for a message), terminal correct (the
answer's terminal flag equals the real ``final``). The answer's kind and tool are the
grounding transition's (the first id of ``grounding``, whose observation the local
provider returns), or the reply's role when the observation is not that one's.

Baselines, on the same held-out transitions, from the fit transitions: (a) random: a
fit transition of the same tool (for messages: a fit message), ``random.Random(seed)``
in held-out id order; (b) frequent: the most frequent (observation, final) among the
fit transitions of the same tool (for messages: all fit messages), ties by text. When
no fit transition has the tool, both fall back to every fit transition of the kind
(counted in the report).

Run: ``python bench/sim_scorecard.py [--traces DIR ...] [--held-out 0.3] [--quick]
[--json]``. Results: ``docs/benchmarks.md`` ("Simulator scorecard (issue 17)").
Longer than 500 lines because it is one run whose parts share their data: the
traces and split, the metrics, both baselines, the stack and its sessions, the report.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.to_thread

# bench/ holds scripts, not a package: its sibling is importable by name.
from pipeline import stop_actor_processes

import worldline
from worldline.actors.extractor.traces import UnknownTraceFormat, parse_trace
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.actors.simulator import index as transition_index
from worldline.actors.simulator import track
from worldline.protocols.simulator import TraceIssue

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from worldline.protocols.messages import SimStepReply, Transition

__all__ = [
    "Answer",
    "Baselines",
    "Config",
    "Results",
    "Scored",
    "Traces",
    "groups",
    "main",
    "read_traces",
    "run",
    "split",
    "token_f1",
]

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"
SUFFIXES = (".json", ".jsonl", ".traj")
HELD_OUT_NAMES = ("tau-bench", "tau_bench", "taubench", "tau2-bench")
Kind = Literal["tool", "message"]
KINDS: tuple[Kind, ...] = ("tool", "message")
SYSTEMS = ("simulator", "random", "frequent")
METRICS = ("f1", "exact", "same_tool", "kind", "terminal")
GROUPINGS = ("family", "lineage")


@dataclass(frozen=True)
class Config:
    traces: tuple[Path, ...] = (TRACES,)
    held_out: float = 0.3  # fraction of lineage groups held out
    group_by: str = "family"  # or "lineage" (see groups())
    limit: int | None = None  # held-out transitions asked (None: every one)
    seed: int = 17  # the random baseline's
    window: int = 8  # sessions in flight


# --- data -----------------------------------------------------------------------


@dataclass
class Traces:
    """What the trace files under ``--traces`` hold."""

    transitions: list[Transition] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # the files read
    issues: list[TraceIssue] = field(default_factory=list)
    declared: dict[str, str] = field(default_factory=dict)  # lineage -> its group


def read_traces(folders: Sequence[Path]) -> Traces:
    """Every transition of every trace file under ``folders``, the files read, the
    adapters' issues (a file in no trace format, such as a predictions file beside
    trajectories, is one too) and each lineage's group as the adapters give it."""
    found = Traces()
    for folder in folders:
        if any(name in str(folder.resolve()).lower() for name in HELD_OUT_NAMES):
            raise SystemExit(f"{folder}: tau-bench traces are held out; never fit them")
        if not folder.is_dir():
            raise SystemExit(f"{folder}: not a folder of traces")
        for path in sorted(p for p in folder.rglob("*") if p.suffix in SUFFIXES):
            try:
                parsed = parse_trace(path.name, path.read_bytes())
            except UnknownTraceFormat as exc:
                reason = str(exc).split(";")[0]
                found.issues.append(TraceIssue(source=str(path), reason=reason))
                continue
            found.transitions += parsed.transitions
            found.issues += parsed.issues
            found.declared.update(getattr(parsed, "groups", {}))
            found.names.append(str(path.relative_to(folder)))
    return found


def groups(
    transitions: Sequence[Transition], by: str, declared: dict[str, str] | None = None
) -> dict[str, str]:
    """Each lineage's group for the split. ``lineage``: its group as the adapters
    give it (``declared``: the trace's ``"group"``, else the lineage itself).
    ``family`` (the default): those groups joined when they share a task (first user
    message) or a conversation source (a trace file, or a JSONL line): trials and
    replays of one task then never straddle the split."""
    declared = declared or {}
    base = {t.lineage: declared.get(t.lineage, t.lineage) for t in transitions}
    parent = {g: g for g in base.values()}

    def find(g: str) -> str:
        while parent[g] != g:
            g = parent[g]
        return g

    if by == "family":
        first: dict[tuple[str, str], str] = {}
        for t in sorted(transitions, key=_id):
            for key in (("task", t.task), ("file", t.source.rsplit("#", 1)[0])):
                if key[1]:
                    own = base[t.lineage]
                    a, b = find(own), find(first.setdefault(key, own))
                    parent[max(a, b)] = min(a, b)
    return {lineage: find(g) for lineage, g in base.items()}


def split(
    transitions: Sequence[Transition],
    fraction: float,
    by: str = "family",
    declared: dict[str, str] | None = None,
) -> tuple[list[Transition], list[Transition]]:
    """(fit, held out) by lineage group (:func:`groups`): groups ordered by the
    sha256 of their name, the first ``round(fraction * groups)`` held out (at least
    one, never all)."""
    group = groups(transitions, by, declared)
    names = sorted(
        set(group.values()), key=lambda g: hashlib.sha256(g.encode()).hexdigest()
    )
    if len(names) < 2:
        raise SystemExit(f"{len(names)} lineage group(s): a split needs at least two")
    held = set(names[: max(1, min(len(names) - 1, round(fraction * len(names))))])
    fit = sorted((t for t in transitions if group[t.lineage] not in held), key=_id)
    out = sorted((t for t in transitions if group[t.lineage] in held), key=_id)
    return fit, out


def _id(t: Transition) -> str:
    return t.id


def kind_of(t: Transition) -> Kind:
    return "message" if t.pairing == "turn" else "tool"


def tool_of(t: Transition) -> str:
    """A tool call's name (the adapters write the action as ``name(arguments)``)."""
    return t.action.split("(", 1)[0] if kind_of(t) == "tool" else ""


def call_message(t: Transition, call_id: str) -> dict[str, Any]:
    """The real tool call as an OpenAI-style assistant message."""
    name, _, rest = t.action.partition("(")
    arguments = rest[:-1] if rest.endswith(")") else rest
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ],
    }


# --- metrics --------------------------------------------------------------------

# The simulator's own track record scores hits the same way (one definition).
token_f1 = track.token_f1


@dataclass(frozen=True)
class Answer:
    """One system's answer for one held-out transition."""

    observation: str
    terminal: bool
    kind: Kind | None  # None: no answer (a refused step)
    tool: str = ""
    error: str = ""  # the simulator's refusal, by name
    grounded: bool = True  # False: a best guess below the similarity floor


@dataclass(frozen=True)
class Scored:
    """One held-out transition as one system answered it (metrics in [0, 1])."""

    id: str
    kind: Kind
    tool: str
    system: str
    f1: float
    exact: float
    same_tool: float | None  # tool results only
    kind_ok: float
    terminal: float
    error: str = ""
    grounded: bool = True


def _metric(r: Scored, metric: str) -> float | None:
    return r.kind_ok if metric == "kind" else getattr(r, metric)


def score(t: Transition, system: str, answer: Answer) -> Scored:
    kind, tool, answered = kind_of(t), tool_of(t), answer.kind is not None
    same = answer.kind == "tool" and answer.tool == tool
    return Scored(
        id=t.id,
        kind=kind,
        tool=tool,
        system=system,
        f1=token_f1(answer.observation, t.observation) if answered else 0.0,
        exact=float(answered and answer.observation.strip() == t.observation.strip()),
        same_tool=float(same) if kind == "tool" else None,
        kind_ok=float(answer.kind == kind),
        terminal=float(answered and answer.terminal == t.final),
        error=answer.error,
        grounded=answer.grounded,
    )


class Baselines:
    """The two guesses, from the fit transitions only."""

    def __init__(self, fit: Sequence[Transition], seed: int) -> None:
        self.rng = random.Random(seed)
        self.by_tool: dict[tuple[Kind, str], list[Transition]] = defaultdict(list)
        self.by_kind: dict[Kind, list[Transition]] = defaultdict(list)
        for t in sorted(fit, key=_id):
            self.by_tool[(kind_of(t), tool_of(t))].append(t)
            self.by_kind[kind_of(t)].append(t)
        self.fit = sorted(fit, key=_id)
        self.fallbacks = 0  # held-out tools no fit transition has

    def pool(self, t: Transition) -> list[Transition]:
        found = self.by_tool.get((kind_of(t), tool_of(t)))
        if found:
            return found
        self.fallbacks += 1
        return self.by_kind.get(kind_of(t)) or self.fit

    def answers(self, t: Transition) -> tuple[Answer, Answer]:
        """(random, frequent) for ``t``."""
        pool = self.pool(t)
        pick = self.rng.choice(pool)
        counts = Counter((p.observation, p.final) for p in pool)
        (observation, final), _ = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        source = next(p for p in pool if p.observation == observation)
        return (
            Answer(pick.observation, pick.final, kind_of(pick), tool_of(pick)),
            Answer(observation, final, kind_of(source), tool_of(source)),
        )


# --- the stack and the sessions -------------------------------------------------


def start_up(url: str, data: Path, index: Path) -> subprocess.Popen[str]:
    """``worldline up`` on ``url`` serving ``index``; returns once it is ready."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_LLM_")}
    cmd = [sys.executable, "-m", "worldline.cli", "up", "--nats", url]
    cmd += ["--data", str(data), "--sim-index", str(index)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "ready" in line:
            return proc
    stop_actor_processes([proc])
    raise RuntimeError(f"{cmd!r} stopped before it was ready")


@asynccontextmanager
async def stack(index: Path) -> AsyncIterator[str]:
    """A fresh embedded nats-server and every actor, the simulator serving ``index``."""
    with (
        tempfile.TemporaryDirectory(prefix="wl-scorecard-") as tmp,
        EmbeddedNats(Path(tmp) / "nats") as server,
    ):
        proc = await anyio.to_thread.run_sync(
            start_up, server.url, Path(tmp) / "data", index
        )
        try:
            yield server.url
        finally:
            await anyio.to_thread.run_sync(stop_actor_processes, [proc])


@dataclass
class Asker:
    """Asks the simulator about held-out transitions, one session each."""

    world: worldline.World
    fit: dict[str, Transition]
    tool_calls: bool = True  # until a session refuses them by name
    sent: Counter[str] = field(default_factory=Counter)  # how tool calls were sent

    async def step(self, session: str, t: Transition, n: int) -> SimStepReply:
        if kind_of(t) == "message":
            return await self.world.sim_step(session, t.action, best_guess=True)
        if self.tool_calls:
            try:
                reply = await self.world.sim_step(
                    session, call_message(t, f"call_{n}"), best_guess=True
                )
            except worldline.SimulationError as exc:
                if exc.name != "tool_calls_unsupported":
                    raise
                self.tool_calls = False  # a refused step changes nothing: resend
            else:
                self.sent["tool_calls"] += 1
                return reply
        self.sent["text"] += 1
        return await self.world.sim_step(session, t.action, best_guess=True)

    async def ask(self, t: Transition, n: int) -> Answer:
        try:
            started = await self.world.sim_start(t.task, context=t.context)
        except worldline.SimulationError as exc:
            return Answer("", False, None, error=exc.name)
        try:
            reply = await self.step(started.session_id, t, n)
        except worldline.SimulationError as exc:
            return Answer("", False, None, error=exc.name)
        finally:
            with contextlib.suppress(worldline.SimulationError):  # a terminal step
                await self.world.sim_end(started.session_id)
        message = _answering(reply, f"call_{n}")
        content = message.get("content") or ""
        nearest = self.fit.get(reply.grounding[0]) if reply.grounding else None
        grounded = reply.grounded
        if nearest is not None and nearest.observation == content:
            kind_tool = (kind_of(nearest), tool_of(nearest))
            return Answer(content, reply.terminal, *kind_tool, grounded=grounded)
        kind: Kind = "tool" if message.get("role") == "tool" else "message"
        tool = message.get("name", "")
        return Answer(content, reply.terminal, kind, tool, grounded=grounded)


def _answering(reply: SimStepReply, call_id: str) -> dict[str, Any]:
    """The reply's message answering the step: the tool result keyed by ``call_id``
    when the reply holds several messages, else its one message."""
    messages = getattr(reply, "messages", None) or [reply.message]
    keyed = [m for m in messages if m.get("tool_call_id") == call_id]
    return dict(keyed[0] if keyed else messages[0])


# --- the run --------------------------------------------------------------------


@dataclass
class Results:
    traces: list[str]
    files: int
    transitions: int
    issues: int
    groups: tuple[int, int]  # fit, held out
    fit: int
    held_out: int
    index: str  # the fit index's manifest id
    embedder: str
    sent: dict[str, int] = field(default_factory=dict)
    fallbacks: int = 0
    records: list[Scored] = field(default_factory=list)

    def summary(self) -> dict[str, dict[str, dict[str, float]]]:
        """kind -> system -> metric -> mean (``n``: how many; ``refused``: steps the
        simulator refused, scored 0)."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for kind in KINDS:
            out[kind] = {}
            for system in SYSTEMS:
                rows = [r for r in self.records if (r.kind, r.system) == (kind, system)]
                values: dict[str, float] = {"n": len(rows)}
                values["refused"] = sum(bool(r.error) for r in rows)
                values["below_floor"] = sum(not r.grounded for r in rows)
                for metric in METRICS:
                    got = [m for r in rows if (m := _metric(r, metric)) is not None]
                    values[metric] = sum(got) / len(got) if got else float("nan")
                out[kind][system] = values
        return out

    def beats(self, kind: Kind) -> bool | None:
        """Whether the simulator's token-F1 beats both baselines (None: no data)."""
        s = self.summary()[kind]
        if not s["simulator"]["n"]:
            return None
        best = max(s["random"]["f1"], s["frequent"]["f1"])
        return s["simulator"]["f1"] > best


async def measure(config: Config) -> Results:
    traces = read_traces(config.traces)
    transitions, declared = traces.transitions, traces.declared
    fit, held = split(transitions, config.held_out, config.group_by, declared)
    group = groups(transitions, config.group_by, declared)
    asked = held if config.limit is None else held[: config.limit]
    with tempfile.TemporaryDirectory(prefix="wl-scorecard-index-") as tmp:
        lineages = {t.lineage for t in fit}
        built = transition_index.build(
            fit,
            sources=traces.names,
            issues=traces.issues,
            held_out=0.0,
            groups={k: v for k, v in declared.items() if k in lineages},
        )
        transition_index.save(built, Path(tmp) / "index")
        results = Results(
            traces=[_shown(p) for p in config.traces],
            files=len(traces.names),
            transitions=len(transitions),
            issues=len(traces.issues),
            groups=(
                len({group[t.lineage] for t in fit}),
                len({group[t.lineage] for t in held}),
            ),
            fit=len(fit),
            held_out=len(asked),
            index=built.manifest.id,
            embedder=built.manifest.embedder,
        )
        baselines = Baselines(fit, config.seed)
        guesses = [baselines.answers(t) for t in asked]
        results.fallbacks = baselines.fallbacks
        answers: list[Answer | None] = [None] * len(asked)
        async with (
            stack(Path(tmp) / "index") as url,
            worldline.connect(url, world="scorecard", agent="scorecard") as w,
        ):
            asker = Asker(w, {t.id: t for t in fit})
            limiter = anyio.Semaphore(config.window)

            async def one(n: int) -> None:
                async with limiter:
                    answers[n] = await asker.ask(asked[n], n)

            async with anyio.create_task_group() as tg:
                for n in range(len(asked)):
                    tg.start_soon(one, n)
            results.sent = dict(asker.sent)
    for t, answer, (rand, freq) in zip(asked, answers, guesses, strict=True):
        assert answer is not None
        results.records += [score(t, "simulator", answer)]
        results.records += [score(t, "random", rand), score(t, "frequent", freq)]
    return results


def _shown(path: Path) -> str:
    absolute = path.resolve()
    return str(absolute.relative_to(ROOT) if absolute.is_relative_to(ROOT) else path)


def report(r: Results) -> None:
    sent = dict(sorted(r.sent.items())) or "none"
    lines = [
        f"traces: {', '.join(r.traces)} ({r.files} files, {r.transitions} "
        f"transitions, {r.issues} issues)",
        f"split by lineage group: fit {r.groups[0]} groups ({r.fit} transitions), "
        f"held out {r.groups[1]} groups ({r.held_out} transitions asked)",
        f"fit index {r.index[:12]} ({r.embedder}); tool calls sent as {sent}; "
        f"baselines fell back to every fit transition of the kind for "
        f"{r.fallbacks} held-out transitions of a tool no fit transition has",
        "",
        f"{'kind':<14}{'n':>5}  {'system':<10}{'token-F1':>9}{'exact':>8}"
        f"{'same tool':>11}{'kind ok':>9}{'terminal':>10}{'refused':>9}"
        f"{'below floor':>13}",
    ]
    s = r.summary()
    labels = {"tool": "tool result", "message": "next message"}
    for kind in KINDS:
        if not s[kind]["simulator"]["n"]:
            lines.append(f"{labels[kind]:<14}{0:>5}  (none held out)")
            continue
        for system in SYSTEMS:
            v = s[kind][system]
            same = "" if kind == "message" else f"{v['same_tool']:.3f}"
            below = f"{v['below_floor']:.0f}"
            head = f"{labels[kind]:<14}{v['n']:>5.0f}"
            lines.append(
                f"{head if system == 'simulator' else '':<19}  {system:<10}"
                f"{v['f1']:>9.3f}{v['exact']:>8.3f}{same:>11}{v['kind']:>9.3f}"
                f"{v['terminal']:>10.3f}{v['refused']:>9.0f}"
                f"{below if system == 'simulator' else '':>13}"
            )
    print("\n".join(lines))
    print()
    for kind in KINDS:
        beats = r.beats(kind)
        verdict = "n/a" if beats is None else ("yes" if beats else "NO")
        print(f"simulator beats both baselines on token-F1, {labels[kind]}: {verdict}")


def parse(argv: Sequence[str] | None) -> tuple[Config, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, nargs="+", default=None)
    parser.add_argument("--held-out", type=float, default=Config.held_out)
    parser.add_argument("--limit", type=int, default=None, help="held-out asked")
    parser.add_argument("--seed", type=int, default=Config.seed)
    parser.add_argument("--group-by", choices=GROUPINGS, default=Config.group_by)
    parser.add_argument("--quick", action="store_true", help="at most 20 asked")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args(argv)
    if not 0.0 < args.held_out < 1.0:
        parser.error("--held-out is a fraction of the lineage groups in (0, 1)")
    limit = args.limit if args.limit is not None else (20 if args.quick else None)
    if limit is not None and limit < 1:
        parser.error("--limit must be at least 1")
    traces = tuple(args.traces) if args.traces else (TRACES,)
    config = Config(traces, args.held_out, args.group_by, limit, args.seed)
    return config, bool(args.json)


def run(config: Config) -> Results:
    """Measure (starts and stops its own nats-server and actors)."""
    return anyio.run(measure, config, backend="asyncio")


def main(argv: Sequence[str] | None = None) -> Results:
    config, as_json = parse(argv)
    results = run(config)
    if as_json:
        summary = {
            kind: {
                system: {k: None if math.isnan(v) else v for k, v in values.items()}
                for system, values in systems.items()
            }
            for kind, systems in results.summary().items()
        }
        print(json.dumps({**asdict(results), "summary": summary}, allow_nan=False))
    else:
        report(results)
    return results


if __name__ == "__main__":
    main()

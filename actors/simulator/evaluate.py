"""Evaluation runs of the grounded simulator: a plan of tasks, one immutable rollout
per task (a cell), resumable and checked against the plan.

A plan (TOML, see ``examples/sim-plan.toml``) names a run, the read-only transition
index the world model is grounded on, an output folder, a budget of world-model steps
for the whole run, a candidate and its tasks. Two clients are kept apart: the
*candidate* (the behaviour being evaluated: here a scripted one that takes the
actions each task lists, in order) and the *world model* (the
:class:`~actors.simulator.provider.LocalProvider` over the index, which predicts the
reply to each action from the nearest real transitions). Neither sees the other's
state; each rollout records their economics separately, with the retrieval
embedding and the orchestration.

Every cell ends in a rollout written once to ``<out>/rollouts/<task id>.json``:

* a task that declares tools is not simulated (a text session cannot give it the
  tools it needs): stop reason ``unsupported``, failure ``tools_unsupported``;
* otherwise a session is opened and each scripted action is stepped until the
  prediction is terminal (``terminal``) or the actions run out
  (``actions_exhausted``);
* a session refusal (empty action, too many messages, no grounding...) stops the cell
  with ``failed`` and the refusal's name;
* when the run's budget is spent before a step, the cell stops with ``budget`` and
  ``budget_exhausted``: recorded like any other failure, so it stays in the
  denominator instead of leaving a hole.

Runs resume: a cell whose rollout exists is read back, not redone, provided the
rollout carries this plan's hash; one made by another plan (or over another index)
is an error, never silently mixed in. Resumed rollouts count against the budget just
as they did when they ran, so a resumed run ends where an uninterrupted one would.

Rollouts are evaluation artifacts, not observations: nothing here can add one to an
index (:func:`~actors.simulator.index.build` refuses anything but a real
``Transition``), so the world model never retrieves its own earlier guesses.

Pure apart from reading the plan and the index and writing rollouts: the clock is an
argument and the session ids come from a random source seeded by the plan hash.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import tempfile
import tomllib
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

import msgspec

from actors.simulator.index import IndexRefused, load
from actors.simulator.provider import LocalProvider
from actors.simulator.sessions import Prediction, Session, SessionError, Sessions

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from actors.simulator.index import TransitionIndex

__all__ = [
    "CANDIDATES",
    "ROLLOUTS",
    "WORLD_MODELS",
    "CandidateCost",
    "CandidateSpec",
    "Costs",
    "EmbeddingCost",
    "Failure",
    "OrchestrationCost",
    "Plan",
    "PlanError",
    "Rollout",
    "RunReport",
    "RunSpec",
    "Step",
    "StopReason",
    "TaskSpec",
    "WorldModelCost",
    "load_plan",
    "parse_plan",
    "plan_hash",
    "read_rollout",
    "run_plan",
]

ROLLOUTS: Final = "rollouts"  # folder under the run's out folder
WORLD_MODELS: Final = ("local",)
CANDIDATES: Final = ("scripted",)
MAX_PLAN_BYTES: Final = 4 * 1024 * 1024

StopReason = Literal["terminal", "actions_exhausted", "unsupported", "budget", "failed"]
TaskId = Annotated[
    str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
]  # a task id is also its rollout's file name


class PlanError(ValueError):
    """A plan that cannot be run, or an out folder that does not belong to it; the
    message names the file, the key or the cell, and the fix."""


# --- the plan ------------------------------------------------------------------------


class RunSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[run]``: what the run is called, where its inputs and outputs are, and the
    total number of world-model steps it may take."""

    id: TaskId
    index: str  # the transition index folder, relative to the plan file
    out: str  # the rollouts go to <out>/rollouts/, relative to the plan file
    budget_steps: Annotated[int, msgspec.Meta(ge=0)]
    world_model: str = "local"


class CandidateSpec(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``[candidate]``: the behaviour under evaluation (``scripted``: each task's
    ``actions``, in order)."""

    kind: str


class TaskSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[[tasks]]``: one cell."""

    id: TaskId
    task: str
    context: str = ""
    tools: list[str] = msgspec.field(default_factory=list)
    lineage_exclude: list[str] = msgspec.field(default_factory=list)
    actions: list[str] = msgspec.field(default_factory=list)  # scripted candidate


class Plan(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    run: RunSpec
    candidate: CandidateSpec
    tasks: list[TaskSpec]


_SECTIONS: Final[dict[str, type[msgspec.Struct]]] = {
    "": Plan,
    "run": RunSpec,
    "candidate": CandidateSpec,
    "tasks": TaskSpec,
}
_UNKNOWN = re.compile(r"unknown field `(?P<key>[^`]*)`(?: - at `\$(?P<at>[^`]*)`)?")


def _unknown_key(source: str, message: str) -> str | None:
    """A clear message for msgspec's unknown-field error, else None."""
    found = _UNKNOWN.search(message)
    if found is None:
        return None
    at = (found["at"] or "").lstrip(".")
    section = re.sub(r"\[\d+\]$", "", at)
    number = re.search(r"\[(\d+)\]$", at)
    if not section:
        where = "the top level"
    elif section == "tasks" and number:
        where = f"[[tasks]] number {int(number[1]) + 1}"
    else:
        where = f"[{section}]"
    struct = _SECTIONS.get(section)
    known = ", ".join(struct.__struct_fields__) if struct else "?"
    return (
        f"{source}: unknown key {found['key']!r} in {where}; the keys there are: "
        f"{known}"
    )


def parse_plan(text: str, *, source: str = "<plan>") -> Plan:
    """Validate TOML text as a :class:`Plan`: unknown keys, wrong types, an
    unsupported world model or candidate, duplicate task ids and scripted tasks
    without actions raise :class:`PlanError` naming the key."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"{source}: not valid TOML: {exc}") from exc
    try:
        plan = msgspec.convert(raw, Plan)
    except msgspec.ValidationError as exc:
        unknown = _unknown_key(source, str(exc))
        raise PlanError(unknown or f"{source}: invalid plan: {exc}") from exc
    if plan.run.world_model not in WORLD_MODELS:
        raise PlanError(
            f"{source}: [run] world_model {plan.run.world_model!r} is not supported; "
            f"supported: {', '.join(map(repr, WORLD_MODELS))} (the deterministic "
            "provider over the transition index)"
        )
    if plan.candidate.kind not in CANDIDATES:
        raise PlanError(
            f"{source}: [candidate] kind {plan.candidate.kind!r} is not supported; "
            f"supported: {', '.join(map(repr, CANDIDATES))}"
        )
    if not plan.tasks:
        raise PlanError(f"{source}: no [[tasks]]; a run needs at least one task")
    seen: set[str] = set()
    for task in plan.tasks:
        if task.id in seen:
            raise PlanError(
                f"{source}: task id {task.id!r} appears twice; each task is one cell "
                "and one rollout file, so ids must be unique"
            )
        seen.add(task.id)
        if not task.tools and not task.actions:
            raise PlanError(
                f"{source}: task {task.id!r} has no actions; a scripted candidate "
                "takes the actions its task lists"
            )
    return plan


def load_plan(path: Path) -> Plan:
    """Read and validate a plan file (see :func:`parse_plan`)."""
    try:
        size = path.stat().st_size
        if size > MAX_PLAN_BYTES:
            raise PlanError(
                f"{path}: {size} bytes is over the {MAX_PLAN_BYTES}-byte limit for a "
                "plan"
            )
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"cannot read {path}: {exc}") from exc
    return parse_plan(text, source=str(path))


def plan_hash(plan: Plan, index_id: str) -> str:
    """The sha256 of the canonical plan (sorted-key msgspec JSON of the parsed plan,
    defaults filled in) and the index manifest id.

    The two locations, ``run.index`` and ``run.out``, are left out: where the index
    lies is not what it holds (its manifest id stands for that), and the out folder
    is where the results go, not what they are. So the same plan over the same index
    gives the same hash, and byte-identical rollouts, in any folder.
    """
    fields: dict[str, Any] = msgspec.to_builtins(plan)
    del fields["run"]["index"], fields["run"]["out"]
    canonical = msgspec.json.encode(fields, order="sorted")
    return hashlib.sha256(canonical + b"\n" + index_id.encode()).hexdigest()


# --- rollouts ------------------------------------------------------------------------


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """One turn: the candidate's action and the world model's predicted reply."""

    action: str
    observation: str  # predicted, never observed
    terminal: bool
    grounding: list[str]  # ids of the real transitions it was conditioned on


class Failure(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # stable: tools_unsupported, budget_exhausted, or a session refusal
    message: str


class CandidateCost(msgspec.Struct, frozen=True, kw_only=True):
    actions: int  # actions the candidate produced and the session was asked to take
    chars: int


class WorldModelCost(msgspec.Struct, frozen=True, kw_only=True):
    calls: int  # predictions dispatched (the budget counts these)
    chars: int  # of the predicted observations returned


class EmbeddingCost(msgspec.Struct, frozen=True, kw_only=True):
    queries: int  # retrieval queries embedded


class OrchestrationCost(msgspec.Struct, frozen=True, kw_only=True):
    seconds: float  # wall time of the cell on the run's clock


class Costs(msgspec.Struct, frozen=True, kw_only=True):
    """The economics of one cell, never collapsed into one number."""

    candidate: CandidateCost
    world_model: WorldModelCost
    embedding: EmbeddingCost
    orchestration: OrchestrationCost


class Rollout(msgspec.Struct, frozen=True, kw_only=True):
    """What one cell did: an evaluation artifact (a simulated episode), never a real
    transition and never indexed."""

    kind: Literal["simulated-rollout"] = "simulated-rollout"
    plan_hash: str
    task_id: str
    index_id: str
    steps: list[Step]
    stop_reason: StopReason
    failure: Failure | None
    costs: Costs
    started_at: datetime
    finished_at: datetime


_ROLLOUT: Final = msgspec.json.Decoder(Rollout)


def read_rollout(path: Path) -> Rollout:
    """A rollout file, or :class:`PlanError` saying it is not one."""
    try:
        return _ROLLOUT.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError) as exc:
        raise PlanError(
            f"{path}: not a readable rollout ({exc}); the out folder holds only what "
            "a run wrote: use a new out folder"
        ) from exc


def _write_once(path: Path, data: bytes) -> None:
    """Write ``path`` atomically and only if it does not exist: a read-only temp file
    in the same folder, flushed, then hard-linked into place (which refuses an
    existing name, unlike a rename), then the temp name removed."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o444)  # immutable: nobody is meant to edit a rollout
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temp, path)
        except FileExistsError as exc:
            raise PlanError(
                f"{path}: already written (a rollout is never overwritten); is another "
                "run using this out folder?"
            ) from exc
    finally:
        os.unlink(temp)


# --- the two clients -----------------------------------------------------------------


class _ScriptedCandidate:
    """The candidate: the task's actions, in order. It sees only the last predicted
    observation (and ignores it), never the session or the world model."""

    def __init__(self, actions: list[str]) -> None:
        self._actions = list(actions)
        self.actions = 0
        self.chars = 0

    @property
    def done(self) -> bool:
        """Whether it has nothing more to do (a script that has run out)."""
        return self.actions >= len(self._actions)

    def act(self, observation: str | None) -> str:
        action = self._actions[self.actions]
        self.actions += 1
        self.chars += len(action)
        return action


class _MeteredWorldModel:
    """The world model, counting its calls, its output and its retrieval queries."""

    def __init__(self, provider: LocalProvider) -> None:
        self._provider = provider
        self.calls = 0
        self.chars = 0
        self.queries = 0

    def __call__(self, session: Session, action: str) -> Prediction:
        self.calls += 1
        try:
            prediction = self._provider(session, action)
        except SessionError as exc:
            # The local provider embeds one query per call, unless nothing was left
            # to score (it then refuses with no_grounding before embedding).
            if exc.name != "no_grounding":
                self.queries += 1
            raise
        self.queries += 1
        self.chars += len(prediction.observation)
        return prediction


# --- the run -------------------------------------------------------------------------


@dataclass(frozen=True)
class RunReport:
    """What a run (or a resumed run) amounts to. ``cells`` is the denominator: every
    task, failed or not, resumed or not."""

    run_id: str
    plan_hash: str
    cells: int
    completed: int  # cells run and written by this invocation
    resumed: int  # cells read back from rollouts written before
    failures: dict[str, int]  # failure name -> cells, over all cells
    stops: dict[str, int]  # stop reason -> cells, over all cells
    rollouts: tuple[Path, ...]  # one per cell, in plan order

    def summary(self) -> str:
        failed = sum(self.failures.values())
        named = ", ".join(f"{n} {c}" for n, c in sorted(self.failures.items()))
        return (
            f"run {self.run_id} (plan {self.plan_hash[:12]}): {self.cells} cells, "
            f"{self.completed} completed, {self.resumed} resumed, {failed} failed"
            + (f" ({named})" if named else "")
        )


def _seed(digest: str, task_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{digest}\n{task_id}".encode()).digest()[:8])


def _run_cell(
    task: TaskSpec,
    *,
    run_id: str,
    digest: str,
    index: TransitionIndex,
    remaining: int,
    now: Callable[[], datetime],
) -> Rollout:
    started = now()
    candidate = _ScriptedCandidate(task.actions)
    world_model = _MeteredWorldModel(LocalProvider(index))
    steps: list[Step] = []
    stop: StopReason
    failure: Failure | None = None
    if task.tools:
        stop = "unsupported"
        failure = Failure(
            name="tools_unsupported",
            message=f"the task declares tools ({', '.join(task.tools)}); the text "
            "simulator does not simulate tools, so the task was not run",
        )
    else:
        # One session per cell, from a random source seeded by the plan hash and the
        # task, so a cell is the same whether it ran first or after a resume.
        sessions = Sessions(rng=random.Random(_seed(digest, task.id)))
        session: Session | None = None
        try:
            session = sessions.start(
                run_id, task.task, task.context, now(), tuple(task.lineage_exclude)
            )
            observation: str | None = None
            while not candidate.done:
                if remaining - world_model.calls <= 0:
                    stop = "budget"
                    failure = Failure(
                        name="budget_exhausted",
                        message="the run's budget of world-model steps was spent "
                        f"before step {len(steps) + 1} of this task",
                    )
                    break
                action = candidate.act(observation)
                message = {"role": "assistant", "content": action}
                reply, prediction = sessions.step(
                    run_id, session.id, message, now(), world_model
                )
                observation = reply["content"]
                steps.append(
                    Step(
                        action=action,
                        observation=prediction.observation,
                        terminal=prediction.terminal,
                        grounding=list(prediction.grounding),
                    )
                )
                if prediction.terminal:
                    stop = "terminal"
                    break
            else:
                stop = "actions_exhausted"
        except SessionError as exc:
            stop = "failed"
            failure = Failure(name=exc.name, message=exc.message)
        finally:
            if session is not None:
                sessions.end(run_id, session.id)
    finished = now()
    costs = Costs(
        candidate=CandidateCost(actions=candidate.actions, chars=candidate.chars),
        world_model=WorldModelCost(calls=world_model.calls, chars=world_model.chars),
        embedding=EmbeddingCost(queries=world_model.queries),
        orchestration=OrchestrationCost(seconds=(finished - started).total_seconds()),
    )
    return Rollout(
        plan_hash=digest,
        task_id=task.id,
        index_id=index.manifest.id,
        steps=steps,
        stop_reason=stop,
        failure=failure,
        costs=costs,
        started_at=started,
        finished_at=finished,
    )


def _check_out_folder(folder: Path, plan: Plan, digest: str) -> dict[str, Rollout]:
    """Every rollout already in the folder, each checked against this plan."""
    tasks = {t.id for t in plan.tasks}
    found: dict[str, Rollout] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.json")):
        rollout = read_rollout(path)
        if rollout.plan_hash != digest or rollout.task_id not in tasks:
            raise PlanError(
                f"{path}: made by plan {rollout.plan_hash[:12]}, this plan is "
                f"{digest[:12]}: the plan or the index changed since these rollouts "
                "were written; rollouts are never mixed across plans, so use a new "
                "out folder (or restore the plan and index)"
            )
        if path.stem != rollout.task_id:
            raise PlanError(
                f"{path}: holds the rollout of task {rollout.task_id!r}; files are "
                "never renamed: use a new out folder"
            )
        found[rollout.task_id] = rollout
    return found


def run_plan(plan_path: Path, *, now: Callable[[], datetime]) -> RunReport:
    """Run every cell of the plan that has no rollout yet, in plan order, and report
    on all of them.

    Raises:
        PlanError: the plan is invalid, or the out folder holds rollouts of another
            plan or index (or something that is not a rollout).
        IndexRefused: is wrapped in ``PlanError`` (the index failed verification).
    """
    plan = load_plan(plan_path)
    base = plan_path.parent
    index_path = base / plan.run.index
    try:
        index = load(index_path)
    except IndexRefused as exc:
        raise PlanError(f"{plan_path}: [run] index {index_path}: {exc}") from exc
    digest = plan_hash(plan, index.manifest.id)
    folder = base / plan.run.out / ROLLOUTS
    existing = _check_out_folder(folder, plan, digest)
    folder.mkdir(parents=True, exist_ok=True)

    remaining = plan.run.budget_steps
    completed = resumed = 0
    failures: Counter[str] = Counter()
    stops: Counter[str] = Counter()
    paths: list[Path] = []
    for task in plan.tasks:
        path = folder / f"{task.id}.json"
        rollout = existing.get(task.id)
        if rollout is not None:
            resumed += 1
        else:
            rollout = _run_cell(
                task,
                run_id=plan.run.id,
                digest=digest,
                index=index,
                remaining=remaining,
                now=now,
            )
            _write_once(path, msgspec.json.format(msgspec.json.encode(rollout)))
            completed += 1
        remaining = max(0, remaining - rollout.costs.world_model.calls)
        stops[rollout.stop_reason] += 1
        if rollout.failure is not None:
            failures[rollout.failure.name] += 1
        paths.append(path)
    return RunReport(
        run_id=plan.run.id,
        plan_hash=digest,
        cells=len(plan.tasks),
        completed=completed,
        resumed=resumed,
        failures=dict(sorted(failures.items())),
        stops=dict(sorted(stops.items())),
        rollouts=tuple(paths),
    )

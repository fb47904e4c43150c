"""Evaluation runs of the grounded simulator: a plan of tasks, one immutable rollout
per task (a cell), resumable and checked against the plan.

A plan (TOML, see ``examples/sim-plan.toml``) names a run, the read-only transition
index the world model is grounded on, an output folder, a budget of world-model steps
for the whole run, a candidate and its tasks. Two clients are kept apart: the
*candidate* (the behaviour being evaluated: here a scripted one that takes the
actions each task lists, in order) and the *world model* (the
:class:`~worldline.actors.simulator.provider.LocalProvider` over the index, which
predicts the reply to each action from the nearest real transitions). Neither sees the
other's state; each rollout records their economics separately, with the retrieval
embedding and the orchestration.

Every cell ends in a rollout written once to ``<out>/rollouts/<task id>.json``:

* a session is opened and each scripted action is stepped until the prediction is
  terminal (``terminal``) or the actions run out (``actions_exhausted``); an action
  written ``name(arguments)`` whose ``name`` the task declares in ``tools`` is sent
  as an OpenAI-style tool call and answered with a predicted tool result, any other
  action as assistant text;
* a session refusal (empty action, too many messages, no grounding...) stops the cell
  with ``failed`` and the refusal's name;
* when the run's budget is spent before a step, the cell stops with ``budget`` and
  ``budget_exhausted``: recorded like any other failure, so it stays in the
  denominator instead of leaving a hole.

Runs resume: a cell whose rollout exists is read back, not redone, provided its
content matches its own sha256 (an edited rollout is refused, naming the file) and it
carries this plan's hash; one made by another plan (or over another index)
is an error, never silently mixed in. Resumed rollouts count against the budget just
as they did when they ran, so a resumed run ends where an uninterrupted one would.

Rollouts are evaluation artifacts, not observations: nothing here can add one to an
index (:func:`~worldline.actors.simulator.index.build` refuses anything but a real
``Transition``), so the world model never retrieves its own earlier guesses.

Pure apart from reading the plan and the index and writing rollouts: the clock is an
argument and the session ids come from a random source seeded by the plan hash.

The plan (its parsing, checks and hash) is ``plan.py``; what a cell leaves behind (the
rollout, written once) is ``rollouts.py``; this module runs the cells.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from worldline.actors.simulator.index import IndexRefused, load
from worldline.actors.simulator.plan import (
    Plan,
    PlanError,
    TaskSpec,
    load_plan,
    plan_hash,
)
from worldline.actors.simulator.provider import LocalProvider
from worldline.actors.simulator.rollouts import (
    ROLLOUTS,
    CandidateCost,
    Costs,
    EmbeddingCost,
    Failure,
    OrchestrationCost,
    Rollout,
    Step,
    StopReason,
    WorldModelCost,
    read_rollout,
    rollout_bytes,
    seal,
    write_once,
)
from worldline.actors.simulator.sessions import (
    Kind,
    Prediction,
    Session,
    SessionError,
    Sessions,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime
    from pathlib import Path

    from worldline.actors.simulator.index import TransitionIndex

__all__ = ["RunReport", "run_plan"]


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

    def __call__(
        self,
        session: Session,
        action: str,
        kind: Kind = "message",
        *,
        best_guess: bool = False,
    ) -> Prediction:
        self.calls += 1
        try:
            prediction = self._provider(session, action, kind, best_guess=best_guess)
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


_CALL: Final = re.compile(r"\s*([A-Za-z_][\w.-]*)\((.*)\)\s*", re.DOTALL)


def _message(action: str, tools: list[str], number: int) -> dict[str, Any]:
    """The assistant message for a scripted action: a tool call (id ``call-<n>``)
    when the action reads ``name(arguments)`` and the task declares ``name`` among
    its tools (empty arguments are ``{}``), else a text message."""
    found = _CALL.fullmatch(action)
    if found is None or found[1] not in tools:
        return {"role": "assistant", "content": action}
    call = {"name": found[1], "arguments": found[2].strip() or "{}"}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"call-{number}", "type": "function", "function": call}],
    }


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
            message = _message(action, task.tools, candidate.actions)
            # A run records every step: one below the similarity floor is the
            # nearest real transition's, flagged grounded=False (never silent).
            replies, prediction = sessions.step(
                run_id, session.id, message, now(), world_model, best_guess=True
            )
            observation = replies[0]["content"]
            steps.append(
                Step(
                    action=action,
                    observation=prediction.observation,
                    terminal=prediction.terminal,
                    grounding=list(prediction.grounding),
                    grounded=prediction.grounded,
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
            rollout = seal(rollout)
            write_once(path, rollout_bytes(rollout))
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

"""An evaluation run's plan: a TOML file naming the run, the transition index, the
out folder, the budget, the candidate and its tasks (see ``examples/sim-plan.toml``);
parsed and checked here, with clear errors, and hashed so rollouts stay tied to it.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from typing import TYPE_CHECKING, Annotated, Any, Final

import msgspec

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "CANDIDATES",
    "WORLD_MODELS",
    "CandidateSpec",
    "Plan",
    "PlanError",
    "RunSpec",
    "TaskSpec",
    "load_plan",
    "parse_plan",
    "plan_hash",
]

WORLD_MODELS: Final = ("local",)
CANDIDATES: Final = ("scripted",)
MAX_PLAN_BYTES: Final = 4 * 1024 * 1024

TaskId = Annotated[
    str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
]  # a task id is also its rollout's file name


class PlanError(ValueError):
    """A plan that cannot be run, or an out folder that does not belong to it; the
    message names the file, the key or the cell, and the fix."""


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
    # Tools the candidate calls: an action "name(arguments)" naming one of them is
    # sent as a tool call, any other action as text.
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
        if not task.actions:
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
    gives the same hash, and the same rollouts, in any folder: identical but for the
    wall-clock fields (``started_at``, ``finished_at``, the orchestration seconds and
    so the rollout's ``sha256``), byte-identical under the same clock.
    """
    fields: dict[str, Any] = msgspec.to_builtins(plan)
    del fields["run"]["index"], fields["run"]["out"]
    canonical = msgspec.json.encode(fields, order="sorted")
    return hashlib.sha256(canonical + b"\n" + index_id.encode()).hexdigest()

"""What one cell of an evaluation run leaves behind: a :class:`Rollout`, written once
to ``<out>/rollouts/<task id>.json`` and never overwritten."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from worldline.actors.simulator.plan import PlanError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "ROLLOUTS",
    "CandidateCost",
    "Costs",
    "EmbeddingCost",
    "Failure",
    "OrchestrationCost",
    "Rollout",
    "Step",
    "StopReason",
    "WorldModelCost",
    "read_rollout",
    "write_once",
]

ROLLOUTS: Final = "rollouts"  # folder under the run's out folder

StopReason = Literal["terminal", "actions_exhausted", "unsupported", "budget", "failed"]


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


def write_once(path: Path, data: bytes) -> None:
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

"""What one cell of an evaluation run leaves behind: a :class:`Rollout`, written once
to ``<out>/rollouts/<task id>.json`` and never overwritten.

A rollout is sealed (:func:`seal`): its ``sha256`` is the hash of its canonical JSON
with that field empty, so an edited rollout no longer matches and
:func:`read_rollout` refuses it, naming the file. Redoing a cell gives the same
rollout (the same session ids, steps, grounding and costs) except for the three
fields that record the wall clock when the run's clock is real: ``started_at``,
``finished_at`` and ``costs.orchestration.seconds`` (and so ``sha256``); under the
same clock (tests pass a fixed one) the files are byte-identical. The wall-clock
fields are kept because the orchestration cost is part of a cell's economics."""

from __future__ import annotations

import hashlib
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
    "rollout_bytes",
    "seal",
    "write_once",
]

ROLLOUTS: Final = "rollouts"  # folder under the run's out folder

StopReason = Literal["terminal", "actions_exhausted", "unsupported", "budget", "failed"]


class Step(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One turn: the candidate's action and the world model's predicted reply
    (``grounded`` False: the nearest real transition was below the similarity
    floor, a best guess; omitted when True, so earlier rollouts keep their bytes)."""

    action: str
    observation: str  # predicted, never observed
    terminal: bool
    grounding: list[str]  # ids of the real transitions it was conditioned on
    grounded: bool = True


class Failure(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # stable: budget_exhausted, or a session refusal (no_grounding, ...)
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
    sha256: str = ""  # of the canonical JSON of everything else (see seal)


_ROLLOUT: Final = msgspec.json.Decoder(Rollout)


def _digest(rollout: Rollout) -> str:
    unsealed = msgspec.structs.replace(rollout, sha256="")
    return hashlib.sha256(msgspec.json.encode(unsealed)).hexdigest()


def seal(rollout: Rollout) -> Rollout:
    """The rollout with ``sha256`` set to the hash of its content."""
    return msgspec.structs.replace(rollout, sha256=_digest(rollout))


def rollout_bytes(rollout: Rollout) -> bytes:
    """What a rollout file holds: the sealed rollout, as indented JSON."""
    return msgspec.json.format(msgspec.json.encode(seal(rollout)))


def read_rollout(path: Path) -> Rollout:
    """A rollout file whose content matches its ``sha256``, or :class:`PlanError`
    saying it is not one, or that it was changed after it was written."""
    try:
        rollout = _ROLLOUT.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError) as exc:
        raise PlanError(
            f"{path}: not a readable rollout ({exc}); the out folder holds only what "
            "a run wrote: use a new out folder"
        ) from exc
    if not rollout.sha256:
        raise PlanError(
            f"{path}: carries no content hash (written by an older worldline, or "
            "edited): it cannot be checked, so it is not resumed; use a new out "
            "folder"
        )
    if rollout.sha256 != _digest(rollout):
        raise PlanError(
            f"{path}: its content does not match its sha256: the rollout was edited "
            "after it was written; a rollout is never changed: delete it to redo the "
            "cell, or use a new out folder"
        )
    return rollout


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

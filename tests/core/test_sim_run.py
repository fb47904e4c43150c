"""Evaluation runs of the grounded simulator: one immutable, sealed rollout per cell,
resumed and checked against the plan and its own hash, tool calls simulated, failures
(budget, session limits) recorded in the denominator, and byte-identical rollouts
under a fixed clock."""

from __future__ import annotations

import hashlib
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec
import pytest

from tests.support import TRACES
from worldline.actors.extractor.traces import parse_trace
from worldline.actors.simulator.evaluate import run_plan
from worldline.actors.simulator.index import build, load, save
from worldline.actors.simulator.plan import PlanError, load_plan, parse_plan, plan_hash
from worldline.actors.simulator.rollouts import ROLLOUTS, Rollout, read_rollout
from worldline.protocols.messages import Transition

if TYPE_CHECKING:
    from collections.abc import Callable

T0: Final = datetime(2026, 1, 1, tzinfo=UTC)
EXAMPLE: Final = Path(__file__).resolve().parents[2] / "examples" / "sim-plan.toml"

# (id, lineage, task, context, action, observation, final): the context is the
# conversation before the action, as a session's transcript reads.
RAN: Final = "assistant: run the unit tests again\nuser: two tests still fail"
OPENED: Final = (
    RAN + "\nassistant: open the failing test file\nuser: test_parser.py shown"
)
REAL: Final = [
    ("t-build-1", "lin-build", "fix the failing build", "",
     "run the unit tests again", "two tests still fail", False),
    ("t-build-2", "lin-build", "fix the failing build", RAN,
     "open the failing test file", "test_parser.py shown", False),
    ("t-build-3", "lin-build", "fix the failing build", OPENED,
     "submit the patch", "patch accepted, issue closed", True),
    ("t-order-1", "lin-order", "refund my order", "",
     "lookup order 4471", "order 4471 shipped tuesday", False),
    ("t-order-2", "lin-order", "refund my order", "",
     "issue a refund for order 4471", "refund issued", False),
    ("t-order-3", "lin-order", "refund my order", "",
     "lookup_order(4471)", '{"status": "shipped"}', False),
]  # fmt: skip


def fixed() -> datetime:
    return T0


def ticking() -> Callable[[], datetime]:
    """A clock that moves one second per reading."""
    state = {"t": T0}

    def now() -> datetime:
        state["t"] += timedelta(seconds=1)
        return state["t"]

    return now


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    real = [
        Transition(
            id=i,
            lineage=lin,
            task=task,
            context=context,
            action=action,
            observation=obs,
            final=final,
            pairing="id" if "(" in action else "turn",
        )
        for i, lin, task, context, action, obs, final in REAL
    ]
    # held_out=0: every lineage is fit, so every transition can ground a prediction.
    out = tmp_path_factory.mktemp("sim") / "index"
    save(build(real, sources=["hand-made"], held_out=0.0), out)
    return out


def task_toml(
    id: str,
    task: str,
    actions: list[str],
    *,
    tools: list[str] | None = None,
    extra: str = "",
) -> str:
    lines = [
        "[[tasks]]",
        f"id = {id!r}",
        f"task = {task!r}",
        f"actions = {msgspec.json.encode(actions).decode()}",
    ]
    if tools is not None:
        lines.append(f"tools = {msgspec.json.encode(tools).decode()}")
    return "\n".join(lines) + "\n" + extra + "\n"


BUILD: Final = task_toml(
    "build",
    "fix the failing build",
    ["run the unit tests again", "open the failing test file", "submit the patch"],
)
ORDER: Final = task_toml("order", "refund my order", ["lookup order 4471"])
TOOLS: Final = task_toml(
    "tools", "refund my order", ["lookup_order(4471)"], tools=["lookup_order"]
)


def write_plan(
    folder: Path,
    index: Path,
    tasks: str,
    *,
    out: str = "out",
    budget: int = 100,
    name: str = "plan.toml",
    run_extra: str = "",
    world_model: str = "local",
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(
        "[run]\n"
        'id = "r1"\n'
        f"index = {str(index)!r}\n"
        f"out = {out!r}\n"
        f"budget_steps = {budget}\n"
        f"world_model = {world_model!r}\n"
        f"{run_extra}\n"
        '[candidate]\nkind = "scripted"\n\n' + tasks
    )
    return path


def rollout(plan: Path, task_id: str, out: str = "out") -> Rollout:
    return read_rollout(plan.parent / out / ROLLOUTS / f"{task_id}.json")


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {
        p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir())
    }


# --- a run ---------------------------------------------------------------------------


def test_a_run_writes_one_grounded_rollout_per_task(
    tmp_path: Path, index_dir: Path
) -> None:
    plan = write_plan(tmp_path, index_dir, BUILD + ORDER)
    report = run_plan(plan, now=ticking())
    assert (report.cells, report.completed, report.resumed) == (2, 2, 0)
    assert report.failures == {}
    assert report.rollouts == (
        tmp_path / "out" / ROLLOUTS / "build.json",
        tmp_path / "out" / ROLLOUTS / "order.json",
    )
    assert sorted(p.name for p in (tmp_path / "out" / ROLLOUTS).iterdir()) == [
        "build.json",
        "order.json",
    ]
    index = load(index_dir)

    build_run = rollout(plan, "build")
    assert [s.action for s in build_run.steps] == [
        "run the unit tests again",
        "open the failing test file",
        "submit the patch",
    ]
    # Each prediction is the observation of a real transition, and says which.
    assert [s.observation for s in build_run.steps] == [
        "two tests still fail",
        "test_parser.py shown",
        "patch accepted, issue closed",
    ]
    assert [s.grounding[0] for s in build_run.steps] == [
        "t-build-1",
        "t-build-2",
        "t-build-3",
    ]
    assert [s.terminal for s in build_run.steps] == [False, False, True]
    assert build_run.stop_reason == "terminal"
    assert build_run.failure is None
    assert build_run.index_id == index.manifest.id
    assert build_run.plan_hash == report.plan_hash
    assert build_run.task_id == "build"

    costs = build_run.costs
    assert costs.candidate.actions == 3
    assert costs.candidate.chars == sum(len(s.action) for s in build_run.steps)
    assert costs.world_model.calls == 3
    assert costs.world_model.chars == sum(len(s.observation) for s in build_run.steps)
    assert costs.embedding.queries == 3
    # The ticking clock: start, one reading per session start and step, finish.
    assert costs.orchestration.seconds == 5.0
    assert build_run.finished_at - build_run.started_at == timedelta(seconds=5)

    order_run = rollout(plan, "order")
    assert [s.observation for s in order_run.steps] == ["order 4471 shipped tuesday"]
    assert order_run.stop_reason == "actions_exhausted"
    assert order_run.failure is None
    assert report.stops == {"actions_exhausted": 1, "terminal": 1}
    assert report.summary() == (
        f"run r1 (plan {report.plan_hash[:12]}): 2 cells, 2 completed, 0 resumed, "
        "0 failed"
    )


def test_excluded_lineages_are_not_retrieved(tmp_path: Path, index_dir: Path) -> None:
    tasks = task_toml(
        "order",
        "refund my order",
        ["lookup order 4471"],
        extra='lineage_exclude = ["lin-order"]',
    )
    plan = write_plan(tmp_path, index_dir, tasks)
    run_plan(plan, now=fixed)
    (step,) = rollout(plan, "order").steps
    assert not any(g.startswith("t-order") for g in step.grounding)


def test_a_rerun_resumes_every_cell_without_rewriting(
    tmp_path: Path, index_dir: Path
) -> None:
    plan = write_plan(tmp_path, index_dir, BUILD + ORDER + TOOLS)
    first = run_plan(plan, now=fixed)
    before = snapshot(tmp_path / "out" / ROLLOUTS)
    again = run_plan(plan, now=ticking())  # another clock: nothing is redone
    assert (again.cells, again.completed, again.resumed) == (3, 0, 3)
    assert again.failures == first.failures == {}
    assert again.rollouts == first.rollouts
    assert snapshot(tmp_path / "out" / ROLLOUTS) == before
    assert {p.stat().st_mode & 0o777 for p in first.rollouts} == {0o444}
    assert {p.suffix for p in (tmp_path / "out" / ROLLOUTS).iterdir()} == {".json"}
    assert again.summary().endswith("3 cells, 0 completed, 3 resumed, 0 failed")


def test_an_interrupted_run_resumes_the_missing_cells(
    tmp_path: Path, index_dir: Path
) -> None:
    plan = write_plan(tmp_path, index_dir, BUILD + ORDER)
    run_plan(plan, now=fixed)
    lost = tmp_path / "out" / ROLLOUTS / "order.json"
    kept = (tmp_path / "out" / ROLLOUTS / "build.json").read_bytes()
    whole = lost.read_bytes()
    lost.unlink()
    report = run_plan(plan, now=fixed)
    assert (report.completed, report.resumed) == (1, 1)
    assert lost.read_bytes() == whole
    assert (tmp_path / "out" / ROLLOUTS / "build.json").read_bytes() == kept


def test_a_changed_plan_cannot_reuse_the_out_folder(
    tmp_path: Path, index_dir: Path
) -> None:
    plan = write_plan(tmp_path, index_dir, BUILD + ORDER)
    run_plan(plan, now=fixed)
    before = snapshot(tmp_path / "out" / ROLLOUTS)
    changed = ORDER.replace("lookup order 4471", "lookup order 4472")
    write_plan(tmp_path, index_dir, BUILD + changed)
    with pytest.raises(PlanError, match="plan or the index changed") as caught:
        run_plan(plan, now=fixed)
    assert "use a new out folder" in str(caught.value)
    assert snapshot(tmp_path / "out" / ROLLOUTS) == before
    # In a new out folder the changed plan runs.
    write_plan(tmp_path, index_dir, BUILD + changed, out="out2")
    assert run_plan(plan, now=fixed).completed == 2


def test_a_removed_task_is_a_changed_plan(tmp_path: Path, index_dir: Path) -> None:
    plan = write_plan(tmp_path, index_dir, BUILD + ORDER)
    run_plan(plan, now=fixed)
    (tmp_path / "out" / ROLLOUTS / "order.json").unlink()
    write_plan(tmp_path, index_dir, ORDER)  # "build" is gone, its rollout is not
    with pytest.raises(PlanError, match="plan or the index changed"):
        run_plan(plan, now=fixed)


def test_another_index_cannot_reuse_the_out_folder(
    tmp_path: Path, index_dir: Path
) -> None:
    plan = write_plan(tmp_path, index_dir, ORDER)
    run_plan(plan, now=fixed)
    other = tmp_path / "other-index"
    real = load(index_dir).transitions
    save(build(real[:-1], held_out=0.0), other)
    write_plan(tmp_path, other, ORDER)
    with pytest.raises(PlanError, match="plan or the index changed"):
        run_plan(plan, now=fixed)


def test_a_task_with_tools_steps_tool_calls(tmp_path: Path, index_dir: Path) -> None:
    # "lookup_order(4471)" is a declared tool: a tool call, answered by the real tool
    # result; undeclared, the same text is a message, answered by a message.
    tasks = TOOLS + task_toml("text", "refund my order", ["lookup_order(4471)"])
    plan = write_plan(tmp_path, index_dir, tasks)
    report = run_plan(plan, now=fixed)
    (call,) = rollout(plan, "tools").steps
    assert call.observation == '{"status": "shipped"}'
    assert call.grounding == ["t-order-3"]  # the only tool result: never a message
    (text,) = rollout(plan, "text").steps
    assert "t-order-3" not in text.grounding
    assert text.observation != call.observation
    assert report.failures == {}


def test_an_edited_rollout_is_refused_on_resume(
    tmp_path: Path, index_dir: Path
) -> None:
    plan = write_plan(tmp_path, index_dir, BUILD + ORDER)
    run_plan(plan, now=fixed)
    path = tmp_path / "out" / ROLLOUTS / "order.json"
    original = path.read_bytes()
    assert msgspec.json.decode(original)["sha256"]
    path.chmod(0o644)
    path.write_bytes(original.replace(b"order 4471 shipped", b"order 4471 lost in"))
    with pytest.raises(PlanError, match="was edited") as caught:
        run_plan(plan, now=fixed)
    assert str(path) in str(caught.value)
    # Without its hash (an older rollout, or one stripped), it is refused too.
    unsealed = msgspec.json.decode(original)
    del unsealed["sha256"]
    path.write_bytes(msgspec.json.encode(unsealed))
    with pytest.raises(PlanError, match="no content hash"):
        run_plan(plan, now=fixed)
    # Restored byte for byte, it resumes.
    path.write_bytes(original)
    assert run_plan(plan, now=fixed).resumed == 2


def test_a_redone_rollout_differs_only_in_the_wall_clock(
    tmp_path: Path, index_dir: Path
) -> None:
    plan = write_plan(tmp_path, index_dir, BUILD)
    run_plan(plan, now=fixed)
    path = tmp_path / "out" / ROLLOUTS / "build.json"
    first = msgspec.json.decode(path.read_bytes())
    path.unlink()
    run_plan(plan, now=ticking())
    again = msgspec.json.decode(path.read_bytes())
    clock = ("started_at", "finished_at", "sha256")
    assert {k for k in first if first[k] != again[k]} == {*clock, "costs"}
    first["costs"].pop("orchestration")
    again["costs"].pop("orchestration")
    assert first["costs"] == again["costs"]
    path.unlink()
    run_plan(plan, now=fixed)  # the same clock: byte-identical
    assert msgspec.json.decode(path.read_bytes()) == first | {
        "costs": msgspec.json.decode(path.read_bytes())["costs"]
    }


def test_a_spent_budget_is_a_recorded_failure_in_the_denominator(
    tmp_path: Path, index_dir: Path
) -> None:
    two = ["run the unit tests again", "open the failing test file"]
    tasks = "".join(task_toml(f"c{i}", "fix the failing build", two) for i in (1, 2, 3))
    plan = write_plan(tmp_path, index_dir, tasks, budget=3)
    report = run_plan(plan, now=fixed)
    c1, c2, c3 = (rollout(plan, f"c{i}") for i in (1, 2, 3))
    assert (c1.stop_reason, len(c1.steps)) == ("actions_exhausted", 2)
    assert (c2.stop_reason, len(c2.steps)) == ("budget", 1)  # stopped mid-cell
    assert (c3.stop_reason, len(c3.steps)) == ("budget", 0)  # never dispatched
    for cell in (c2, c3):
        assert cell.failure is not None
        assert cell.failure.name == "budget_exhausted"
    assert [c.costs.world_model.calls for c in (c1, c2, c3)] == [2, 1, 0]
    assert c3.costs.candidate.actions == 0
    assert report.cells == 3
    assert report.completed == 3
    assert report.failures == {"budget_exhausted": 2}
    assert report.stops == {"actions_exhausted": 1, "budget": 2}
    assert len(report.rollouts) == 3
    assert "3 cells" in report.summary()
    assert "2 failed (budget_exhausted 2)" in report.summary()
    # Resumed, the budget is accounted the same way and nothing changes.
    again = run_plan(plan, now=fixed)
    assert (again.resumed, again.failures) == (3, report.failures)


def test_a_budget_of_zero_records_every_cell(tmp_path: Path, index_dir: Path) -> None:
    plan = write_plan(tmp_path, index_dir, BUILD + ORDER + TOOLS, budget=0)
    report = run_plan(plan, now=fixed)
    assert report.cells == 3
    assert report.failures == {"budget_exhausted": 3}


@pytest.mark.parametrize(
    ("actions", "name", "steps"),
    [
        # Default limits: 128 messages, two per turn, so the 65th turn is refused.
        (["lookup order 4471"] * 70, "too_many_messages", 64),
        (["lookup order 4471", "   "], "empty_message", 1),
    ],
)
def test_a_session_refusal_is_a_recorded_failure(
    tmp_path: Path, index_dir: Path, actions: list[str], name: str, steps: int
) -> None:
    # No transition of the order lineage is final, so only a limit can stop it.
    tasks = task_toml("long", "refund my order", actions) + BUILD
    plan = write_plan(tmp_path, index_dir, tasks, budget=1000)
    report = run_plan(plan, now=fixed)
    cell = rollout(plan, "long")
    assert cell.stop_reason == "failed"
    assert cell.failure is not None
    assert cell.failure.name == name
    assert len(cell.steps) == steps
    assert cell.costs.world_model.calls == steps  # refused before dispatch
    assert cell.costs.candidate.actions == steps + 1  # the refused one was produced
    assert report.failures == {name: 1}
    assert rollout(plan, "build").failure is None  # the next cell still runs


def test_no_grounding_is_a_recorded_failure(tmp_path: Path, index_dir: Path) -> None:
    tasks = task_toml(
        "alone",
        "refund my order",
        ["lookup order 4471"],
        extra='lineage_exclude = ["lin-order", "lin-build"]',
    )
    plan = write_plan(tmp_path, index_dir, tasks)
    run_plan(plan, now=fixed)
    cell = rollout(plan, "alone")
    assert cell.failure is not None
    assert cell.failure.name == "no_grounding"
    assert (cell.costs.world_model.calls, cell.costs.embedding.queries) == (1, 0)


def test_rollouts_are_byte_identical_in_fresh_folders(
    tmp_path: Path, index_dir: Path
) -> None:
    tasks = BUILD + ORDER + TOOLS
    a = write_plan(tmp_path, index_dir, tasks, out="a", name="a.toml")
    b = write_plan(tmp_path, index_dir, tasks, out="b", name="b.toml")
    # A copy of the index elsewhere: where it lies is not what it holds.
    moved = tmp_path / "moved-index"
    shutil.copytree(index_dir, moved)
    c = write_plan(tmp_path / "c", moved, tasks, out="c")
    reports = [run_plan(p, now=fixed) for p in (a, b, c)]
    assert len({r.plan_hash for r in reports}) == 1
    folders = [tmp_path / "a", tmp_path / "b", tmp_path / "c" / "c"]
    contents = [
        {p.name: p.read_bytes() for p in (f / ROLLOUTS).iterdir()} for f in folders
    ]
    assert len(contents[0]) == 3
    assert contents[0] == contents[1] == contents[2]


def test_a_run_leaves_the_index_untouched(tmp_path: Path, index_dir: Path) -> None:
    def digest() -> dict[str, str]:
        return {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in index_dir.iterdir()
        }

    before = digest()
    run_plan(write_plan(tmp_path, index_dir, BUILD + ORDER), now=fixed)
    assert digest() == before
    assert sorted(p.name for p in index_dir.iterdir()) == sorted(before)


def test_a_rollout_can_never_be_indexed(tmp_path: Path, index_dir: Path) -> None:
    plan = write_plan(tmp_path, index_dir, ORDER)
    run_plan(plan, now=fixed)
    with pytest.raises(TypeError, match="not a Transition"):
        build([rollout(plan, "order")])  # type: ignore[list-item]


def test_a_stray_file_in_the_out_folder_is_refused(
    tmp_path: Path, index_dir: Path
) -> None:
    plan = write_plan(tmp_path, index_dir, ORDER)
    (tmp_path / "out" / ROLLOUTS).mkdir(parents=True)
    (tmp_path / "out" / ROLLOUTS / "order.json").write_text("{}")
    with pytest.raises(PlanError, match="not a readable rollout"):
        run_plan(plan, now=fixed)


# --- the plan ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"run_extra": "budget = 3"}, r"unknown key 'budget' in \[run\]"),
        (
            {"tasks_extra": "expected = 'x'"},
            r"unknown key 'expected' in \[\[tasks\]\] number 1",
        ),
        ({"top": "[judge]\nkind = 'x'\n"}, "unknown key 'judge' in the top level"),
    ],
)
def test_the_plan_rejects_unknown_keys(
    tmp_path: Path, index_dir: Path, edit: dict[str, str], message: str
) -> None:
    tasks = task_toml("order", "refund", ["a"], extra=edit.get("tasks_extra", ""))
    plan = write_plan(
        tmp_path,
        index_dir,
        edit.get("top", "") + tasks,
        run_extra=edit.get("run_extra", ""),
    )
    with pytest.raises(PlanError, match=message) as caught:
        run_plan(plan, now=fixed)
    assert str(plan) in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_an_unknown_candidate_key_names_the_section() -> None:
    text = (
        '[run]\nid = "r"\nindex = "i"\nout = "o"\nbudget_steps = 1\n'
        '[candidate]\nkind = "scripted"\nmodel = "gpt"\n' + ORDER
    )
    with pytest.raises(PlanError, match=r"unknown key 'model' in \[candidate\]"):
        parse_plan(text)


def test_the_plan_rejects_unknown_world_models(tmp_path: Path, index_dir: Path) -> None:
    plan = write_plan(tmp_path, index_dir, ORDER, world_model="openai")
    with pytest.raises(PlanError, match="world_model 'openai' is not supported") as e:
        run_plan(plan, now=fixed)
    assert "supported: 'local'" in str(e.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[run]\n", "not valid TOML|invalid plan"),
        ("x = [", "not valid TOML"),
        (
            '[run]\nid = "r"\nindex = "i"\nout = "o"\nbudget_steps = -1\n'
            '[candidate]\nkind = "scripted"\n' + ORDER,
            "invalid plan.*budget_steps",
        ),
        (
            '[run]\nid = "r"\nindex = "i"\nout = "o"\nbudget_steps = 1\n'
            '[candidate]\nkind = "llm"\n' + ORDER,
            "kind 'llm' is not supported; supported: 'scripted'",
        ),
        (
            '[run]\nid = "r"\nindex = "i"\nout = "o"\nbudget_steps = 1\n'
            '[candidate]\nkind = "scripted"\n' + ORDER + ORDER,
            "task id 'order' appears twice",
        ),
        (
            '[run]\nid = "r"\nindex = "i"\nout = "o"\nbudget_steps = 1\n'
            '[candidate]\nkind = "scripted"\n' + task_toml("x", "t", []),
            "task 'x' has no actions",
        ),
        (
            '[run]\nid = "r"\nindex = "i"\nout = "o"\nbudget_steps = 1\n'
            '[candidate]\nkind = "scripted"\n' + task_toml("../x", "t", ["a"]),
            "invalid plan.*tasks",
        ),
    ],
)
def test_invalid_plans_are_refused_clearly(text: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        parse_plan(text)


def test_a_missing_index_is_a_plan_error(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, tmp_path / "nowhere", ORDER)
    with pytest.raises(PlanError, match="index"):
        run_plan(plan, now=fixed)


def test_the_hash_covers_the_plan_and_the_index_not_the_locations() -> None:
    head = '[run]\nid = "r"\nindex = "{}"\nout = "{}"\nbudget_steps = 1\n'
    tail = '[candidate]\nkind = "scripted"\n' + ORDER
    one = parse_plan(head.format("i", "o") + tail)
    moved = parse_plan(head.format("elsewhere/i", "o2") + tail)
    spelled = parse_plan(
        head.format("i", "o") + 'world_model = "local"\n' + tail + 'context = ""\n'
    )
    other = parse_plan(head.format("i", "o") + tail.replace("4471", "4472"))
    x, y = "a" * 64, "b" * 64
    assert plan_hash(one, x) == plan_hash(moved, x) == plan_hash(spelled, x)
    assert plan_hash(one, x) != plan_hash(one, y)
    assert plan_hash(one, x) != plan_hash(other, x)


# --- the example ---------------------------------------------------------------------


def test_the_example_plan_is_valid() -> None:
    plan = load_plan(EXAMPLE)
    assert plan.run.index == "sim-index"
    assert plan.run.world_model == "local"
    assert len(plan.tasks) in (2, 3)
    assert all(t.tools for t in plan.tasks)  # every task calls its tools


def test_the_example_runs_on_an_index_of_the_real_traces(tmp_path: Path) -> None:
    transitions: list[Any] = []
    for path in sorted(TRACES.glob("*/*")):
        if path.name != "LICENSE":
            transitions += parse_trace(path.name, path.read_bytes()).transitions
    save(build(transitions), tmp_path / "sim-index")
    plan = tmp_path / "sim-plan.toml"
    shutil.copy(EXAMPLE, plan)
    report = run_plan(plan, now=fixed)
    assert report.cells == len(load_plan(EXAMPLE).tasks)
    assert report.failures == {}
    swe = rollout(plan, "swe-missing-colon", out="sim-runs")
    assert swe.steps
    # Its own conversation is excluded, so no step is grounded on it.
    own = {t.id for t in transitions if t.lineage == "lin-991a2c9426059047"}
    assert own
    assert not own & {g for s in swe.steps for g in s.grounding}

"""The read-only transition index: content-addressed artifacts, refusals by name,
lineage exclusion before scoring, and retrieval that never looks at observations."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import pytest

from worldline.actors.belief_model.embedding import DIMENSIONS, EMBEDDER_ID, embed
from worldline.actors.simulator.index import (
    MANIFEST,
    TRANSITIONS,
    VECTORS,
    IndexRefused,
    TransitionIndex,
    build,
    load,
    query_text,
    retrieve,
    save,
)
from worldline.protocols.messages import Transition
from worldline.protocols.simulator import TraceIssue

if TYPE_CHECKING:
    from pathlib import Path

TOPICS = [
    ("book a flight to lisbon", "search flights for friday", "three flights found"),
    ("refund my order", "lookup_order 4471", "order 4471 shipped tuesday"),
    ("reset my password", "send reset link to the account email", "link received"),
    ("plan a team offsite", "propose three venues near the coast", "venue two works"),
    ("fix the failing build", "run the unit tests again", "two tests still fail"),
    ("translate the menu", "translate the dessert section first", "thanks, next"),
]


class Query(TypedDict):
    task: str
    context: str
    action: str


def tr(
    id: str,
    lineage: str,
    task: str,
    action: str,
    observation: str = "ok",
    context: str = "",
) -> Transition:
    return Transition(
        id=id,
        lineage=lineage,
        task=task,
        context=context,
        action=action,
        observation=observation,
    )


def corpus(lineages: int = 6, per: int = 3) -> list[Transition]:
    return [
        tr(
            f"t{li:02d}-{step}",
            f"lin{li}",
            TOPICS[li % len(TOPICS)][0],
            f"{TOPICS[li % len(TOPICS)][1]} step {step}",
            f"{TOPICS[li % len(TOPICS)][2]} ({step})",
            context=f"turn {step} of the conversation",
        )
        for li in range(lineages)
        for step in range(per)
    ]


def ids(results: list[tuple[Transition, float]]) -> list[str]:
    return [t.id for t, _ in results]


# --- build ---------------------------------------------------------------------------


def test_build_sorts_dedupes_and_fills_the_manifest() -> None:
    items = corpus()
    index = build(
        [*reversed(items), items[0]],
        sources=["b.jsonl", "a.jsonl", "a.jsonl"],
        issues=[TraceIssue(source="a.jsonl#3", reason="terminal answer")],
    )
    assert [t.id for t in index.transitions] == sorted(t.id for t in items)
    m = index.manifest
    assert m.kind == "real-transitions"
    assert m.embedder == EMBEDDER_ID
    assert m.dimensions == DIMENSIONS
    assert m.transitions == len(items) == index.vectors.shape[0]
    assert index.vectors.shape == (len(items), DIMENSIONS)
    assert index.vectors.dtype == np.float32
    assert m.sources == ["a.jsonl", "b.jsonl"]
    assert m.issues == [TraceIssue(source="a.jsonl#3", reason="terminal answer")]
    assert set(m.lineages) == {f"lin{i}" for i in range(6)}
    assert len(m.id) == 64


def test_row_i_embeds_task_context_and_action_of_transition_i() -> None:
    index = build(corpus())
    for t, row in zip(index.transitions, index.vectors, strict=True):
        expected = embed(query_text(t.task, t.context, t.action))
        np.testing.assert_allclose(row, expected, atol=1e-6)


def test_the_same_transitions_give_the_same_id_in_any_order() -> None:
    items = corpus()
    assert build(items).manifest.id == build(list(reversed(items))).manifest.id
    assert build(items).manifest.id != build(items[:-1]).manifest.id
    assert build(items).manifest.id != build(items, sources=["x"]).manifest.id


def test_build_accepts_only_real_transitions() -> None:
    prediction: Any = {"action": "search", "observation": "a predicted reply"}
    with pytest.raises(TypeError, match="not a Transition"):
        build([*corpus(), prediction])


def test_an_id_naming_two_different_pairs_is_refused() -> None:
    with pytest.raises(ValueError, match="'x' names two different pairs"):
        build([tr("x", "l1", "t", "a", "one"), tr("x", "l1", "t", "a", "two")])


@pytest.mark.parametrize("held_out", [-0.1, 1.5])
def test_held_out_is_a_fraction(held_out: float) -> None:
    with pytest.raises(ValueError, match="held_out"):
        build(corpus(), held_out=held_out)


def test_lineage_partition_is_stable_and_follows_the_fraction() -> None:
    items = [tr(f"t{i:04d}", f"lineage-{i}", "task", "act") for i in range(2000)]
    splits = build(items, held_out=0.25).manifest.lineages
    share = sum(s == "held-out" for s in splits.values()) / len(splits)
    assert 0.2 < share < 0.3
    assert build(items[:500], held_out=0.25).manifest.lineages == {
        name: splits[name] for name in (f"lineage-{i}" for i in range(500))
    }
    assert set(build(items[:50], held_out=0.0).manifest.lineages.values()) == {"fit"}
    assert set(build(items[:50], held_out=1.0).manifest.lineages.values()) == {
        "held-out"
    }


def test_vectors_are_read_only() -> None:
    index = build(corpus())
    assert not index.vectors.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        index.vectors[0, 0] = 1.0


def test_there_is_no_way_to_add_to_an_index() -> None:
    index = build(corpus())
    assert not any(
        name in dir(index) for name in ("add", "append", "extend", "insert", "update")
    )
    with pytest.raises(AttributeError):
        index.transitions = (*index.transitions, tr("zz", "lin0", "t", "a"))  # type: ignore[misc]
    extra = (*index.transitions, tr("zz", "lin0", "t", "a"))
    grown = np.vstack([index.vectors, embed("t a").astype(np.float32)])
    with pytest.raises(IndexRefused, match="transitions"):
        TransitionIndex(manifest=index.manifest, transitions=extra, vectors=grown)
    swapped = (*index.transitions[:-1], tr("zz", "lin0", "t", "a"))
    with pytest.raises(IndexRefused, match=rf"^{TRANSITIONS}: sha256"):
        TransitionIndex(
            manifest=index.manifest, transitions=swapped, vectors=index.vectors
        )
    with pytest.raises(IndexRefused, match=rf"^{VECTORS}: sha256"):
        TransitionIndex(
            manifest=index.manifest,
            transitions=index.transitions,
            vectors=index.vectors[::-1],
        )


# --- save / load ---------------------------------------------------------------------


def test_save_then_load_round_trips(tmp_path: Path) -> None:
    index = build(corpus(), sources=["run.traj"], held_out=0.5)
    save(index, tmp_path / "ix")
    assert sorted(p.name for p in (tmp_path / "ix").iterdir()) == sorted(
        [MANIFEST, TRANSITIONS, VECTORS]
    )
    lines = (tmp_path / "ix" / TRANSITIONS).read_text().splitlines()
    assert len(lines) == len(index.transitions)
    loaded = load(tmp_path / "ix")
    assert loaded == index
    assert loaded.manifest == index.manifest
    assert loaded.transitions == index.transitions
    np.testing.assert_array_equal(loaded.vectors, index.vectors)
    assert not loaded.vectors.flags.writeable
    q: Query = {"task": "refund my order", "context": "", "action": "lookup_order 4471"}
    assert retrieve(loaded, **q) == retrieve(index, **q)


def test_an_empty_index_round_trips(tmp_path: Path) -> None:
    index = build([])
    save(index, tmp_path / "ix")
    assert load(tmp_path / "ix") == index
    assert retrieve(index, task="t", context="", action="a") == []


def test_save_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "stale").write_text("x")
    with pytest.raises(FileExistsError, match="not an empty directory"):
        save(build(corpus()), tmp_path)
    save(build(corpus()), tmp_path / "new")
    with pytest.raises(FileExistsError):
        save(build(corpus()), tmp_path / "new")


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    out = tmp_path / "ix"
    save(build(corpus(), sources=["run.traj"]), out)
    return out


def test_a_changed_transition_is_refused_by_file(saved: Path) -> None:
    path = saved / TRANSITIONS
    path.write_text(path.read_text().replace("three flights", "four flights", 1))
    with pytest.raises(IndexRefused, match=rf"^{TRANSITIONS}: sha256 .* rebuild"):
        load(saved)


def test_an_appended_transition_is_refused_by_file(saved: Path) -> None:
    extra = b'{"kind":"derived.transition.v1","id":"zz","lineage":"lin0",'
    extra += b'"action":"a","observation":"a predicted reply"}\n'
    with (saved / TRANSITIONS).open("ab") as f:
        f.write(extra)
    with pytest.raises(IndexRefused, match=rf"^{TRANSITIONS}:"):
        load(saved)


def test_changed_vectors_are_refused_by_file(saved: Path) -> None:
    vectors = np.load(saved / VECTORS)
    vectors[0] = vectors[1]
    np.save(saved / VECTORS, vectors)
    with pytest.raises(IndexRefused, match=rf"^{VECTORS}: sha256 .* rebuild"):
        load(saved)


def test_a_changed_manifest_is_refused_by_file(saved: Path) -> None:
    manifest = json.loads((saved / MANIFEST).read_text())
    manifest["sources"] = ["other.traj"]
    (saved / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexRefused, match=rf"^{MANIFEST}: its id does not match"):
        load(saved)


def test_a_manifest_re_pointed_at_other_vectors_is_refused(saved: Path) -> None:
    manifest = json.loads((saved / MANIFEST).read_text())
    manifest["vectors_sha256"] = "0" * 64
    (saved / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexRefused, match=rf"^{MANIFEST}: its id"):
        load(saved)


def test_another_embedder_is_refused(saved: Path) -> None:
    with pytest.raises(IndexRefused, match="embedder it names, or rebuild"):
        load(saved, embedder="semantic-model-2025-01")
    manifest = json.loads((saved / MANIFEST).read_text())
    manifest["embedder"] = "semantic-model-2025-01"
    (saved / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexRefused, match=r"semantic-model-2025-01.*not 'hashing"):
        load(saved)


def test_a_non_real_kind_is_refused(saved: Path) -> None:
    manifest = json.loads((saved / MANIFEST).read_text())
    manifest["kind"] = "rollouts"
    (saved / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexRefused, match=r"kind 'rollouts'.*only real transitions"):
        load(saved)


def test_a_missing_file_is_refused_by_name(saved: Path) -> None:
    (saved / VECTORS).unlink()
    with pytest.raises(IndexRefused, match=rf"^{VECTORS}: cannot be read"):
        load(saved)


# --- retrieve ------------------------------------------------------------------------


def test_an_exact_match_ranks_first() -> None:
    index = build(corpus(), held_out=0.0)
    target = next(t for t in index.transitions if t.id == "t01-2")
    found = retrieve(
        index, task=target.task, context=target.context, action=target.action
    )
    assert found[0][0] == target
    assert found[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)


def test_ties_are_broken_by_id() -> None:
    same = [
        tr(f"tie-{c}", f"l{c}", "same task", "same action", f"obs {c}") for c in "dbca"
    ]
    index = build([*same, tr("zz-other", "lx", "unrelated", "words")], held_out=0.0)
    vectors = index.vectors
    np.testing.assert_array_equal(vectors[0], vectors[1])
    q: Query = {"task": "same task", "context": "", "action": "same action"}
    found = retrieve(index, **q, k=4)
    assert ids(found) == ["tie-a", "tie-b", "tie-c", "tie-d"]
    assert len({s for _, s in found}) == 1
    # A tie across the k-th place is also decided by id.
    assert ids(retrieve(index, **q, k=2)) == ["tie-a", "tie-b"]


def test_an_excluded_lineage_is_never_retrieved_even_with_a_near_duplicate() -> None:
    query: Query = {
        "task": "refund my order",
        "context": "the customer wrote twice",
        "action": "lookup_order 4471 in the billing system",
    }
    own = [
        tr("own-1", "own", query["task"], query["action"], "shipped", query["context"]),
        tr("own-2", "own", query["task"], query["action"] + " now", "late"),
        tr("own-3", "own", query["task"], "apologise", "fine"),
    ]
    other = [
        tr(
            "zz-other",
            "other",
            query["task"],
            query["action"] + " again",
            "order delayed",
            query["context"],
        ),
        tr("zz-far", "other", "plan a trip", "book a hotel", "booked"),
    ]
    index = build([*corpus(), *own, *other], held_out=0.0)
    assert ids(retrieve(index, **query, k=1)) == ["own-1"]  # the leak it prevents
    for k in (1, 5, 100):
        found = retrieve(index, **query, exclude_lineages={"own"}, k=k)
        assert not {t.lineage for t, _ in found} & {"own"}
        assert not set(ids(found)) & {"own-1", "own-2", "own-3"}
        assert found[0][0].id == "zz-other"
    found = retrieve(index, **query, exclude_lineages=["own", "other"], k=100)
    assert {t.lineage for t, _ in found} == {f"lin{i}" for i in range(6)}


def test_excluding_unknown_lineages_changes_nothing() -> None:
    index = build(corpus(), held_out=0.0)
    q: Query = {"task": "reset my password", "context": "", "action": "send reset link"}
    assert retrieve(index, **q, exclude_lineages=["nope"]) == retrieve(index, **q)


def test_split_filtering() -> None:
    items = corpus(lineages=24, per=2)
    index = build(items, held_out=0.5)
    splits = index.manifest.lineages
    fit = {name for name, s in splits.items() if s == "fit"}
    held = set(splits) - fit
    assert fit
    assert held
    q: Query = {"task": "fix the failing build", "context": "", "action": "run tests"}
    everything = len(items)
    by_split = {
        split: retrieve(index, **q, k=everything, split=split)
        for split in ("fit", "held-out", "all")
    }
    assert {t.lineage for t, _ in by_split["fit"]} == fit
    assert {t.lineage for t, _ in by_split["held-out"]} == held
    assert len(by_split["all"]) == everything
    assert len(by_split["fit"]) + len(by_split["held-out"]) == everything
    assert ids(retrieve(index, **q, k=everything)) == ids(by_split["fit"])
    with pytest.raises(ValueError, match="split"):
        retrieve(index, **q, split="train")  # type: ignore[arg-type]


def test_held_out_everything_leaves_nothing_to_fit() -> None:
    index = build(corpus(), held_out=1.0)
    assert retrieve(index, task="refund", context="", action="lookup") == []
    assert len(retrieve(index, task="refund", context="", action="x", split="all")) == 5


@pytest.mark.parametrize("k", [0, 1, 3, 5, 18, 50])
def test_k_bounds_the_results(k: int) -> None:
    index = build(corpus(), held_out=0.0)
    found = retrieve(index, task="book a flight", context="", action="search", k=k)
    assert len(found) == min(k, 18)
    assert len(set(ids(found))) == len(found)


def test_a_negative_k_is_refused() -> None:
    with pytest.raises(ValueError, match="k -1"):
        retrieve(build(corpus()), task="t", context="", action="a", k=-1)


def test_the_observation_does_not_influence_retrieval() -> None:
    a = tr("obs-a", "l1", "refund my order", "lookup_order 4471", "refund approved")
    b = tr("obs-b", "l2", "refund my order", "lookup_order 4471", "order not found")
    index = build([a, b, *corpus()], held_out=0.0)
    by_id = dict(zip((t.id for t in index.transitions), index.vectors, strict=True))
    np.testing.assert_array_equal(by_id["obs-a"], by_id["obs-b"])
    # Querying with one transition's observation words favours neither.
    found = retrieve(
        index, task="refund my order", context="", action="refund approved", k=2
    )
    assert ids(found) == ["obs-a", "obs-b"]
    assert found[0][1] == found[1][1]
    assert "approved" not in query_text(a.task, a.context, a.action)


def test_retrieval_is_pure() -> None:
    index = build(corpus(), held_out=0.0)
    before = index.vectors.copy()
    q: Query = {"task": "plan a team offsite", "context": "", "action": "venues"}
    assert retrieve(index, **q) == retrieve(index, **q)
    np.testing.assert_array_equal(index.vectors, before)

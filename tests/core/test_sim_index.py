"""The read-only transition index: content-addressed artifacts, refusals by name,
exclusion by lineage and group before scoring, a held-out split by group, and
retrieval that never looks at observations."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypedDict

import msgspec
import numpy as np
import pytest

from worldline.actors.belief_model.embedding import DIMENSIONS, EMBEDDER_ID, embed
from worldline.actors.simulator.builder import IndexBuilder, group_split
from worldline.actors.simulator.index import (
    CENTROIDS,
    CONTEXTS,
    MANIFEST,
    REBUILD,
    TRANSITIONS,
    VECTORS,
    IndexRefused,
    TransitionIndex,
    UnknownLineage,
    build,
    check_exclusions,
    load,
    retrieve,
    save,
)
from worldline.actors.simulator.sessions import SessionError
from worldline.actors.simulator.storage import combine, command_of, recent
from worldline.protocols.messages import Transition
from worldline.protocols.simulator import INDEX_VERSION, TraceIssue

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
    pairing: str = "turn",
) -> Transition:
    return Transition(
        id=id,
        lineage=lineage,
        task=task,
        context=context,
        action=action,
        observation=observation,
        pairing=pairing,  # type: ignore[arg-type]
    )


def corpus(lineages: int = 6, per: int = 3) -> list[Transition]:
    return [
        tr(
            f"t{li:02d}-{step}",
            f"lin{li}",
            TOPICS[li % len(TOPICS)][0],
            f"{TOPICS[li % len(TOPICS)][1]} step {step}",
            f"{TOPICS[li % len(TOPICS)][2]} ({step})",
            context=f"user: {TOPICS[li % len(TOPICS)][0]}\nassistant: turn {step}",
        )
        for li in range(lineages)
        for step in range(per)
    ]


def ids(results: list[tuple[Transition, float]]) -> list[str]:
    return [t.id for t, _ in results]


def vector(action: str, context: str) -> np.ndarray:
    a = embed(action).astype(np.float32)[None]
    w = embed(recent(context)).astype(np.float32)[None]
    row: np.ndarray = combine(a, w)[0]
    return row


# --- build ---------------------------------------------------------------------------


def test_build_sorts_dedupes_and_fills_the_manifest() -> None:
    items = corpus()
    index = build(
        [*reversed(items), items[0]],
        sources=["b.jsonl", "a.jsonl", "a.jsonl"],
        issues=[TraceIssue(source="a.jsonl#3", reason="terminal answer")],
    )
    assert [t.id for t in index.transitions] == sorted(t.id for t in items)
    twice = msgspec.structs.replace(items[0], support=2)  # seen twice, stored once
    assert list(index.transitions) == sorted([twice, *items[1:]], key=lambda t: t.id)
    m = index.manifest
    assert m.kind == "real-transitions"
    assert m.version == INDEX_VERSION == 3
    assert m.embedder == EMBEDDER_ID
    assert m.dimensions == DIMENSIONS
    assert m.transitions == len(items) == index.vectors.shape[0]
    assert index.vectors.shape == (len(items), DIMENSIONS)
    assert index.vectors.dtype == np.float32
    assert m.sources == ["a.jsonl", "b.jsonl"]
    assert m.issues == [TraceIssue(source="a.jsonl#3", reason="terminal answer")]
    assert m.lineages == {f"lin{i}": f"lin{i}" for i in range(6)}  # own group
    assert set(m.groups) == set(m.lineages)
    assert len(m.id) == 64


def test_row_i_embeds_the_action_and_recent_context_of_transition_i() -> None:
    index = build(corpus())
    for t, row in zip(index.transitions, index.vectors, strict=True):
        np.testing.assert_allclose(row, vector(t.action, t.context), atol=1e-6)


def test_the_same_transitions_give_the_same_bytes_in_any_order(tmp_path: Path) -> None:
    items = corpus()
    save(build(items), tmp_path / "a")
    save(build(list(reversed(items))), tmp_path / "b")
    for name in (MANIFEST, TRANSITIONS, CONTEXTS, VECTORS):
        assert (tmp_path / "a" / name).read_bytes() == (
            tmp_path / "b" / name
        ).read_bytes()
    assert build(items).manifest.id != build(items[:-1]).manifest.id
    assert build(items).manifest.id != build(items, sources=["x"]).manifest.id


def test_build_accepts_only_real_transitions() -> None:
    prediction: Any = {"action": "search", "observation": "a predicted reply"}
    with pytest.raises(TypeError, match="not a Transition"):
        build([*corpus(), prediction])


def test_an_id_naming_two_different_pairs_is_refused() -> None:
    with pytest.raises(ValueError, match="'x' names two different pairs"):
        build([tr("x", "l1", "t", "a", "one"), tr("x", "l1", "t", "a", "two")])


@pytest.mark.parametrize("held_out", [-0.1, 1.0, 1.5])
def test_held_out_is_a_fraction_below_one(held_out: float) -> None:
    with pytest.raises(ValueError, match=r"held_out .*\(--held-out\)"):
        build(corpus(), held_out=held_out)


def test_a_split_leaving_nothing_to_fit_is_refused_at_build() -> None:
    # One group whose hash lands below the fraction: every transition held out.
    group = next(f"g{i}" for i in range(1000) if group_split(f"g{i}", 0.5) != "fit")
    items = corpus()
    with pytest.raises(ValueError, match="holds out every one of the 1 lineage group"):
        build(items, held_out=0.5, groups={t.lineage: group for t in items})
    assert build([], held_out=0.5).manifest.transitions == 0  # nothing to refuse


def test_the_split_is_by_group_stable_and_follows_the_fraction() -> None:
    items = [
        tr(f"t{i:04d}", f"task-{i // 4}-trial-{i % 4}", "task", "act")
        for i in range(4000)
    ]
    groups = {t.lineage: t.lineage.rsplit("-trial-", 1)[0] for t in items}
    index = build(items, held_out=0.25, groups=groups)
    m = index.manifest
    assert m.lineages == groups
    share = sum(s == "held-out" for s in m.groups.values()) / len(m.groups)
    assert 0.2 < share < 0.3
    for lineage, group in groups.items():  # trials of one task never straddle
        assert index.split_of(lineage) == m.groups[group] == group_split(group, 0.25)
    assert set(build(items[:50], held_out=0.0).manifest.groups.values()) == {"fit"}


def test_a_lineage_stays_in_one_group() -> None:
    builder = IndexBuilder(held_out=0.0)
    builder.add(tr("a", "lin", "t", "x"), group="g1")
    with pytest.raises(ValueError, match="'lin' is in group 'g1' and in group 'g2'"):
        builder.add(tr("b", "lin", "t", "y"), group="g2")


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
        index.rows = ()  # type: ignore[misc]
    m, rows, contexts = index.manifest, index.rows, index.contexts
    extra = (*rows, msgspec.structs.replace(rows[-1], id="zz"))
    grown = np.vstack([index.vectors, index.vectors[-1:]])
    with pytest.raises(IndexRefused, match="transitions"):
        TransitionIndex(m, extra, contexts, grown)
    swapped = (*rows[:-1], extra[-1])
    with pytest.raises(IndexRefused, match=rf"^{TRANSITIONS}: sha256"):
        TransitionIndex(m, swapped, contexts, index.vectors)
    with pytest.raises(IndexRefused, match=rf"^{VECTORS}: sha256"):
        TransitionIndex(m, rows, contexts, index.vectors[::-1])
    assert TransitionIndex(m, rows, contexts, index.vectors) == index


# --- storage: contexts once, shared --------------------------------------------------


SYSTEM = "system: " + "You are a careful agent. Follow the policy. " * 150


def conversation(lineage: str, turns: int, system: str = SYSTEM) -> list[Transition]:
    """One conversation of ``turns`` assistant/user turns after a system prompt."""
    lines = [system, f"user: help me with ticket {lineage}"]
    found = []
    for n in range(turns):
        action = f"Step {n} of {lineage}: " + "let me check that. " * 10
        reply = f"Answer {n} for {lineage}: " + "here it is. " * 10
        found.append(
            tr(
                f"{lineage}-{n:04d}",
                lineage,
                lines[1][6:],
                action,
                reply,
                "\n".join(lines),
            )
        )
        lines += [f"assistant: {action}", f"user: {reply}"]
    return found


def stored(index: TransitionIndex) -> int:
    return sum(len(s.text) for s in index.contexts)


def test_contexts_grow_linearly_and_are_shared() -> None:
    short = build(conversation("c1", 50), held_out=0.0)
    long = build(conversation("c1", 100), held_out=0.0)
    whole = sum(len(t.context) for t in conversation("c1", 100))
    assert whole > 50 * stored(long)  # what storing every context would cost
    assert 1.8 < (stored(long) - len(SYSTEM)) / (stored(short) - len(SYSTEM)) < 2.2
    # Ten conversations with one system prompt store it once.
    many = build([t for i in range(10) for t in conversation(f"c{i}", 5)])
    assert sum(s.text == SYSTEM for s in many.contexts) == 1


def test_stored_contexts_read_back_exactly(tmp_path: Path) -> None:
    tricky = "system: rules\nline two\nuser: a\n\nassistant: b: c\ntool: {\n}\nuser:"
    items = [
        *conversation("c1", 4),
        tr("x1", "x", "t", "a", context=tricky),
        tr("x2", "x", "t", "b", context=tricky + "\nuser: more"),
        tr("x3", "x", "t", "c", context=tricky[:20]),
        tr("x4", "x", "", "d", context=""),
    ]
    index = build(items, held_out=0.0)
    save(index, tmp_path / "ix")
    for got in (index, load(tmp_path / "ix")):
        assert sorted(got.transitions, key=lambda t: t.id) == sorted(
            items, key=lambda t: t.id
        )


def test_recent_is_a_bounded_window_of_the_last_messages() -> None:
    context = "\n".join(f"user: message {n}" for n in range(20))
    assert (
        recent(context, messages=3)
        == "user: message 17\nuser: message 18\nuser: message 19"
    )
    assert recent("x" * 5000, chars=100) == "x" * 100
    assert recent("") == ""
    assert recent(SYSTEM + "\nuser: hi").endswith("user: hi")
    assert len(recent(SYSTEM + "\nuser: hi")) <= 2000


# --- save / load ---------------------------------------------------------------------


def test_save_then_load_round_trips(tmp_path: Path) -> None:
    index = build(corpus(), sources=["run.traj"], held_out=0.5)
    save(index, tmp_path / "ix")
    assert sorted(p.name for p in (tmp_path / "ix").iterdir()) == sorted(
        [MANIFEST, TRANSITIONS, CONTEXTS, VECTORS, CENTROIDS]
    )
    lines = (tmp_path / "ix" / TRANSITIONS).read_text().splitlines()
    assert len(lines) == len(index.transitions)
    loaded = load(tmp_path / "ix")
    assert loaded == index
    assert loaded.manifest == index.manifest
    assert list(loaded.transitions) == list(index.transitions)
    np.testing.assert_array_equal(loaded.vectors, index.vectors)
    assert not loaded.vectors.flags.writeable
    q: Query = {"task": "refund my order", "context": "", "action": "lookup_order 4471"}
    assert retrieve(loaded, **q, split="all") == retrieve(index, **q, split="all")


def test_the_manifest_file_carries_kind_and_version(tmp_path: Path) -> None:
    save(build(corpus()), tmp_path / "ix")
    written = json.loads((tmp_path / "ix" / MANIFEST).read_text())
    assert written["kind"] == "real-transitions"
    assert written["version"] == INDEX_VERSION


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


def edit_manifest(saved: Path, **changes: Any) -> None:
    manifest = json.loads((saved / MANIFEST).read_text())
    for key, value in changes.items():
        if value is None:
            del manifest[key]
        else:
            manifest[key] = value
    (saved / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("name", [TRANSITIONS, CONTEXTS])
def test_a_changed_line_is_refused_by_file(saved: Path, name: str) -> None:
    path = saved / name
    text = path.read_text()
    path.write_text(text.replace("o", "0", 1))
    with pytest.raises(IndexRefused, match=rf"^{name}: sha256 .* rebuild"):
        load(saved)


def test_an_appended_transition_is_refused_by_file(saved: Path) -> None:
    with (saved / TRANSITIONS).open("ab") as f:
        f.write(b'["zz","lin0",-1,-1,"a","a predicted reply","turn","",false]\n')
    with pytest.raises(IndexRefused, match=rf"^{TRANSITIONS}:"):
        load(saved)


def test_changed_vectors_are_refused_by_file(saved: Path) -> None:
    vectors = np.load(saved / VECTORS)
    vectors[0] = vectors[1]
    np.save(saved / VECTORS, vectors)
    with pytest.raises(IndexRefused, match=rf"^{VECTORS}: sha256 .* rebuild"):
        load(saved)


def test_a_changed_manifest_is_refused_by_file(saved: Path) -> None:
    edit_manifest(saved, sources=["other.traj"])
    with pytest.raises(IndexRefused, match=rf"^{MANIFEST}: its id does not match"):
        load(saved)


def test_a_manifest_re_pointed_at_other_vectors_is_refused(saved: Path) -> None:
    edit_manifest(saved, vectors_sha256="0" * 64)
    with pytest.raises(IndexRefused, match=rf"^{MANIFEST}: its id"):
        load(saved)


def test_another_embedder_is_refused(saved: Path) -> None:
    with pytest.raises(IndexRefused, match="embedder it names, or rebuild"):
        load(saved, embedder="semantic-model-2025-01")
    edit_manifest(saved, embedder="semantic-model-2025-01")
    with pytest.raises(IndexRefused, match=r"semantic-model-2025-01.*not 'hashing"):
        load(saved)


def test_a_non_real_kind_is_refused(saved: Path) -> None:
    edit_manifest(saved, kind="rollouts")
    with pytest.raises(IndexRefused, match=r"kind 'rollouts'.*only real transitions"):
        load(saved)


@pytest.mark.parametrize("version", [None, 1, 2])
def test_an_older_format_is_refused_naming_the_rebuild(
    saved: Path, version: int | None
) -> None:
    # 2: before large blocks were cut into cells (no centroids.npy, rows by id)
    edit_manifest(saved, version=version)
    with pytest.raises(
        IndexRefused, match=rf"version {version or 1}, this worldline reads version 3"
    ):
        load(saved)
    with pytest.raises(IndexRefused, match=REBUILD.replace(".", r"\.")):
        load(saved)


def test_another_query_recipe_is_refused(saved: Path) -> None:
    edit_manifest(saved, query="task+context+action")
    with pytest.raises(IndexRefused, match=r"embedded as 'task\+context\+action'"):
        load(saved)


def test_a_missing_file_is_refused_by_name(saved: Path) -> None:
    (saved / CONTEXTS).unlink()
    with pytest.raises(IndexRefused, match=rf"^{CONTEXTS}: cannot be read"):
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
    np.testing.assert_array_equal(index.vectors[0], index.vectors[1])
    q: Query = {"task": "same task", "context": "", "action": "same action"}
    found = retrieve(index, **q, k=4)
    assert ids(found) == ["tie-a", "tie-b", "tie-c", "tie-d"]
    assert len({s for _, s in found}) == 1
    # A tie across the k-th place is also decided by id.
    assert ids(retrieve(index, **q, k=2)) == ["tie-a", "tie-b"]


def test_an_excluded_lineage_is_never_retrieved_even_with_a_near_duplicate() -> None:
    query: Query = {
        "task": "refund my order",
        "context": "user: the customer wrote twice",
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
        assert found[0][0].id == "zz-other"
    found = retrieve(index, **query, exclude_lineages=["own", "other"], k=100)
    assert {t.lineage for t, _ in found} == {f"lin{i}" for i in range(6)}


def test_excluding_a_group_excludes_every_lineage_in_it() -> None:
    q: Query = {"task": "refund", "context": "", "action": "lookup_order 4471 now"}
    trials = [
        tr(f"trial-{n}", f"task-7-trial-{n}", "refund", q["action"], f"obs {n}")
        for n in range(4)
    ]
    groups = {t.lineage: "task-7" for t in trials}
    index = build([*corpus(), *trials], held_out=0.0, groups=groups)
    # Excluding one trial leaves its siblings: that is what groups are for.
    left = retrieve(index, **q, exclude_lineages=["task-7-trial-0"], k=3)
    assert {t.lineage for t, _ in left} == {f"task-7-trial-{n}" for n in (1, 2, 3)}
    for found in (
        retrieve(index, **q, exclude_lineages=["task-7"], k=100),
        retrieve(index, **q, exclude_groups=["task-7"], k=100),
    ):
        assert found
        assert not any(t.lineage.startswith("task-7") for t, _ in found)


def test_excluding_a_name_the_index_does_not_hold_is_a_named_error() -> None:
    index = build(corpus(), held_out=0.0)
    q: Query = {"task": "reset my password", "context": "", "action": "send reset link"}
    with pytest.raises(UnknownLineage) as caught:
        retrieve(index, **q, exclude_lineages=["lin0", "nope", "gone"])
    assert caught.value.unknown == ("gone", "nope")
    assert isinstance(caught.value, SessionError)
    assert caught.value.name == "unknown_lineage"
    message = str(caught.value)
    assert "'gone', 'nope'" in message
    assert index.manifest.id[:12] in message
    assert f'{MANIFEST} lists them ("lineages"' in message
    with pytest.raises(UnknownLineage, match="'nope'"):
        check_exclusions(index, ["lin0", "nope"])
    check_exclusions(index, ["lin0"], ["lin1"])  # held: nothing raised
    grouped = build(corpus(), held_out=0.0, groups={"lin0": "g0"})
    with pytest.raises(UnknownLineage, match="'lin0'"):  # a lineage, not a group
        retrieve(grouped, **q, exclude_groups=["lin0"])
    assert retrieve(grouped, **q, exclude_lineages=["g0"], k=100)  # names a group


def test_split_filtering() -> None:
    items = corpus(lineages=24, per=2)
    index = build(items, held_out=0.5)
    groups = index.manifest.groups
    fit = {name for name, s in groups.items() if s == "fit"}
    held = set(groups) - fit
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
    action = "lookup_order 4471 refund approved"
    found = retrieve(index, task="refund my order", context="", action=action, k=2)
    assert ids(found) == ["obs-a", "obs-b"]
    assert found[0][1] == found[1][1]


def test_retrieval_is_pure() -> None:
    index = build(corpus(), held_out=0.0)
    before = index.vectors.copy()
    q: Query = {"task": "plan a team offsite", "context": "", "action": "venues"}
    assert retrieve(index, **q) == retrieve(index, **q)
    np.testing.assert_array_equal(index.vectors, before)


# --- retrieval centred on the action -------------------------------------------------

CALLS = [
    tr("c-1", "a", "t", 'get_order({"id": 1})', '{"order": 1}', pairing="id"),
    tr("c-2", "b", "t", 'get_order({"id": 2})', '{"order": 2}', pairing="id"),
    tr("c-3", "c", "t", 'get_user({"order id": 1})', '{"user": 9}', pairing="id"),
    tr("c-4", "d", "t", 'cancel({"order id": 1, "id": 1})', '{"ok": 1}', pairing="id"),
    # A message whose text is a call, and replies: never the answer to a call.
    tr("m-1", "e", "t", 'get_order({"id": 1})', "what do you mean?"),
    tr("m-2", "f", "t", "Your order 1 has shipped.", "Thanks, bye!"),
]


def test_a_tool_call_is_answered_by_tool_results_same_tool_first() -> None:
    index = build(CALLS, held_out=0.0)
    action = 'get_order({"order id": 1})'
    found = retrieve(index, task="t", context="", action=action, k=4)
    assert [t.pairing for t, _ in found] == ["id"] * 4
    assert ids(found)[:2] == ["c-1", "c-2"]  # get_order first ...
    assert set(ids(found)[2:]) == {"c-3", "c-4"}  # ... then the other tools
    assert ids(retrieve(index, task="t", context="", action=action, kind="tool", k=9))[
        :2
    ] == ["c-1", "c-2"]


def test_same_tool_first_even_when_another_tool_is_closer() -> None:
    items = [
        tr("x-1", "a", "t", 'lookup({"q": "red shoes size 9"})', "r1", pairing="id"),
        tr(
            "y-1", "b", "t", 'search({"q": "red shoes size 9 now"})', "r2", pairing="id"
        ),
    ]
    index = build(items, held_out=0.0)
    found = retrieve(
        index, task="t", context="", action='search({"q": "red shoes size 9"})', k=2
    )
    assert ids(found) == ["y-1", "x-1"]
    found = retrieve(
        index, task="t", context="", action='lookup({"q": "anything else"})', k=2
    )
    assert ids(found) == ["x-1", "y-1"]


def test_a_message_is_answered_by_messages_only() -> None:
    index = build(CALLS, held_out=0.0)
    for action in ("Your order 1 has shipped.", 'unknown_tool({"id": 1})'):
        found = retrieve(index, task="t", context="", action=action, k=10)
        assert {t.pairing for t, _ in found} == {"turn"}
    found = retrieve(
        index, task="t", context="", action='get_order({"id": 1})', kind="message"
    )
    assert ids(found)[0] == "m-1"
    assert {t.pairing for t, _ in found} == {"turn"}
    only_calls = build(CALLS[:4], held_out=0.0)
    assert retrieve(only_calls, task="t", context="", action="Hello there") == []


def test_a_long_system_prompt_does_not_drown_the_action() -> None:
    prompt = "system: " + " ".join(f"policy{n}" for n in range(3000))
    other = "system: " + " ".join(f"rule{n}" for n in range(3000))
    items = [
        # Same prompt as the query, different action.
        tr("p-1", "a", "t", "I have cancelled the reservation.", "great", prompt),
        # Another prompt, the same action as the query.
        tr("p-2", "b", "t", "Could you give me your user id?", "it is ada_7", other),
    ]
    index = build(items, held_out=0.0)
    found = retrieve(
        index, task="t", context=prompt, action="Could you give me your user id?"
    )
    assert ids(found)[0] == "p-2"


def test_a_text_command_is_answered_by_replies_to_the_same_command_first() -> None:
    fence = "```"
    discussion = "We should look at the failing test in the fields module now."

    def issuing(command: str, words: str = discussion) -> str:
        return f"{words}\n{fence}\n{command}\n{fence}"

    built = build(
        [
            # Worded like the query, but it ran another command.
            tr("t-search", "lin-a", "fix", issuing("search_dir fields"), "3 matches"),
            tr("t-open", "lin-b", "fix", issuing("open a.py", "Show me."), "[File]"),
            tr("t-plain", "lin-c", "fix", discussion, "Sure."),
        ],
        held_out=0.0,
    )
    query = issuing("open fields.py")
    found = retrieve(built, task="fix", context="", action=query, k=3)
    assert ids(found)[0] == "t-open"  # the same command, though worded least alike
    assert set(ids(found)) == {"t-open", "t-search", "t-plain"}
    assert command_of(query) == "open"
    assert command_of(discussion) is None
    # No command: the most similar reply, as before.
    plain = retrieve(built, task="fix", context="", action=discussion, k=1)
    assert ids(plain) == ["t-plain"]

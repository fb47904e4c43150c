"""Trace adapters (``worldline.actors.extractor.traces``) against real traces written by
others (ToolBench's legacy ``function_call`` answers, SWE-agent ``.traj``
demonstrations), read in place and never copied, and against small synthetic OpenAI
traces."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Final

import msgspec
import pytest

from tests.support import TRACES
from worldline.actors.extractor.traces import (
    TraceParse,
    UnknownTraceFormat,
    parse_trace,
)
from worldline.protocols.messages import Transition

# Transitions per real file, counted by hand from the files (message indexes are
# positions in ToolBench's answer_generation.train_messages[-1] or SWE-agent's
# history). Every call followed by its result is one transition; the final
# unanswered Finish call is not.
EXPECTED: Final[dict[str, tuple[str, int, str | None]]] = {
    # 7 messages: system, user, call #2 -> result #3, call #4 -> result #5, Finish #6.
    "toolbench/10_ChatGPT_DFS_woFilter_w2.json": ("legacy-function-call", 2, "n"),
    # 9 messages: calls #2, #4, #6 (transitaires again) each answered, Finish #8.
    "toolbench/11_ChatGPT_DFS_woFilter_w2.json": ("legacy-function-call", 3, "n"),
    # 11 messages: calls #2, #4, #7 answered; #6 is a user nudge after a function
    # result (no assistant text before it: not a turn); #9 is assistant text followed
    # by another assistant message (#10, Finish): no observation, not a transition.
    "toolbench/57_ChatGPT_DFS_woFilter_w2.json": ("legacy-function-call", 3, "n"),
    # 11 messages: calls #2, #4, #6, #8 answered (#6 and #8 both search_b, paired by
    # name in order), Finish #10.
    "toolbench/59_ChatGPT_DFS_woFilter_w2.json": ("legacy-function-call", 4, "n"),
    # valid_data false, no train_messages at all: nothing to read, one issue.
    "toolbench/69_ChatGPT_DFS_woFilter_w2.json": ("legacy-function-call", 0, None),
    # 12 history messages: 5 assistant tool calls (#2..#10), each answered by the
    # next tool message through tool_call_ids; submit (#10) is answered by the diff.
    "swe-agent/function_calling_simple.traj": ("swe-agent", 5, "i"),
    # 24 history messages: 11 calls (#2..#22), each answered by the next message.
    # Call ids are reused after being answered (e.g. call_5iDd... at #6, #8, #18, #20).
    "swe-agent/marshmallow-1867.function_calling_replace.traj": ("swe-agent", 11, "i"),
}
PAIRING: Final = {"n": "name-order", "i": "id"}


def _parse(rel: str) -> TraceParse:
    path = TRACES / rel
    return parse_trace(path.name, path.read_bytes())


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _bytes(doc: object) -> bytes:
    return json.dumps(doc).encode()


def test_expected_covers_every_real_trace() -> None:
    found = {
        str(p.relative_to(TRACES))
        for p in TRACES.glob("*/*")
        if p.suffix in {".json", ".traj"}
    }
    assert found == set(EXPECTED)


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_real_trace_counts_and_pairing(rel: str) -> None:
    fmt, count, pairing = EXPECTED[rel]
    parsed = _parse(rel)
    assert parsed.format == fmt
    assert len(parsed.transitions) == count
    if pairing is not None:
        assert {t.pairing for t in parsed.transitions} == {PAIRING[pairing]}
        assert parsed.issues == []
    for t in parsed.transitions:
        assert t.source.startswith(f"{Path(rel).name}#")
        assert t.task  # each has a first user message
        assert t.context.startswith("system: ")


def test_toolbench_without_train_messages_is_an_issue() -> None:
    parsed = _parse("toolbench/69_ChatGPT_DFS_woFilter_w2.json")
    assert parsed.transitions == []
    assert len(parsed.issues) == 1
    assert "train_messages" in parsed.issues[0].reason
    assert parsed.issues[0].source.startswith("69_ChatGPT_DFS_woFilter_w2.json#")


@pytest.mark.parametrize("rel", sorted(r for r in EXPECTED if r.startswith("toolb")))
def test_toolbench_finish_is_never_a_transition(rel: str) -> None:
    parsed = _parse(rel)
    for t in parsed.transitions:
        assert not t.action.startswith("Finish(")
        assert '"return_type"' not in t.observation
        assert "final_answer" not in t.action


def test_toolbench_transition_content() -> None:
    parsed = _parse("toolbench/10_ChatGPT_DFS_woFilter_w2.json")
    first, second = parsed.transitions
    assert first.action == "transitaires_for_transitaires({})"
    assert first.observation.startswith('{"error": "", "response": "[{\\"id\\":\\"EKVF')
    assert first.source == "10_ChatGPT_DFS_woFilter_w2.json#2"
    assert "Gondrand" in first.task
    assert first.context.count("\n") >= 1
    assert first.context.splitlines()[0].startswith("system: You are AutoGPT")
    assert second.action.startswith("transitaire_for_transitaires({")
    assert "ACT_AGENCE_CALEDONIENNE_DE_TRANSIT" in second.action
    assert (first.final, second.final) == (False, True)


def test_swe_agent_transition_content() -> None:
    parsed = _parse("swe-agent/function_calling_simple.traj")
    actions = [t.action.split("(", 1)[0] for t in parsed.transitions]
    assert actions == ["find_file", "open", "edit", "bash", "submit"]
    first = parsed.transitions[0]
    assert first.action == 'find_file({"file_name":"missing_colon.py"})'
    assert first.observation.startswith('Found 1 matches for "missing_colon.py"')
    assert parsed.transitions[-1].observation.lstrip().startswith("diff --git")
    # the assistant's thought is context for the next action, never the action
    assert "assistant: The `SyntaxError`" in parsed.transitions[1].context


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_ids_stable_unique_and_valid(rel: str) -> None:
    once, twice = _parse(rel), _parse(rel)
    assert once == twice
    ids = [t.id for t in once.transitions]
    assert len(set(ids)) == len(ids)
    assert len({t.lineage for t in once.transitions}) <= 1
    for t in once.transitions:
        # a wire round trip validates the id and lineage constraints
        assert msgspec.json.decode(msgspec.json.encode(t), type=Transition) == t


@pytest.mark.parametrize("rel", sorted(r for r, e in EXPECTED.items() if e[1]))
def test_only_the_last_observation_is_final(rel: str) -> None:
    finals = [t.final for t in _parse(rel).transitions]
    assert finals == [False] * (len(finals) - 1) + [True]


# --- synthetic traces --------------------------------------------------------------

ORDER: Final[list[dict[str, object]]] = [
    {"role": "system", "content": "You help with orders."},
    {"role": "user", "content": "Where is order 42?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"id": 42}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "shipped on Monday"},
    {"role": "assistant", "content": "Order 42 shipped on Monday."},
    {"role": "user", "content": "Thanks. And order 43?"},
    {"role": "assistant", "content": "Let me check."},  # terminal: no observation
]


def test_synthetic_openai_trace() -> None:
    parsed = parse_trace("orders.json", _bytes(ORDER))
    assert parsed.format == "openai"
    assert parsed.issues == []
    lineage = "lin-" + _sha("orders.json#0")[:16]
    context_call = "system: You help with orders.\nuser: Where is order 42?"
    context_turn = (
        context_call
        + '\nassistant: lookup_order({"id": 42})'
        + "\ntool: shipped on Monday"
    )
    call, turn = parsed.transitions
    assert call == Transition(
        id="tr-"
        + _sha(
            json.dumps(
                [
                    lineage,
                    context_call,
                    'lookup_order({"id": 42})',
                    "shipped on Monday",
                    "id",
                ]
            )
        )[:24],
        lineage=lineage,
        task="Where is order 42?",
        context=context_call,
        action='lookup_order({"id": 42})',
        observation="shipped on Monday",
        pairing="id",
        source="orders.json#2",
        final=False,
    )
    assert turn.action == "Order 42 shipped on Monday."
    assert turn.observation == "Thanks. And order 43?"
    assert turn.pairing == "turn"
    assert turn.context == context_turn
    assert turn.source == "orders.json#4"
    assert turn.final is True
    assert turn.lineage == lineage


def test_messages_object_is_the_same_conversation() -> None:
    bare = parse_trace("orders.json", _bytes(ORDER))
    wrapped = parse_trace("orders.json", _bytes({"messages": ORDER}))
    assert wrapped == bare


def test_orphan_tool_result_is_an_issue() -> None:
    messages = [
        *ORDER[:4],
        {"role": "tool", "tool_call_id": "call_9", "content": "stray"},
    ]
    parsed = parse_trace("orphan.json", _bytes(messages))
    assert [t.action for t in parsed.transitions] == ['lookup_order({"id": 42})']
    (issue,) = parsed.issues
    assert issue.source == "orphan.json#4"
    assert "call_9" in issue.reason
    assert "matches no" in issue.reason


def test_orphan_function_result_is_an_issue() -> None:
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "function", "name": "get_weather", "content": "sunny"},
    ]
    parsed = parse_trace("legacy.json", _bytes(messages))
    assert parsed.format == "legacy-function-call"
    assert parsed.transitions == []
    (issue,) = parsed.issues
    assert issue.source == "legacy.json#1"
    assert "get_weather" in issue.reason


def test_legacy_pairs_by_name_in_order() -> None:
    messages = [
        {"role": "user", "content": "compare"},
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "price", "arguments": '{"item": "a"}'},
        },
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "price", "arguments": '{"item": "b"}'},
        },
        {"role": "function", "name": "price", "content": "1"},
        {"role": "function", "name": "price", "content": "2"},
        {"role": "assistant", "content": "a is cheaper"},
    ]
    parsed = parse_trace("legacy.json", _bytes(messages))
    assert parsed.issues == []
    got = [(t.action, t.observation, t.pairing, t.final) for t in parsed.transitions]
    assert got == [
        ('price({"item": "a"})', "1", "name-order", False),
        ('price({"item": "b"})', "2", "name-order", True),
    ]


def test_swe_agent_tool_call_ids_list_pairs_each_id() -> None:
    history = [
        {"role": "user", "content": "fix it"},
        {
            "role": "assistant",
            "content": "two at once",
            "tool_calls": [
                {"id": "a", "function": {"name": "ls", "arguments": "{}"}},
                {"id": "b", "function": {"name": "pwd", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_ids": ["a", "b"], "content": "out"},
    ]
    parsed = parse_trace("run.traj", _bytes({"history": history}))
    assert parsed.format == "swe-agent"
    assert parsed.issues == []
    got = [(t.action, t.observation, t.final) for t in parsed.transitions]
    assert got == [("ls({})", "out", True), ("pwd({})", "out", True)]
    assert parsed.transitions[0].id != parsed.transitions[1].id


def test_list_of_parts_content_is_joined() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Hello."},
                {"type": "text", "text": "How can I help?"},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Book"},
                {"type": "text", "text": "a table."},
            ],
        },
    ]
    parsed = parse_trace("parts.json", _bytes(messages))
    assert parsed.issues == []
    (t,) = parsed.transitions
    assert t.task == "Hi"
    assert t.context == "user: Hi"
    assert t.action == "Hello.\nHow can I help?"
    assert t.observation == "Book\na table."


def test_non_text_content_is_an_issue() -> None:
    messages = [
        {"role": "user", "content": "Describe this"},
        {"role": "assistant", "content": "Send the picture."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "here"},
                {"type": "image_url", "image_url": {"url": "x"}},
            ],
        },
    ]
    parsed = parse_trace("image.json", _bytes(messages))
    assert parsed.transitions == []
    (issue,) = parsed.issues
    assert issue.source == "image.json#2"
    assert "image_url" in issue.reason


def test_unusable_records_are_issues() -> None:
    messages = [
        {"content": "who am I"},  # no role
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "x", "function": {"name": "run", "arguments": "{not json"}}
            ],
        },
        {"role": "tool", "tool_call_id": "x", "content": "ran"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "y", "function": {"name": "lost", "arguments": "{}"}}
            ],
        },
        {"role": "user", "content": "hello?"},  # y was never answered
    ]
    parsed = parse_trace("bad.json", _bytes(messages))
    assert parsed.transitions == []
    reasons = {i.source: i.reason for i in parsed.issues}
    assert set(reasons) == {"bad.json#0", "bad.json#2", "bad.json#3", "bad.json#4"}
    assert "no role" in reasons["bad.json#0"]
    assert "not valid JSON" in reasons["bad.json#2"]
    assert "malformed call at #2" in reasons["bad.json#3"]
    assert "never answered" in reasons["bad.json#4"]


def test_jsonl_conversations() -> None:
    lines = [
        json.dumps({"messages": ORDER}),
        "",
        json.dumps({"messages": ORDER[:2]}),
        "not json",
        json.dumps({"messages": ORDER}),
    ]
    parsed = parse_trace("many.jsonl", "\n".join(lines).encode())
    assert parsed.format == "openai"
    assert len(parsed.transitions) == 4
    lineages = [t.lineage for t in parsed.transitions]
    assert lineages[:2] == ["lin-" + _sha("many.jsonl#0")[:16]] * 2
    assert lineages[2:] == ["lin-" + _sha("many.jsonl#4")[:16]] * 2
    assert len({t.id for t in parsed.transitions}) == 4
    assert parsed.transitions[2].source == "many.jsonl:4#2"
    (issue,) = parsed.issues
    assert issue.source == "many.jsonl:3"


@pytest.mark.parametrize(
    "data",
    [
        b"{not json",
        b"42",
        b'{"foo": [1, 2]}',
        b"[1, 2, 3]",
        b'{"messages": "hi"}',
        b'{"history": {"a": 1}}',
        b"\xff\xfe\x00garbage",
        b"",
    ],
)
def test_unknown_formats_raise(data: bytes) -> None:
    with pytest.raises(UnknownTraceFormat) as info:
        parse_trace("mystery.bin", data)
    message = str(info.value)
    assert "mystery.bin" in message
    for expected in ("OpenAI", "function_call", "SWE-agent", "history", "messages"):
        assert expected in message
    assert isinstance(info.value, ValueError)


# --- declared lineage and group ------------------------------------------------------


def _conversation(text: str) -> list[dict[str, object]]:
    return [
        {"role": "user", "content": f"please {text}"},
        {"role": "assistant", "content": f"doing {text}"},
        {"role": "user", "content": f"thanks for {text}"},
    ]


def test_jsonl_lines_declare_lineage_and_group() -> None:
    lines = [
        {"lineage": "task-1", "group": "g-1", "messages": _conversation("a")},
        {"lineage": "task-1", "group": "g-1", "messages": _conversation("b")},
        {"lineage": "task-2", "messages": _conversation("c")},
        {"messages": _conversation("d")},
    ]
    data = "\n".join(json.dumps(line) for line in lines).encode()
    parsed = parse_trace("runs.jsonl", data)
    assert [t.lineage for t in parsed.transitions] == [
        "task-1",
        "task-1",
        "task-2",
        "lin-" + _sha("runs.jsonl#3")[:16],  # none declared: one per line, as before
    ]
    assert (
        parsed.groups
        == {
            "task-1": "g-1",
            "task-2": "task-2",  # no group declared: the lineage is its own
            "lin-" + _sha("runs.jsonl#3")[:16]: "lin-" + _sha("runs.jsonl#3")[:16],
        }
    )
    assert not parsed.issues


@pytest.mark.parametrize(
    "wrap",
    [
        lambda m: {"lineage": "L", "group": "G", "messages": m},
        lambda m: {"lineage": "L", "group": "G", "history": m},
        lambda m: {
            "lineage": "L",
            "group": "G",
            "answer_generation": {"train_messages": [m]},
        },
    ],
    ids=["messages", "swe-agent", "toolbench"],
)
def test_whole_file_traces_declare_lineage_and_group(wrap: object) -> None:
    assert callable(wrap)
    parsed = parse_trace("one.json", json.dumps(wrap(_conversation("x"))).encode())
    assert [t.lineage for t in parsed.transitions] == ["L"]
    assert parsed.groups == {"L": "G"}


@pytest.mark.parametrize("bad", [7, "", "two words", "x" * 129])
def test_a_declared_name_that_is_not_an_id_is_an_issue(bad: object) -> None:
    lines = [
        {"lineage": bad, "messages": _conversation("a")},
        {"group": bad, "messages": _conversation("b")},
        {"lineage": "ok", "messages": _conversation("c")},
    ]
    data = "\n".join(json.dumps(line) for line in lines).encode()
    parsed = parse_trace("runs.jsonl", data)
    assert [t.lineage for t in parsed.transitions] == ["ok"]
    assert [i.source for i in parsed.issues] == ["runs.jsonl:0", "runs.jsonl:1"]
    assert all("is not an id" in i.reason for i in parsed.issues)


def test_one_lineage_in_two_groups_is_an_issue() -> None:
    lines = [
        {"lineage": "L", "group": "g1", "messages": _conversation("a")},
        {"lineage": "L", "group": "g2", "messages": _conversation("b")},
    ]
    data = "\n".join(json.dumps(line) for line in lines).encode()
    parsed = parse_trace("runs.jsonl", data)
    assert len(parsed.transitions) == 1
    assert parsed.groups == {"L": "g1"}
    [issue] = parsed.issues
    assert issue.source == "runs.jsonl:1"
    assert "one lineage has one group" in issue.reason


def test_real_traces_derive_one_lineage_per_file_in_its_own_group() -> None:
    for rel in EXPECTED:
        parsed = _parse(rel)
        lineages = {t.lineage for t in parsed.transitions}
        assert lineages <= {"lin-" + _sha(f"{Path(rel).name}#0")[:16]}
        assert parsed.groups == {name: name for name in lineages}

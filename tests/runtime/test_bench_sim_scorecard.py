"""Smoke test of the simulator scorecard (``bench/sim_scorecard.py``) on tiny traces of
our own, through its real entry point and a real stack (nats-server and every actor,
the simulator serving the fit index). Nothing is held to a threshold but what a
correct scorecard must find: a held-out transition identical to a fit one is answered
with that one's observation (token-F1 1.0)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

# bench/ holds scripts, not a package: import the script as its own module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import sim_scorecard

pytestmark = pytest.mark.nats


def _call(call_id: str, name: str, arguments: dict[str, str]) -> dict[str, object]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def _result(call_id: str, content: dict[str, str]) -> dict[str, object]:
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(content)}


def _say(role: str, text: str) -> dict[str, object]:
    return {"role": role, "content": text}


FLIGHT = [
    _say("system", "You are an airline support agent."),
    _say("user", "Please move my flight ABC123 to Friday."),
    _call("c1", "get_reservation", {"id": "ABC123"}),
    _result("c1", {"flight": "ABC123", "date": "Wednesday"}),
    _say("assistant", "Your flight ABC123 is on Wednesday. Move it to Friday?"),
    _say("user", "Yes, move it to Friday please."),
    _call("c2", "update_reservation", {"id": "ABC123", "date": "Friday"}),
    _result("c2", {"status": "moved", "date": "Friday"}),
    _say("assistant", "Done: ABC123 now leaves on Friday. Anything else?"),
    _say("user", "No, that is all. Thanks!"),
    _say("assistant", "Have a good trip."),
]
HOTEL = [
    _say("system", "You are a hotel booking agent."),
    _say("user", "I need a room in Lisbon for two nights."),
    _call("h1", "search_hotels", {"city": "Lisbon", "nights": "2"}),
    _result("h1", {"hotels": "Alfama Inn, Tejo Suites"}),
    _say("assistant", "Alfama Inn or Tejo Suites: which do you prefer?"),
    _say("user", "Tejo Suites, with breakfast."),
    _say("assistant", "Booked. Anything else?"),
]


def _tiny_traces(folder: Path) -> None:
    """Four identical copies of one conversation and one other, one a line: with two
    of five lineage groups held out, at least one copy is held out and at least two
    stay in the fit index."""
    conversations = [FLIGHT] * 4 + [HOTEL]
    lines = [
        json.dumps({"id": f"conv-{n}", "lineage": f"copy-{n}", "messages": messages})
        for n, messages in enumerate(conversations)
    ]
    (folder / "tiny.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.timeout(60)
def test_scorecard_reports_rates_and_a_twin_of_a_fit_transition_scores_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tiny_traces(tmp_path)
    results = sim_scorecard.main(
        ["--traces", str(tmp_path), "--held-out", "0.4", "--group-by", "lineage"]
    )
    out = capsys.readouterr().out
    for line in ("tool result", "next message", "simulator beats both"):
        assert line in out
    for system in sim_scorecard.SYSTEMS:
        assert system in out
    assert results.groups == (3, 2)
    assert results.held_out > 0
    # Every held-out transition is scored once by each system.
    by_system: dict[str, list[sim_scorecard.Scored]] = {}
    for record in results.records:
        by_system.setdefault(record.system, []).append(record)
    assert sorted(by_system) == sorted(sim_scorecard.SYSTEMS)
    assert {len(rows) for rows in by_system.values()} == {results.held_out}
    summary = results.summary()
    for kind in sim_scorecard.KINDS:
        assert summary[kind]["simulator"]["n"] > 0, kind  # both kinds are held out
        for system in sim_scorecard.SYSTEMS:
            values = summary[kind][system]
            for metric in sim_scorecard.METRICS:
                if kind == "message" and metric == "same_tool":
                    assert math.isnan(values[metric])
                else:
                    assert 0.0 <= values[metric] <= 1.0, (kind, system, metric)
    # The held-out twins of fit transitions: same task, context and action, so the
    # nearest fit transition is a copy and its observation is the real one.
    traces = sim_scorecard.read_traces([tmp_path])
    fit, held = sim_scorecard.split(traces.transitions, 0.4, "lineage", traces.declared)
    seen = {(t.task, t.context, t.action): t.observation for t in fit}
    twins = {
        t.id for t in held if seen.get((t.task, t.context, t.action)) == t.observation
    }
    assert twins  # a copy of FLIGHT is held out
    simulated = {r.id: r for r in by_system["simulator"]}
    for twin in twins:
        record = simulated[twin]
        assert record.f1 == 1.0, record
        assert record.exact == 1.0, record
        assert record.kind_ok == 1.0, record
        assert record.terminal == 1.0, record
        assert record.same_tool in (None, 1.0), record
    assert not any(r.error for r in by_system["simulator"])


def test_family_split_keeps_the_copies_of_one_task_on_one_side(tmp_path: Path) -> None:
    _tiny_traces(tmp_path)
    traces = sim_scorecard.read_traces([tmp_path])
    lineages = {t.lineage for t in traces.transitions}
    assert len(lineages) == 5  # one per line
    family = sim_scorecard.groups(traces.transitions, "family", traces.declared)
    assert len(set(family.values())) == 2  # the four copies share their task
    fit, held = sim_scorecard.split(traces.transitions, 0.4, "family", traces.declared)
    assert fit
    assert held
    assert {family[t.lineage] for t in fit}.isdisjoint(family[t.lineage] for t in held)
    again = sim_scorecard.split(traces.transitions, 0.4, "family", traces.declared)
    assert again == (fit, held)  # deterministic

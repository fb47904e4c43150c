"""The batch write over a real stack (issue 18, part 4): ``World.load`` records many
adds and evidence items pipelined and answers each in input order (one refused item
does not fail the others), and ``worldline load`` checks a whole JSON-lines file
before it publishes anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread
import nats
import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.actors.runtime.declare import ensure_streams
from worldline.protocols.subjects import OPS, STREAMS
from worldline.sdk.batch import AddItem, EvidenceItem

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).parent / "worldline")


def _cli(
    url: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}
    return subprocess.run(
        [WORLDLINE, *args, "--nats", url, "--timeout", "15"],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        input=stdin,
        check=False,
    )


async def _log_end(url: str) -> int:
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(OPS.name)
        return int(info.state.last_seq)
    finally:
        await nc.close()


async def test_load_applies_every_item_in_input_order_with_its_id(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("load")
    n = 120
    # Evidence right after the add it names, in the same chunk: the log keeps the
    # input order, so fusion sees the belief before its evidence.
    items: list[AddItem | EvidenceItem] = []
    for k in range(n):
        items.append(AddItem(text=f"store {k} opens at {k % 12} am", id=f"b-{k:03d}"))
        if k % 10 == 0:
            items.append(
                EvidenceItem(
                    belief_id=f"b-{k:03d}",
                    direction="supports",
                    kind="measurement",
                    source="lab",
                )
            )
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        results = await ada.load(items, chunk=50)
        assert [r.index for r in results] == list(range(len(items)))
        assert all(r.outcome == "applied" for r in results), [
            (r.index, r.outcome, r.reason) for r in results if not r.ok
        ]
        added = [
            r
            for r, item in zip(results, items, strict=True)
            if isinstance(item, AddItem)
        ]
        assert [r.belief_id for r in added] == [f"b-{k:03d}" for k in range(n)]
        seqs = [r.seq for r in results]
        assert seqs == sorted(seqs)
        assert len(set(seqs)) == len(seqs)
        for r in results:
            assert r.belief is not None
            assert r.belief.version >= r.seq
        supported = await ada.get("b-000")
        assert supported is not None
        assert supported.evidence_weight > 0
        trace = await ada.trace("b-000")
        assert [step.evidence.source for step in trace.steps] == ["lab"]
        page = await ada.list_page(limit=1000)
        assert page.total == n


async def test_one_refused_item_does_not_fail_the_others(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("loadrej")
    items: list[AddItem | EvidenceItem] = [
        AddItem(text="the bridge is closed", id="b-one"),
        EvidenceItem(
            belief_id="b-missing",
            direction="supports",
            kind="measurement",
            source="lab",
        ),
        AddItem(text="the ferry runs hourly", id="b-two", confidence=0.7),
    ]
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        results = await ada.load(items)
        assert [r.outcome for r in results] == ["applied", "rejected", "applied"]
        refused = results[1]
        assert refused.belief_id == "b-missing"
        assert refused.reason, refused
        assert results[2].belief is not None
        assert results[2].belief.id == "b-two"
        assert await ada.get("b-one") is not None


async def test_cli_load_refuses_a_bad_file_before_publishing_and_reads_stdin(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("loadcli")
    good = [
        json.dumps({"add": {"text": "the river is high", "id": "b-river"}}),
        json.dumps(
            {
                "evidence": {
                    "belief_id": "b-river",
                    "direction": "supports",
                    "kind": "measurement",
                    "source": "gauge",
                }
            }
        ),
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*good, '{"add": {"text": "x", "confidence": 2}}']) + "\n")
    args = ("--world", world, "--agent", "ada")
    async with running(all_actors(), url=nats_url, data=tmp_path / "data"):
        before = await _log_end(nats_url)
        result = await anyio.to_thread.run_sync(
            partial(_cli, nats_url, "load", str(bad), *args)
        )
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert "line 3" in result.stderr
        assert "Traceback" not in result.stderr
        assert await _log_end(nats_url) == before  # nothing of it was published

        text = "\n".join(good) + "\n\n"
        result = await anyio.to_thread.run_sync(
            partial(_cli, nats_url, "load", "-", *args, stdin=text)
        )
        assert result.returncode == 0, (result.stdout, result.stderr)
        assert "2 of 2 applied" in result.stdout
        assert await _log_end(nats_url) == before + 2

        refused = json.dumps(
            {
                "evidence": {
                    "belief_id": "b-nowhere",
                    "direction": "refutes",
                    "kind": "citation",
                    "source": "lab",
                }
            }
        )
        text = "\n".join([json.dumps({"add": {"text": "tide at noon"}}), refused])
        result = await anyio.to_thread.run_sync(
            partial(_cli, nats_url, "load", "-", *args, "--json", stdin=text)
        )
        assert result.returncode == 3, (result.stdout, result.stderr)
        records = [json.loads(line) for line in result.stdout.splitlines()]
        assert [(r["line"], r["outcome"]) for r in records] == [
            (1, "applied"),
            (2, "rejected"),
        ]
        assert records[1]["reason"]


async def test_with_no_actors_every_item_comes_back_not_applied(nats_url: str) -> None:
    """Recorded but never answered (no fusion, no projector): the wait ends at the
    timeout with one ``not_applied`` per item, not an error for the whole call."""
    nc = await nats.connect(nats_url)
    try:
        await ensure_streams(nc.jetstream(), STREAMS)
    finally:
        await nc.close()
    world = unique_world("loadidle")
    items: list[AddItem | EvidenceItem] = [AddItem(text=f"claim {k}") for k in range(5)]
    async with worldline.connect(
        nats_url, world=world, agent="ada", request_timeout=1.0
    ) as ada:
        with anyio.fail_after(10):
            results = await ada.load(items)
    assert [r.outcome for r in results] == ["not_applied"] * 5
    assert all(r.seq > 0 for r in results)
    assert "worldline status" in results[0].reason

"""Bi-temporal reads that are exact (issue 25, point 5), over a real nats-server and
the five actors, through the SDK and the CLI: a read as of a time between two
changes reports the belief exactly as it read then, on get, list, read, search and
trace; as of before its creation it is not found (docs/belief-math.md, "Two time
axes")."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio
import pytest

import worldline
from tests.cli.test_contradictions_cli import cli
from tests.support import all_actors, running, unique_world
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.nats


async def test_reads_as_of_a_time_between_two_changes_show_the_first(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        before = datetime.now(UTC)
        await anyio.sleep(0.01)
        await ada.add("The cache is warm after a deploy.", id="b1")
        await ada.evidence("b1", direction="supports", kind="citation", source="doc")
        then = await ada.get("b1")  # as it read after t1, at the world's clock
        assert then is not None
        then_trace = await ada.trace("b1")  # the belief as stored after t1
        await anyio.sleep(0.01)
        between = datetime.now(UTC)
        await anyio.sleep(0.01)
        await ada.evidence(
            "b1", direction="refutes", kind="measurement", source="probe"
        )
        now = await ada.get("b1")
        assert now is not None
        assert now.version > then.version
        assert now.confidence != then.confidence

        assert await ada.get("b1", as_of=between) == then
        assert await ada.list(as_of=between) == [then]
        assert (await ada.read(as_of=between)).beliefs == [then]
        hits = (await ada.search("cache warm", as_of=between)).hits
        assert [h.belief for h in hits] == [then]
        trace = await ada.trace("b1", as_of=between)
        assert trace.belief == then_trace.belief
        assert [s.evidence.source for s in trace.steps] == ["doc"]

        assert await ada.get("b1", as_of=before) is None
        assert await ada.list(as_of=before) == []
        with pytest.raises(BadRequest, match="as of"):
            await ada.trace("b1", as_of=before)

        shown = await cli(
            nats_url, world, "get", "b1", "--as-of", between.isoformat(), "--json"
        )
        assert shown.returncode == 0, shown.stderr
        got = json.loads(shown.stdout)
        assert (got["version"], got["evidence_count"]) == (then.version, 1)
        traced = await cli(
            nats_url, world, "trace", "b1", "--as-of", between.isoformat(), "--json"
        )
        assert traced.returncode == 0, traced.stderr
        assert json.loads(traced.stdout)["belief"]["version"] == then.version
        found = await cli(
            nats_url, world, "search", "cache", "--as-of", between.isoformat()
        )
        assert found.returncode == 0, found.stderr
        view = await cli(
            nats_url, world, "before", "cache warm", "--at", between.isoformat(),
            "--as-of", between.isoformat(), "--json",
        )  # fmt: skip
        assert view.returncode == 0, view.stderr
        (leaf,) = [x for x in json.loads(view.stdout)["current"] if x["id"] == "b1"]
        assert then.confidence is not None
        assert now.confidence is not None
        assert abs(leaf["confidence"] - then.confidence) < 1e-3
        assert abs(leaf["confidence"] - now.confidence) > 1e-2
        missing = await cli(nats_url, world, "get", "b1", "--as-of", before.isoformat())
        assert missing.returncode != 0
        assert b"as of" in missing.stderr
        assert b"try a later --as-of" in missing.stderr

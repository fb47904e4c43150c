"""``trust`` over a real stack (issue 18, part 4): a refused trust is refused to the
caller (``Rejected`` with fusion's reason; exit 3 from the CLI), and a burst of trust
changes, all in flight at once, applies without a spurious timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread
import nats
import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import AddBelief, AddEvidence, encode
from worldline.protocols.subjects import ops
from worldline.protocols.world import Authority, WorldDecl, WorldInfo
from worldline.sdk.errors import Rejected

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).parent / "worldline")


def _declaration(world: str) -> WorldDecl:
    """ada and bob rule the world (so either may set any trust), and ada may report
    every source she names (each its own voice)."""
    return WorldDecl(
        world=WorldInfo(id=world),
        authority=Authority(admins=["ada", "bob"]),
        sources={"*": ["ada"]},
    )


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}
    return subprocess.run(
        [WORLDLINE, *args, "--nats", url, "--timeout", "10"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


async def test_a_refused_trust_raises_with_fusions_reason_and_the_cli_exits_3(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("trustlock")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
        worldline.connect(nats_url, world=world, agent="bob") as bob,
    ):
        await ada.declare(_declaration(world))
        await ada.trust("lab", 0.5, lock=True)
        with pytest.raises(Rejected) as refused:
            await bob.trust("lab", 3.0)
        assert refused.value.code == "locked"
        assert "locked by ada" in refused.value.reason
        assert await ada.trust("lab", 0.7, lock=True) > 0  # its owner still may
        args = ("trust", "lab", "2", "--world", world, "--agent", "bob")
        result = await anyio.to_thread.run_sync(partial(_cli, nats_url, *args))
        assert result.returncode == 3, (result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        assert "locked by ada" in result.stderr
        assert "trust lab" not in result.stdout  # no success printed
        result = await anyio.to_thread.run_sync(
            partial(
                _cli, nats_url, "trust", "wiki", "2", "--world", world, "--agent", "ada"
            )
        )
        assert result.returncode == 0, result.stderr


async def test_a_burst_of_trust_changes_applies_without_a_spurious_timeout(
    nats_url: str, tmp_path: Path
) -> None:
    """Every trust change of a burst in flight at once, with the SDK's timeout cut to
    5 s: each returns applied (before the index by source, fusion re-read the whole
    world per change and most of these timed out), and each belief then reads at or
    past its source's trust change, its confidence moved the way the trust says."""
    world = unique_world("trustburst")
    beliefs, stores = 3000, 600
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada", request_timeout=5) as ada,
    ):
        await ada.declare(_declaration(world))
        nc = await nats.connect(nats_url)
        try:
            js = nc.jetstream()
            futures = [
                await js.publish_async(
                    ops(world, "ada"),
                    encode(op),
                    headers={"Nats-Msg-Id": f"{world}:{op.op_id}"},
                )
                for i in range(beliefs)
                for op in _book(i, stores)
            ]
            last = max([int((await f).seq) for f in futures])
        finally:
            await nc.close()
        with anyio.fail_after(120):
            while True:  # the last op of the load applied: all of it is
                loaded = await ada.get(f"bk-{beliefs - 1:05d}")
                if loaded is not None and loaded.version >= last:
                    break
                await anyio.sleep(0.1)
        before = {}
        for i in range(0, beliefs, 97):
            got = await ada.get(f"bk-{i:05d}")
            assert got is not None
            assert got.confidence is not None
            before[i] = got.confidence
        seqs: dict[int, int] = {}

        async def change(s: int) -> None:
            seqs[s] = await ada.trust(f"store-{s}", 0.2 if s % 2 else 3.0)

        async with anyio.create_task_group() as tg:  # a NotApplied fails the test
            for s in range(stores):
                tg.start_soon(change, s)
        assert len(seqs) == stores
        for i, confidence in before.items():
            s = i % stores
            # trust() returns once fusion's verdict is with the materializer; the
            # projector, another consumer of the change feed, may be a moment behind.
            with anyio.fail_after(30):
                while True:
                    got = await ada.get(f"bk-{i:05d}")
                    assert got is not None
                    if got.version >= seqs[s]:
                        break
                    await anyio.sleep(0.05)
            assert got.confidence is not None
            if s % 2:
                assert got.confidence < confidence
            else:
                assert got.confidence > confidence


AT = datetime(2026, 1, 1, tzinfo=UTC)


def _book(i: int, stores: int) -> list[AddBelief | AddEvidence]:
    """Belief ``bk-<i>`` and one citation from ``store-<i mod stores>``."""
    belief_id = f"bk-{i:05d}"
    item = Evidence(
        id=f"ev-{i}",
        belief_id=belief_id,
        direction="supports",
        kind="citation",
        source=f"store-{i % stores}",
        observed_at=AT,
        author="ada",
    )
    return [
        AddBelief(
            op_id=f"op-add-{i}",
            author="ada",
            at=AT,
            belief_id=belief_id,
            text=f"Book {i} has author {i % 31}.",
            type="claim",
        ),
        AddEvidence(op_id=f"op-ev-{i}", author="ada", at=AT, evidence=item),
    ]

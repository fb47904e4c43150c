"""``worldline export`` and ``replay`` over a log of MiB-sized ops (issue 23, F16): an
agent may fill its own op subject with junk of up to 1 MiB per op, and the operator's
export must still hold every op, or fail saying which are missing.

Before, an export asked for 500 ops per fetch whatever their size; the server cut
the operator off as a slow consumer (``max_pending`` exceeded: 64 MiB by default,
8 MiB here so a few dozen junk ops show it), every concurrent export and the replay
exited 4, and when the ops lost in flight were the log's last the export exited 0
short and replay printed ``match: NO``. Now each pull request is capped in bytes and
the read ends at the world's last sequence, reading any hole again.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Final

import anyio
import msgspec
import nats
import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.actors.runtime import consume, prepare
from worldline.actors.runtime.declare import ensure_streams
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.protocols.messages import AddBelief, encode
from worldline.protocols.subjects import STREAMS, ops
from worldline.sdk.crew import new_id, utc_now
from worldline.sdk.declaration import load_declaration
from worldline.sdk.oplog import EXPORT_BYTES

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).parent / "worldline")
CREW_TOML: Final = Path(__file__).resolve().parents[2] / "examples" / "crew.toml"
PILOT: Final = "project:soteria-pilot-conversion"
JUNK: Final = b"\x00" * (900 * 1024)  # one junk op: undecodable, dead-lettered
GOOD: Final = 120
EVERY: Final = 3  # one junk op after every third good one (and three at the end)


def _op(n: int) -> bytes:
    return encode(
        AddBelief(
            op_id=new_id("op"),
            author="ada",
            at=utc_now(),
            belief_id=f"b-{n:04d}",
            text=f"Belief number {n} holds",
        )
    )


async def _log(url: str, world: str) -> tuple[int, int]:
    """Publish the world's log: good ops from ada, junk from spock, junk last.
    Returns (ops in the world, the sequence of the last good op)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, STREAMS)
        last_good = 0
        for n in range(1, GOOD + 1):
            last_good = (await js.publish(ops(world, "ada"), _op(n))).seq
            if n % EVERY == 0:
                await js.publish(ops(world, "spock"), JUNK)
        for _ in range(3):  # lost in flight at the tail, nothing showed it
            await js.publish(ops(world, "spock"), JUNK)
        await js.publish(ops("another-world", "ada"), _op(0))
        info = await js.stream_info("WL_OPS", subjects_filter=ops(world, "*"))
        return sum((info.state.subjects or {}).values()), last_good
    finally:
        await nc.close()


async def _cli(url: str, world: str, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "WORLDLINE_NATS": url, "WORLDLINE_WORLD": world}
    done = await anyio.run_process([WORLDLINE, *args], env=env, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _server(tmp_path: Path, max_pending: int) -> EmbeddedNats:
    conf = tmp_path / "server.conf"
    conf.write_text(f"max_pending: {max_pending}\n")
    return EmbeddedNats(tmp_path / "nats", config=conf)


async def test_an_export_of_mib_sized_ops_holds_every_op_and_replay_matches(
    tmp_path: Path,
) -> None:
    max_pending = 8 * 1024 * 1024
    assert max_pending > EXPORT_BYTES
    world = unique_world("bigops")
    with _server(tmp_path, max_pending) as server:
        count, last_good = await _log(server.url, world)
        assert count == GOOD + GOOD // EVERY + 3
        assert count * len(JUNK) // 3 > 4 * max_pending  # what a fetch asked for
        async with (
            running(all_actors(), url=server.url, data=tmp_path / "live"),
            worldline.connect(server.url, world=world, agent="operator") as op,
        ):
            with anyio.fail_after(120):
                while True:
                    if (await op.state_hash()).applied >= last_good:
                        break
                    await anyio.sleep(0.2)
            outs = [tmp_path / f"ops-{n}.jsonl" for n in range(3)]
            done: list[tuple[int, str, str]] = []

            async def export(out: Path) -> None:
                done.append(await _cli(server.url, world, "export", "--out", str(out)))

            async with anyio.create_task_group() as tg:  # three at once, as F16
                for out in outs:
                    tg.start_soon(export, out)
            for code, _, err in done:
                assert code == 0, err
                assert f"exported {count} ops" in err
            for out in outs:
                lines = out.read_text().splitlines()
                seqs = [json.loads(line)["seq"] for line in lines]
                assert len(seqs) == count
                assert seqs == sorted(set(seqs))
            code, shown, err = await _cli(server.url, world, "replay")
            assert code == 0, err
            assert "match: yes" in shown, shown
            assert f"ops: {count}" in shown
            assert f"undecodable: {count - GOOD}" in shown
            # F15: each junk op is dead-lettered twice (fusion, materializer-ops),
            # each letter a few KiB (it held 512 KiB of the op before).
            junk = count - GOOD
            nc = await nats.connect(server.url)
            try:
                with anyio.fail_after(30):
                    while True:
                        dlq = (await nc.jetstream().stream_info("WL_DLQ")).state
                        if dlq.messages >= 2 * junk:
                            break
                        await anyio.sleep(0.2)
            finally:
                await nc.close()
            assert dlq.messages == 2 * junk
            assert dlq.bytes < 2 * junk * 9 * 1024, dlq.bytes
            code, shown, err = await _cli(server.url, world, "--json", "status")
            assert code == 0, err
            instances = json.loads(shown)["instances"]
            assert sum(i["dlq"] for i in instances) == 2 * junk, shown
        log = server.log_path.read_text(errors="replace")
    assert "Slow Consumer" not in log, log[-2000:]


async def test_ops_lost_in_flight_are_read_again_never_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server whose ``max_pending`` is below what one request may bring cuts the
    reader off mid-request: the ops lost then, the log's last ones included, are
    read again (with a smaller cap) and the export still holds every op."""
    caplog.set_level(logging.WARNING)
    world = unique_world("dropped")
    with _server(tmp_path, 2 * 1024 * 1024) as server:
        count, _ = await _log(server.url, world)
        for _ in range(2):
            async with worldline.connect(
                server.url, world=world, agent="operator"
            ) as op:
                seqs = [record.seq async for record in op.backup()]
            assert len(seqs) == count
            assert seqs == sorted(set(seqs))
        log = server.log_path.read_text(errors="replace")
    if "Slow Consumer" in log:  # cut off: what was lost was read again
        assert any("read again" in r.getMessage() for r in caplog.records)


async def test_the_logs_last_ops_are_never_cut_silently(tmp_path: Path) -> None:
    """A log whose last ops are the large ones: before, those lost in flight at the
    tail were followed by nothing that showed the hole, and the export returned
    without them (here: 105 and 106 of 120, no error, in two of six runs)."""
    world = unique_world("tail")
    with _server(tmp_path, 8 * 1024 * 1024) as server:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await ensure_streams(js, STREAMS)
            for n in range(100):
                await js.publish(ops(world, "ada"), _op(n))
            for _ in range(20):
                await js.publish(ops(world, "spock"), JUNK)
        finally:
            await nc.close()
        for _ in range(3):
            async with worldline.connect(
                server.url, world=world, agent="operator"
            ) as op:
                seqs = [record.seq async for record in op.backup()]
            assert seqs == list(range(1, 121))


async def test_a_log_of_many_small_ops_reads_in_full_requests_without_holes(
    nats_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The status that ends one pull request never ends the next (each has its own
    reply subject): a log of several full requests reads with no hole read again."""
    caplog.set_level(logging.WARNING)
    world = unique_world("small")
    count = 4 * 500 + 7
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, STREAMS)
        for n in range(count):
            await js.publish_async(ops(world, "ada"), _op(n))
        await js.publish_async_completed()
    finally:
        await nc.close()
    async with worldline.connect(nats_url, world=world, agent="operator") as op:
        seqs = [record.seq async for record in op.backup()]
    assert seqs == list(range(1, count + 1))
    assert not [r for r in caplog.records if "read again" in r.getMessage()]


async def test_replay_waits_for_the_live_actors_to_apply_what_it_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay run while the actors are still reading the junk (F16 ran right after
    F15) compares with the live world once it has applied as far as the log the
    replay read, instead of printing ``match: NO`` for a world that only lags. Here
    the live materializer takes 30 ms per op, so it lags by seconds."""
    original = prepare.prepared_input

    async def slow(inp: Any, msgs: Any, deliveries: Any, *a: Any, **kw: Any) -> Any:
        if inp.consumer.durable == "materializer-ops":
            await anyio.sleep(0.03 * len(deliveries))
        return await original(inp, msgs, deliveries, *a, **kw)

    monkeypatch.setattr(consume, "prepared_input", slow)
    world = unique_world("lag")
    with _server(tmp_path, 64 * 1024 * 1024) as server:
        count, _ = await _log(server.url, world)
        async with running(all_actors(), url=server.url, data=tmp_path / "live"):
            code, shown, err = await _cli(server.url, world, "replay")
    assert code == 0, shown + err
    assert "match: yes" in shown, shown
    assert f"ops: {count}" in shown


async def test_replay_of_a_world_written_to_meanwhile_compares_where_it_stood(
    tmp_path: Path,
) -> None:
    """F16 ran while an honest agent kept writing (as F15's scotty): the live world
    moves on while the replay reads the log, so its state now is no replay's. The
    live state taken before the log was read is compared with the replay at that op
    instead (before, ``match: NO``)."""
    world = unique_world("moving")
    with _server(tmp_path, 64 * 1024 * 1024) as server:
        _, last_good = await _log(server.url, world)
        stop = anyio.Event()
        written: list[int] = []
        async with (
            running(all_actors(), url=server.url, data=tmp_path / "live"),
            worldline.connect(server.url, world=world, agent="ada") as ada,
        ):
            with anyio.fail_after(60):
                while True:
                    if (await ada.state_hash()).applied >= last_good:
                        break
                    await anyio.sleep(0.2)
            decl = load_declaration(CREW_TOML)
            await ada.declare(
                msgspec.structs.replace(
                    decl, world=msgspec.structs.replace(decl.world, id=world)
                )
            )

            async def writes() -> None:
                n = 0
                while not stop.is_set():
                    n += 1
                    written.append(await ada.write(PILOT, "phase", f"step-{n}"))
                    await anyio.sleep(0.05)

            async with anyio.create_task_group() as tg:
                tg.start_soon(writes)
                code, shown, err = await _cli(server.url, world, "replay")
                stop.set()
    assert len(written) > 5
    assert code == 0, shown + err
    assert "match: yes" in shown, shown

"""``worldline replay`` refuses exactly what the live actors refused (issue 23).

An op published with the header ``Wl-Batch`` is unpacked as a batch by the live
actors and dead-lettered (ops never travel in batches); ``replay`` read the same op
from the log without its header and applied it, so from then on it said ``match:
NO``. Replay now builds each delivery from the log's bytes and header through the
consume loop's own code (``deliveries.delivery``). The log here holds that attack
beside other hostile ops: a forged author, truncated msgpack, an op whose time has an
offset and a field this version does not know (whose bytes the op cannot rebuild).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta, timezone
from pathlib import Path

import anyio
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import worldline
from tests.support import all_actors, running, unique_world
from worldline.protocols.messages import AddBelief, encode
from worldline.protocols.subjects import BATCH_HEADER, ops
from worldline.sdk.crew import new_id, utc_now

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).parent / "worldline")


def _belief(n: int, author: str = "ada") -> AddBelief:
    return AddBelief(
        op_id=new_id("op"),
        author=author,
        at=utc_now(),
        belief_id=f"b-{n}",
        text=f"Belief number {n} holds",
    )


def _offset_op(n: int) -> bytes:
    """An op as another client may write it: its time with a +02:00 offset, as a
    string, and a field this version does not know."""
    body = msgspec.to_builtins(_belief(n))
    at = utc_now().astimezone(timezone(timedelta(hours=2)))
    body["at"] = at.isoformat()
    body["from_the_future"] = [1, 2, 3]
    return msgspec.msgpack.encode(body)


async def _hpub(url: str, subject: str, headers: bytes, payload: bytes) -> None:
    """HPUB over a plain socket: a header block exactly as written, which no client
    library would send (a lowercase name, no value, the name twice)."""
    block = b"NATS/1.0\r\n" + headers + b"\r\n"
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    async with await anyio.connect_tcp(host, int(port)) as sock:
        await sock.receive()  # INFO
        await sock.send(
            b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
            + b"HPUB %s %d %d\r\n%s%s\r\nPING\r\n"
            % (subject.encode(), len(block), len(block) + len(payload), block, payload)
        )
        assert b"PONG" in await sock.receive()


# Header blocks as a hostile client may write them; whatever the live actors' raw
# pull makes of each, the export (nats-py's parser) must make the same.
HEADER_BLOCKS = (
    b"wl-batch: 2\r\n",
    b"Wl-Batch:\r\n",
    b"Wl-Batch:2\r\n",
    b"Wl-Batch: 2\r\nWl-Batch: 3\r\n",
    b"X-Other: 1\r\nWl-Batch: 1\r\n",
    b"Wl-Batch : 2\r\n",
)


async def _cli(url: str, world: str, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "WORLDLINE_NATS": url, "WORLDLINE_WORLD": world}
    done = await anyio.run_process([WORLDLINE, *args], env=env, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_replay_dead_letters_what_the_live_actors_dead_lettered(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("hostile")
    subject = ops(world, "ada")
    async with (
        running(all_actors(), url=nats_url, data=tmp_path / "live"),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        js = ada._js
        await js.publish(subject, encode(_belief(1)))
        # The attack: a valid op with a batch header (the live actors unpack it as a
        # batch and dead-letter it), and one whose header is no count.
        await js.publish(subject, encode(_belief(2)), headers={BATCH_HEADER: "2"})
        await js.publish(subject, encode(_belief(3)), headers={BATCH_HEADER: "x"})
        await js.publish(subject, encode(_belief(4, author="zora")))  # forged
        await js.publish(subject, encode(_belief(5))[:-7])  # truncated
        await js.publish(subject, _offset_op(6))
        for n, block in enumerate(HEADER_BLOCKS, start=10):
            await _hpub(nats_url, subject, block, encode(_belief(n)))
        last = await js.publish(subject, encode(_belief(7)))
        with anyio.fail_after(30):
            while True:  # the last op and its belief (through fusion) are in
                await ada.sync()
                if (await ada.state_hash()).applied >= last.seq and await ada.get(
                    "b-7"
                ):
                    break
                await anyio.sleep(0.1)
        assert await ada.get("b-1") is not None
        assert await ada.get("b-2") is None  # dead-lettered live
        assert await ada.get("b-3") is None
        assert await ada.get("b-6") is not None

        code, shown, err = await _cli(nats_url, world, "replay")
        assert code == 0, shown + err
        assert "match: yes" in shown, shown
        out = tmp_path / "ops.jsonl"
        code, _, err = await _cli(nats_url, world, "export", "--out", str(out))
        assert code == 0, err
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        assert [line.get("batch") for line in lines[1:3]] == ["2", "x"]
        assert "payload" in lines[5]  # the offset op is kept as its bytes too
        code, offline, err = await _cli(nats_url, world, "replay", "--from", str(out))
        assert code == 0, err
        assert offline.splitlines()[0] == shown.splitlines()[0]


@settings(max_examples=500, deadline=None, database=None)
@given(
    st.lists(
        st.lists(
            st.sampled_from(["Wl-Batch", "wl-batch", ":", " ", "\t", "2", "x", "X-"]),
            max_size=6,
        ).map("".join),
        max_size=4,
    )
)
def test_the_raw_pull_reads_the_batch_header_as_nats_py_does(lines: list[str]) -> None:
    """The live actors' raw pull and ``worldline export`` (nats-py's ``Msg``) must
    agree on which messages carry a batch header, or a replay would apply what the
    live actors dead-lettered."""
    from nats.aio.client import Client

    from worldline.actors.runtime.bus import _batch_header

    parse = getattr(Client, "_parse_header_lines", None)
    if parse is None:  # an older nats-py parses with the email module
        pytest.skip("this nats-py has no _parse_header_lines")
    block = b"NATS/1.0\r\n" + b"".join(x.encode() + b"\r\n" for x in lines) + b"\r\n"
    assert _batch_header(block) == parse(block[len(b"NATS/1.0\r\n") :]).get(
        BATCH_HEADER
    )

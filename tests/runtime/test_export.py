"""``worldline export`` and ``replay`` over a log that holds frames nobody should have
published: a subject that is not valid UTF-8, a payload that is not an op. The export
keeps every op (those two as their bytes), and a replay, from the bus or from the
file, matches the live state."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import anyio
import pytest

import worldline
from tests.support import all_actors, running, unique_world
from worldline.protocols.messages import AddBelief, encode
from worldline.protocols.subjects import ops
from worldline.sdk.crew import new_id, utc_now

pytestmark = pytest.mark.nats

WORLDLINE = str(Path(sys.executable).parent / "worldline")
OPS = 512
BAD_SUBJECT_AT = 33  # the op whose subject's agent token is not UTF-8
NOT_AN_OP_AT = (100, OPS)  # payloads that are not ops (the log's last one too)


async def _raw_publish(url: str, subject: bytes, payload: bytes) -> None:
    """PUB over a plain socket: nats-py will not send a subject that is not text."""
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    async with await anyio.connect_tcp(host, int(port)) as sock:
        await sock.receive()  # INFO
        await sock.send(
            b'CONNECT {"verbose":false,"pedantic":false}\r\n'
            + b"PUB %s %d\r\n%s\r\nPING\r\n" % (subject, len(payload), payload)
        )
        assert b"PONG" in await sock.receive()


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


async def _cli(url: str, world: str, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "WORLDLINE_NATS": url, "WORLDLINE_WORLD": world}
    done = await anyio.run_process([WORLDLINE, *args], env=env, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_export_and_replay_keep_frames_that_are_not_text_or_not_ops(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("export")
    bad_subject = ops(world, "").encode() + b"\xff\xfeada"  # not UTF-8
    async with (
        running(all_actors(), url=nats_url, data=tmp_path / "live"),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        for n in range(1, OPS + 1):
            if n == BAD_SUBJECT_AT:
                await _raw_publish(nats_url, bad_subject, _op(n))
            elif n in NOT_AN_OP_AT:
                await ada._js.publish(ops(world, "ada"), b"\x93not an op")
            else:
                await ada._js.publish(ops(world, "ada"), _op(n))
        with anyio.fail_after(30):
            while True:  # the last op that applies is the one before the log's last
                if (await ada.state_hash()).applied >= OPS - 1:
                    break
                await anyio.sleep(0.1)

        out = tmp_path / "ops.jsonl"
        code, _, err = await _cli(nats_url, world, "export", "--out", str(out))
        assert code == 0, err
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        assert [line["seq"] for line in lines] == list(range(1, OPS + 1)), err
        assert f"exported {OPS} ops" in err
        assert "warning: 2 of 512 ops do not decode (seq 100, 512)" in err
        bad = lines[BAD_SUBJECT_AT - 1]
        assert base64.b64decode(bad["subject_bytes"]) == bad_subject
        assert bad["subject"] == ops(world, "\ufffd\ufffdada")  # as the actors read it
        assert bad["op"]["belief_id"] == f"b-{BAD_SUBJECT_AT:04d}"
        raw = lines[NOT_AN_OP_AT[0] - 1]
        assert base64.b64decode(raw["payload"]) == b"\x93not an op"
        assert raw["reason"].startswith("undecodable")

        for _ in range(2):  # every run, not only the first
            code, shown, err = await _cli(nats_url, world, "replay")
            assert code == 0, err
            assert "match: yes" in shown, shown
            assert f"ops: {OPS}" in shown
            assert "undecodable: 2" in shown
        code, offline, err = await _cli(nats_url, world, "replay", "--from", str(out))
        assert code == 0, err
        assert offline.splitlines()[0] == shown.splitlines()[0]
        # The SDK's connection survived the frame too, and its iterator of decodable
        # ops skips only what does not decode.
        assert len([r async for r in ada.export()]) == OPS - 2

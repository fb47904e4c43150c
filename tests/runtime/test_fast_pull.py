"""The fast pull path and its fallback.

worldline's client overrides a private method of nats-py's (``_process_msg``) so a
pull takes each message right off the protocol parser; a signature check guards it,
and when the check fails (a nats-py release changed the method) or
``WORLDLINE_RAW_PULL=0`` forces it, pulls take nats-py's own ``Msg`` objects.
``.ci/nats-py-drift`` runs these tests and tests/runtime/test_bus.py against the
oldest and the newest nats-py, both ways.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest
from nats.aio.client import Client as NATS

import worldline
from tests.support import all_actors, running, unique_world
from worldline.actors.runtime import bus
from worldline.actors.runtime.bus import RAW_PULL_ENV, Puller

if TYPE_CHECKING:
    from pathlib import Path


def test_the_signature_check_takes_only_the_parser_it_knows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(RAW_PULL_ENV, raising=False)
    assert bus._hands_raw_messages()

    async def changed(self: NATS, sid: int, subject: bytes, reply: bytes, data: bytes,
                      headers: bytes | None, extra: int = 0) -> None:  # fmt: skip
        raise AssertionError("never called")

    monkeypatch.setattr(NATS, "_process_msg", changed)
    assert not bus._hands_raw_messages()
    monkeypatch.delattr(NATS, "_process_msg")
    assert not bus._hands_raw_messages()


def test_the_switch_forces_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RAW_PULL_ENV, "0")
    assert not bus._hands_raw_messages()
    monkeypatch.setenv(RAW_PULL_ENV, "1")
    assert bus._hands_raw_messages()


def test_the_switch_reaches_the_module_constant() -> None:
    """What the drift script relies on: the variable, set for the whole run, decides
    which path every pull of the run takes."""
    assert bus.RAW_MESSAGES is (os.environ.get(RAW_PULL_ENV, "").strip() != "0")


@pytest.mark.nats
@pytest.mark.parametrize("raw", [True, False], ids=["raw", "fallback"])
async def test_the_actors_write_and_read_through_either_path(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: bool
) -> None:
    if raw and not bus.RAW_MESSAGES:
        pytest.skip(f"the raw path is off in this run ({RAW_PULL_ENV}=0)")
    monkeypatch.setattr(bus, "RAW_MESSAGES", raw)
    taken = {"raw": 0, "msg": 0}
    take_raw, take_msg = Puller._take_raw, Puller._take_msg

    def counting_raw(self: Puller, *args: Any) -> None:
        taken["raw"] += 1
        take_raw(self, *args)

    async def counting_msg(self: Puller, msg: Any) -> None:
        taken["msg"] += 1
        await take_msg(self, msg)

    monkeypatch.setattr(Puller, "_take_raw", counting_raw)
    monkeypatch.setattr(Puller, "_take_msg", counting_msg)
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        added = [await ada.add(f"Claim {n} holds", confidence=0.7) for n in range(3)]
        got = [await ada.get(b.id) for b in added]
    assert [b.id if b else None for b in got] == [b.id for b in added]
    # Every actor's pulls went one way only.
    used, unused = ("raw", "msg") if raw else ("msg", "raw")
    assert taken[used] >= 3
    assert taken[unused] == 0

"""The operator settings behind a cluster deployment, on one server: the stream
replica count, and a comma-separated server list."""

from __future__ import annotations

import re

import pytest

from worldline.actors.runtime.bus import connect
from worldline.actors.runtime.declare import (
    REPLICAS_ENV,
    ensure_buckets,
    ensure_streams,
    stream_replicas,
)
from worldline.actors.runtime.errors import BusUnavailable, ConfigDrift
from worldline.cli import main
from worldline.protocols.subjects import BUCKETS, OPS, STREAMS

DEAD = "nats://127.0.0.1:1"  # nothing listens on port 1


def test_replicas_default_to_one_and_bad_settings_are_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(REPLICAS_ENV, raising=False)
    assert stream_replicas() == 1
    monkeypatch.setenv(REPLICAS_ENV, "3")
    assert stream_replicas() == 3
    for bad in ("0", "6", "three", "-1"):
        monkeypatch.setenv(REPLICAS_ENV, bad)
        with pytest.raises(ValueError, match=f"{REPLICAS_ENV}='{bad}'"):
            stream_replicas()


def test_the_cli_refuses_a_bad_replica_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["actor", "fusion", "--stream-replicas", "7"])
    assert exited.value.code == 2
    assert "'7' is not a replica count" in capsys.readouterr().err


async def test_a_server_list_fails_over_to_a_live_server(nats_url: str) -> None:
    nc = await connect(f"{DEAD}, {nats_url}", name="failover", connect_timeout=0.5)
    try:
        assert nc.is_connected
    finally:
        await nc.close()


async def test_a_server_list_with_no_live_server_is_named() -> None:
    with pytest.raises(
        BusUnavailable, match=re.escape(f"cannot reach NATS at {DEAD},")
    ):
        await connect(f"{DEAD},nats://127.0.0.1:2", name="dead", connect_timeout=0.5)


async def test_more_replicas_than_servers_is_refused_clearly(nats_url: str) -> None:
    nc = await connect(nats_url, name="replicas")
    try:
        js = nc.jetstream()
        with pytest.raises(ConfigDrift, match=f"stream {OPS.name}") as refused:
            await ensure_streams(js, [OPS], replicas=3)
        assert "3 replica(s)" in str(refused.value)
        assert REPLICAS_ENV in str(refused.value)
        await ensure_streams(js, STREAMS, replicas=1)
        await ensure_buckets(js, BUCKETS, replicas=1)
        # An existing stream whose replica count drifted is updated; one server
        # refuses three, and the refusal names the stream and the setting.
        with pytest.raises(ConfigDrift, match="num_replicas: 1 -> 3"):
            await ensure_streams(js, [OPS], replicas=3)
        with pytest.raises(ConfigDrift, match="keeps 1 replica"):
            await ensure_buckets(js, BUCKETS, replicas=3)
    finally:
        await nc.close()

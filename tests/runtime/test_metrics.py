"""The Prometheus endpoint: counters and latency histograms the runtime keeps, served
on GET /metrics beside the /healthz and /readyz probes.

Scrapes are parsed (the text exposition format), not grepped: every sample is read
into ``{(name, labels): value}`` and checked against the HELP/TYPE lines.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Final

import anyio
import nats
import pytest

import worldline
from tests.support import all_actors, unique_world
from worldline.actors.registry import build
from worldline.actors.runtime.endpoint import answer, serve_metrics
from worldline.actors.runtime.lease import LeaseGate
from worldline.actors.runtime.metrics import (
    RateWindow,
    Registry,
    published_at,
    render,
)
from worldline.actors.runtime.supervise import run_actors
from worldline.protocols.subjects import ops

Sample = tuple[str, frozenset[tuple[str, str]]]

LINE: Final = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{(?P<labels>[^}]*)\})?"
    r" (?P<value>[-+]?(?:[0-9.eE+-]+|Inf|NaN))$"
)
LABEL: Final = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
WORLDLINE: Final = str(Path(sys.executable).parent / "worldline")


def parse(text: str) -> dict[Sample, float]:
    """Parse Prometheus text format; fail on any line that is not well-formed."""
    types: dict[str, str] = {}
    samples: dict[Sample, float] = {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "histogram"), line
            types[name] = kind
            continue
        match = LINE.match(line)
        assert match, f"not a sample line: {line!r}"
        name = match["name"]
        family = re.sub(r"_(bucket|count|sum)$", "", name)
        assert name in types or types.get(family) == "histogram", (
            f"{name} has no TYPE line before it"
        )
        labels = frozenset(LABEL.findall(match["labels"] or ""))
        key = (name, labels)
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(match["value"])
    for name, kind in types.items():
        if kind == "counter":
            assert name.endswith("_total"), name
    return samples


def value(samples: dict[Sample, float], name: str, **labels: str) -> float:
    return samples[name, frozenset(labels.items())]


def scrape(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return (
                response.status,
                response.headers["Content-Type"],
                response.read().decode(),
            )
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


# --- pure ----------------------------------------------------------------------------


def test_rate_window_averages_over_the_last_minute() -> None:
    window = RateWindow(window=60.0)
    assert window.observe(0.0, 0) == 0.0
    assert window.observe(10.0, 50) == pytest.approx(5.0)
    assert window.observe(30.0, 50) == pytest.approx(50 / 30)
    # After a quiet minute the old burst falls out of the window.
    assert window.observe(100.0, 50) == pytest.approx(0.0)
    assert window.observe(110.0, 70) == pytest.approx(20 / 80)


def test_render_counts_every_actor_and_durable_once() -> None:
    registry = Registry()
    fusion = registry.actor(build("fusion"), now=datetime(2024, 1, 1, tzinfo=UTC))
    mat = registry.actor(build("materializer"))
    fusion.record("fusion", [True, True, False], 0.25)
    fusion.record("fusion", [], 9.0)  # an empty fetch: not a batch
    fusion.store_bytes = 4096
    fusion.inputs["fusion"].lag = 3
    samples = parse(render(registry))
    f = {"actor": "fusion", "durable": "fusion"}
    assert value(samples, "worldline_messages_applied_total", **f) == 2
    assert value(samples, "worldline_messages_dead_lettered_total", **f) == 1
    assert value(samples, "worldline_batches_total", **f) == 1
    assert value(samples, "worldline_last_batch_apply_seconds", **f) == 0.25
    assert value(samples, "worldline_consumer_lag", **f) == 3
    assert value(samples, "worldline_store_bytes", actor="fusion") == 4096
    assert value(samples, "worldline_start_time_seconds", actor="fusion") == (
        datetime(2024, 1, 1, tzinfo=UTC).timestamp()
    )
    durables = {
        dict(labels)["durable"]
        for name, labels in samples
        if name == "worldline_batches_total" and ("actor", mat.instance) in labels
    }
    assert durables == {i.consumer.durable for i in build("materializer").inputs}
    # Lag unknown until the first heartbeat: no sample rather than a made-up 0.
    assert ("worldline_consumer_lag", frozenset(f.items())) in samples
    assert not any(
        name == "worldline_consumer_lag" and ("actor", mat.instance) in labels
        for name, labels in samples
    )


def test_liveness_gauges_show_heartbeats_stalls_and_the_lease() -> None:
    registry = Registry()
    fusion = registry.actor(build("fusion"))
    mat = registry.actor(build("materializer", replica="a"))
    mat.lease = LeaseGate("materializer.p0of1", mat.instance)
    samples = parse(render(registry))
    f = {"actor": "fusion", "durable": "fusion"}
    assert value(samples, "worldline_input_stalled", **f) == 0
    # No heartbeat written yet: no sample rather than a made-up time.
    assert not any(n == "worldline_heartbeat_time_seconds" for n, _ in samples)
    lease = {"actor": mat.instance, "lease": "materializer.p0of1"}
    assert value(samples, "worldline_lease_held", **lease) == 0
    assert value(samples, "worldline_lease_term", **lease) == 0
    # Only a replica that takes a lease reports one.
    assert {
        dict(labels)["actor"] for n, labels in samples if n == "worldline_lease_held"
    } == {mat.instance}
    fusion.heartbeat_at = 1_700_000_000.0
    fusion.inputs["fusion"].stalled_since = datetime(2024, 1, 1, tzinfo=UTC)
    samples = parse(render(registry))
    assert value(samples, "worldline_input_stalled", **f) == 1
    beat = value(samples, "worldline_heartbeat_time_seconds", actor="fusion")
    assert beat == 1_700_000_000.0


def test_label_values_are_escaped() -> None:
    registry = Registry()
    metrics = registry.actor(build("fusion"))
    metrics.instance = 'odd"name\\'
    samples = parse(render(registry))
    assert ("actor", r"odd\"name\\") in next(
        labels for name, labels in samples if name == "worldline_store_bytes"
    )


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"200 OK"),
        (b"GET /metrics?x=1 HTTP/1.0\r\n\r\n", b"200 OK"),
        (b"GET /healthz HTTP/1.1\r\n\r\n", b"200 OK"),
        (b"GET /readyz HTTP/1.1\r\n\r\n", b"503 Service Unavailable"),
        (b"GET / HTTP/1.1\r\n\r\n", b"404 Not Found"),
        (b"POST /metrics HTTP/1.1\r\n\r\n", b"405 Method Not Allowed"),
        (b"garbage\r\n\r\n", b"400 Bad Request"),
        (b"", b"400 Bad Request"),
    ],
)
def test_answer_serves_metrics_and_the_probes_only(head: bytes, status: bytes) -> None:
    response = answer(head, Registry())  # no actor started: not ready
    assert response.startswith(b"HTTP/1.0 " + status + b"\r\n")
    length = re.search(rb"Content-Length: (\d+)", response)
    assert length is not None
    assert len(response.split(b"\r\n\r\n", 1)[1]) == int(length[1])


def test_ready_once_every_expected_actor_started_and_while_connected() -> None:
    registry = Registry()
    registry.expected = 2
    assert registry.readiness() == ["0 of 2 actors started; waiting"]
    fusion = registry.actor(build("fusion"))
    assert registry.readiness() == ["fusion: starting"]
    up = [True]
    fusion.connected = lambda: up[0]
    assert registry.readiness() == ["1 of 2 actors started; waiting"]
    registry.actor(build("materializer")).connected = lambda: True
    assert registry.readiness() == []
    assert answer(b"GET /readyz HTTP/1.1\r\n\r\n", registry).endswith(b"ready\n")
    up[0] = False  # the connection dropped (nats-py reconnects meanwhile)
    assert registry.readiness() == ["fusion: not connected to NATS"]
    response = answer(b"GET /readyz HTTP/1.1\r\n\r\n", registry)
    assert response.startswith(b"HTTP/1.0 503")
    assert response.endswith(b"fusion: not connected to NATS\n")


def test_published_at_reads_the_ack_reply_timestamp() -> None:
    ns = 1_700_000_000_123_456_789
    assert published_at(f"$JS.ACK.WL_OPS.fusion.1.42.42.{ns}.0") == ns / 1e9
    with_domain = f"$JS.ACK.hub.ACCHASH.WL_OPS.fusion.1.42.42.{ns}.0.rand"
    assert published_at(with_domain) == ns / 1e9
    assert published_at("_INBOX.abc") is None
    assert published_at("$JS.ACK.WL_OPS.fusion.1.42.42.notanumber.0") is None


def test_batches_fill_the_apply_and_propagation_histograms() -> None:
    registry = Registry()
    fusion = registry.actor(build("fusion"))
    stored = 1_000.0
    reply = f"$JS.ACK.WL_OPS.fusion.1.7.7.{int(stored * 1e9)}.0"
    fusion.record("fusion", [True, True], 0.003, reply, now=stored + 0.2)
    fusion.record("fusion", [True], 0.02, reply, now=stored + 4.0)
    fusion.record("fusion", [True], 0.001, reply, now=stored - 2.0)  # clock skew: 0
    fusion.record("fusion", [True], 0.001, "_INBOX.x")  # no timestamp: not counted
    fusion.record("fusion", [], 0.001, reply)  # an empty fetch: nothing
    fusion.observe_rpc("before", 0.004)
    samples = parse(render(registry))
    f = {"actor": "fusion", "durable": "fusion"}
    assert value(samples, "worldline_apply_seconds_count", **f) == 4
    assert value(samples, "worldline_apply_seconds_sum", **f) == pytest.approx(0.025)
    assert value(samples, "worldline_apply_seconds_bucket", **f, le="0.0005") == 0
    assert value(samples, "worldline_apply_seconds_bucket", **f, le="0.005") == 3
    assert value(samples, "worldline_apply_seconds_bucket", **f, le="+Inf") == 4
    # One per batch with a JetStream timestamp: the age of its oldest message.
    assert value(samples, "worldline_propagation_seconds_count", **f) == 3
    assert value(samples, "worldline_propagation_seconds_sum", **f) == pytest.approx(
        4.2
    )
    assert value(samples, "worldline_propagation_seconds_bucket", **f, le="0.001") == 1
    assert value(samples, "worldline_propagation_seconds_bucket", **f, le="0.25") == 2
    assert value(samples, "worldline_propagation_seconds_bucket", **f, le="5.0") == 3
    assert (
        value(samples, "worldline_rpc_seconds_count", actor="fusion", verb="before")
        == 1
    )
    # The process collector: CPU and memory of this process.
    assert value(samples, "process_cpu_seconds_total") > 0
    assert value(samples, "process_resident_memory_bytes") > 0


# --- against a real nats-server ------------------------------------------------------


@pytest.mark.nats
async def test_metrics_move_with_writes_and_stop_with_the_actors(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world()
    registry = Registry(heartbeat_interval=0.3)
    async with anyio.create_task_group() as tg:
        await tg.start(
            partial(
                run_actors,
                all_actors(),
                url=nats_url,
                data=tmp_path,
                metrics=registry,
                metrics_port=0,
            )
        )
        port = registry.port or 0
        assert port > 0
        url = f"http://127.0.0.1:{port}/metrics"
        status, content_type, text = await anyio.to_thread.run_sync(scrape, url)
        assert status == 200
        assert content_type.startswith("text/plain; version=0.0.4")
        before = parse(text)
        # One endpoint for the whole process, an actor label per instance.
        assert {
            dict(labels)["actor"]
            for name, labels in before
            if name == "worldline_store_bytes"
        } == {spec.instance for spec in all_actors()}
        fusion = {"actor": "fusion", "durable": "fusion"}
        applied_before = value(before, "worldline_messages_applied_total", **fusion)

        async with worldline.connect(nats_url, world=world, agent="ada") as ada:
            for n in range(4):
                await ada.add(f"Claim {n}", confidence=0.7)
            await ada.before("claim")
        nc = await nats.connect(nats_url)
        try:
            await nc.jetstream().publish(ops(world, "mallory"), b"\xc1 garbage")
        finally:
            await nc.close()

        after = before
        with anyio.move_on_after(15):
            while True:
                after = parse((await anyio.to_thread.run_sync(scrape, url))[2])
                dead = value(after, "worldline_messages_dead_lettered_total", **fusion)
                lag = after.get(("worldline_consumer_lag", frozenset(fusion.items())))
                if dead == 1 and lag == 0:
                    break
                await anyio.sleep(0.2)
        assert value(after, "worldline_messages_applied_total", **fusion) == (
            applied_before + 4
        )
        assert value(after, "worldline_messages_dead_lettered_total", **fusion) == 1
        assert value(after, "worldline_batches_total", **fusion) >= 1
        assert value(after, "worldline_consumer_lag", **fusion) == 0
        assert value(after, "worldline_last_batch_apply_seconds", **fusion) > 0
        assert value(after, "worldline_store_bytes", actor="fusion") > 0
        projector = {"actor": "projector-0", "durable": "projector-0"}
        assert value(after, "worldline_messages_applied_total", **projector) >= 4
        # Latency histograms: each batch, each op's way into a posterior, each read.
        assert value(after, "worldline_apply_seconds_count", **fusion) >= 1
        assert value(after, "worldline_apply_seconds_sum", **fusion) > 0
        # One observation per committed batch, as for the apply time.
        assert value(after, "worldline_propagation_seconds_count", **fusion) == value(
            after, "worldline_apply_seconds_count", **fusion
        )
        assert value(after, "worldline_propagation_seconds_sum", **fusion) > 0
        before_rpc = {"actor": "projector-0", "verb": "before"}
        assert value(after, "worldline_rpc_seconds_count", **before_rpc) == 1
        assert value(after, "worldline_rpc_seconds_sum", **before_rpc) > 0
        assert value(after, "process_open_fds") > 0
        # Liveness: heartbeats land, nothing is stalled, the lone materializer holds
        # its partition's lease in the first term.
        beat = value(after, "worldline_heartbeat_time_seconds", actor="fusion")
        assert abs(beat - time.time()) < 30
        assert value(after, "worldline_input_stalled", **fusion) == 0
        leases = {
            (dict(labels)["actor"], v)
            for (name, labels), v in after.items()
            if name == "worldline_lease_held"
        }
        assert len(leases) == 1, leases
        assert next(iter(leases))[1] == 1, leases
        terms = [v for (n, _), v in after.items() if n == "worldline_lease_term"]
        assert terms
        assert terms[0] >= 1
        # Other paths are not served.
        missing = await anyio.to_thread.run_sync(
            scrape, f"http://127.0.0.1:{port}/other"
        )
        assert missing[0] == 404
        tg.cancel_scope.cancel()
    # Cancelled with the actors: the port is closed.
    with pytest.raises(OSError, match=r"connection attempts failed|refused"):
        await anyio.connect_tcp("127.0.0.1", port)


@pytest.mark.nats
def test_actor_command_serves_metrics_on_request(nats_url: str, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            WORLDLINE,
            "actor",
            "fusion",
            "--nats",
            nats_url,
            "--data",
            str(tmp_path),
            "--metrics-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        match = re.fullmatch(r"metrics: (http://127\.0\.0\.1:\d+/metrics)\n", first)
        assert match, first
        assert proc.stdout.readline() == f"fusion: consuming from {nats_url}\n"
        status, _, text = scrape(match[1])
        assert status == 200
        base = match[1].removesuffix("/metrics")
        assert scrape(f"{base}/healthz")[::2] == (200, "ok\n")
        assert scrape(f"{base}/readyz")[::2] == (200, "ready\n")
        samples = parse(text)
        assert (
            value(
                samples,
                "worldline_messages_applied_total",
                actor="fusion",
                durable="fusion",
            )
            == 0
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


@pytest.mark.nats
async def test_readyz_turns_200_once_the_actors_run_and_503_after(
    nats_url: str, tmp_path: Path
) -> None:
    registry = Registry()
    async with anyio.create_task_group() as tg:
        port = await tg.start(partial(serve_metrics, registry, port=0))
        readyz = f"http://127.0.0.1:{port}/readyz"
        healthz = f"http://127.0.0.1:{port}/healthz"
        assert (await anyio.to_thread.run_sync(scrape, healthz))[0] == 200
        status, _, text = await anyio.to_thread.run_sync(scrape, readyz)
        assert (status, text) == (503, "0 of 1 actors started; waiting\n")
        async with anyio.create_task_group() as actors:
            await actors.start(
                partial(
                    run_actors,
                    [build("fusion")],
                    url=nats_url,
                    data=tmp_path,
                    metrics=registry,
                )
            )
            status, _, text = await anyio.to_thread.run_sync(scrape, readyz)
            assert (status, text) == (200, "ready\n")
            actors.cancel_scope.cancel()
        # Stopped (its connection closed): not ready any more, still alive.
        status, _, text = await anyio.to_thread.run_sync(scrape, readyz)
        assert (status, text) == (503, "fusion: not connected to NATS\n")
        assert (await anyio.to_thread.run_sync(scrape, healthz))[0] == 200
        tg.cancel_scope.cancel()

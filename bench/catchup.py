"""Catch-up benchmark: a bulk load of beliefs into a declared crew world, and how fast
each actor applies it, the projector beside fusion measured in the same run.

The outside attack loaded 100k beliefs: fusion and the materializer applied them as
they arrived, the projector took 600 s to catch up. This bench repeats that at a size
that runs in a minute or two:

(a) end to end: the world of ``examples/crew.toml`` declared (six agents, so every
    batch of belief changes rebuilds six startup views), then ``--beliefs`` AddBelief
    ops with sentence-like text of a varied vocabulary (index cost grows with it)
    published pipelined straight onto ``wl.<world>.ops.<agent>``, as
    ``bench/pipeline.py`` does. Each actor is done when its durable holds nothing
    pending or unacked, checked in pipeline order (fusion, the materializer's two
    inputs, the projector); its rate is the beliefs over the time from the first
    publish to then. ``--actors up`` (default) runs every actor in one
    ``worldline up --nats`` process, as the attack did; ``process`` runs fusion,
    materializer and projector as separate ``worldline actor`` processes.
(b) in core: the same ops through the fusion, materializer and projector cores and
    their LMDB stores (``Store.apply_batch``, batches of 256), no bus; the
    projector's batches get the wall clock and the count still pending, as the
    runtime passes them.

Run: ``python bench/catchup.py [--beliefs N] [--actors up|process] [--quick]``.
Results: ``docs/benchmarks.md`` ("Projector catch-up").
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import msgspec
from nats.js import api

# bench/ holds scripts, not a package: its sibling is importable by name.
from pipeline import stop_actor_processes

import worldline
from worldline.actors.registry import build
from worldline.actors.runtime.bus import connect
from worldline.actors.runtime.deliveries import Delivery
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import AddBelief, DeclareWorld, encode
from worldline.protocols.subjects import (
    DERIVED_CHANNEL,
    FUSION_IN,
    MATERIALIZER_IN,
    MATERIALIZER_OPS_IN,
    ConsumerSpec,
    channel_of,
    ops,
    projector_in,
)
from worldline.sdk.declaration import load_declaration

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from nats.js import JetStreamContext

__all__ = ["Config", "Results", "main", "run", "sentences"]

AGENT = "loader"
BASE = datetime(2026, 1, 1, tzinfo=UTC)
FETCH = 256  # the actors' fetch batch (actors/runtime/consume.py)
CREW = Path(__file__).resolve().parents[1] / "examples" / "crew.toml"
STAGES: tuple[tuple[str, tuple[ConsumerSpec, ...]], ...] = (
    ("fusion", (FUSION_IN,)),
    ("materializer", (MATERIALIZER_OPS_IN, MATERIALIZER_IN)),
    ("projector", (projector_in("0"),)),
)
# Common words: a belief text mixes them with a long tail of rarer ones.
COMMON = [
    "the",
    "a",
    "of",
    "to",
    "in",
    "and",
    "for",
    "on",
    "with",
    "by",
    "from",
    "is",
    "was",
    "will",
    "be",
    "has",
    "have",
    "not",
    "that",
    "this",
    "pilot",
    "customer",
    "contract",
    "renewal",
    "outage",
    "latency",
    "deploy",
    "release",
    "invoice",
    "payer",
    "claims",
    "churn",
    "pricing",
    "partner",
    "onboarding",
    "roadmap",
    "audit",
    "tenant",
    "cache",
    "export",
]


@dataclass(frozen=True)
class Config:
    """How much to load, and how the actors run."""

    beliefs: int = 20_000
    window: int = 1000  # publish_async window
    actors: str = "up"  # "up": one `worldline up --nats`; "process": one each
    core_beliefs: int = 20_000  # (b)
    seed: int = 14
    drain_timeout: float = 900.0  # seconds the load may take to apply


@dataclass
class Results:
    """Rates in beliefs per second; times in seconds from the first publish."""

    actors: str
    beliefs: int
    vocabulary: int  # distinct words in the loaded texts
    publish: float
    done: dict[str, float]  # actor -> seconds until it had applied everything
    rates: dict[str, float]  # actor -> beliefs per second
    core_beliefs: int
    core_rates: dict[str, float]

    @property
    def ratio(self) -> float:
        """The projector's end-to-end rate over fusion's (1.0: it keeps up)."""
        return self.rates["projector"] / self.rates["fusion"]

    @property
    def core_ratio(self) -> float:
        return self.core_rates["projector"] / self.core_rates["fusion"]


def sentences(n: int, seed: int) -> Iterator[str]:
    """``n`` sentence-like texts: common words mixed with a long tail of made-up
    ones (a Zipf-like draw from about 20k), 8 to 20 words each, now and then a
    number or an identifier, as notes, tickets and research summaries read."""
    rng = random.Random(seed)
    syllables = [a + b for a in "bcdfghklmnprstvz" for b in "aeiou"]
    tail = sorted(
        {"".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(20_000)}
    )
    for i in range(n):
        words = []
        for _ in range(rng.randint(8, 20)):
            roll = rng.random()
            if roll < 0.35:
                words.append(rng.choice(COMMON))
            elif roll < 0.95:
                words.append(tail[int(rng.paretovariate(0.9)) % len(tail)])
            else:
                words.append(
                    f"{rng.choice(('q', 'v', 'ticket-'))}{rng.randint(1, 999)}"
                )
        yield f"{' '.join(words).capitalize()} (note {i})."


def load_ops(config: Config, n: int) -> list[AddBelief]:
    return [
        AddBelief(
            op_id=f"op-load-{i:08d}",
            author=AGENT,
            at=BASE + timedelta(milliseconds=i),
            belief_id=f"b-load-{i:08d}",
            text=text,
            confidence=0.6,
        )
        for i, text in enumerate(sentences(n, config.seed))
    ]


# --- (a) end to end -------------------------------------------------------------


def start_actors(url: str, data: Path, how: str) -> list[subprocess.Popen[str]]:
    """The actors as ``how`` says; returns once each one consumes."""
    cli = [sys.executable, "-m", "worldline.cli"]
    if how == "up":
        commands = [[*cli, "up", "--nats", url, "--data", str(data)]]
        ready = "ready"
    else:
        commands = [
            [*cli, "actor", name, "--nats", url, "--data", str(data)]
            for name in ("fusion", "materializer", "projector")
        ]
        ready = "consuming"
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
        for cmd in commands
    ]  # fmt: skip
    for proc in procs:
        assert proc.stdout is not None
        for line in proc.stdout:
            if ready in line:
                break
        else:
            stop_actor_processes(procs)
            raise RuntimeError(f"{proc.args!r} stopped before it was {ready}")
    return procs


async def _drained(js: JetStreamContext, specs: Sequence[ConsumerSpec]) -> bool:
    for spec in specs:
        info = await js.consumer_info(spec.stream.name, spec.durable)
        if info.num_pending or info.num_ack_pending:
            return False
    return True


async def end_to_end(url: str, config: Config, loads: list[AddBelief]) -> tuple[
    float, dict[str, float]
]:  # fmt: skip
    """Declare the crew world, publish the load, and time each actor's catch-up."""
    decl = load_declaration(CREW)
    world = decl.world.id
    admin = decl.authority.admins[0]
    async with worldline.connect(url, world=world, agent=admin) as sdk:
        await sdk.declare(decl)  # waits until the materializer applied it
    nc = await connect(url, name="bench-catchup")
    try:
        js = nc.jetstream()
        subject = ops(world, AGENT)
        start = time.perf_counter()
        for first in range(0, len(loads), config.window):
            futures = [
                await js.publish_async(
                    subject, encode(op), headers={api.Header.MSG_ID: op.op_id}
                )
                for op in loads[first : first + config.window]
            ]
            for future in futures:
                await future
        published = time.perf_counter() - start
        done: dict[str, float] = {}
        with anyio.fail_after(config.drain_timeout):
            for name, specs in STAGES:
                # Polling is the measurement: JetStream pushes no "drained" event.
                while not await _drained(js, specs):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
                done[name] = time.perf_counter() - start
                print(f"{name}: caught up at {done[name]:.1f}s", file=sys.stderr)
        return len(loads) / published, done
    finally:
        await nc.close()


# --- (b) in core --------------------------------------------------------------------


def in_core(config: Config, tmp: Path, loads: list[AddBelief]) -> dict[str, float]:
    """Beliefs per second through each core and its store, each fed what the one
    before it staged, in the actors' batch size."""
    decl = load_declaration(CREW)
    world = decl.world.id
    admin = decl.authority.admins[0]
    declare = DeclareWorld(op_id="op-declare", author=admin, at=BASE, declaration=decl)
    deliveries = [Delivery(1, ops(world, admin), encode(declare))] + [
        Delivery(i + 2, ops(world, AGENT), encode(op)) for i, op in enumerate(loads)
    ]
    fusion_input = build("fusion").inputs[0]
    ops_input, posterior_input = build("materializer").inputs
    (projector_input,) = build("projector").inputs
    stores = {
        name: Store(tmp / f"core-{name}", actor=name)
        for name in ("fusion", "materializer", "projector")
    }
    now = datetime.now(UTC)
    rates: dict[str, float] = {}
    n = len(loads)
    try:
        posteriors: list[Delivery] = []
        start = time.perf_counter()
        for chunk in range(0, len(deliveries), FETCH):
            result = stores["fusion"].apply_batch(
                fusion_input, deliveries[chunk : chunk + FETCH], now
            )
            stores["fusion"].clear_outbox([item.key for item in result.outbox])
            derived = [
                i for i in result.outbox if channel_of(i.subject) == DERIVED_CHANNEL
            ]
            posteriors += [
                Delivery(len(posteriors) + k, item.subject, item.payload)
                for k, item in enumerate(derived, start=1)
            ]
        rates["fusion"] = n / (time.perf_counter() - start)
        changes: list[Delivery] = []
        start = time.perf_counter()
        for inp, batch in ((ops_input, deliveries), (posterior_input, posteriors)):
            for chunk in range(0, len(batch), FETCH):
                result = stores["materializer"].apply_batch(
                    inp, batch[chunk : chunk + FETCH], now
                )
                stores["materializer"].clear_outbox([i.key for i in result.outbox])
                changes += [
                    Delivery(len(changes) + k, item.subject, item.payload)
                    for k, item in enumerate(result.outbox, start=1)
                ]
        rates["materializer"] = n / (time.perf_counter() - start)
        start = time.perf_counter()
        for chunk in range(0, len(changes), FETCH):
            part = changes[chunk : chunk + FETCH]
            # As the runtime does: the wall clock, and what is still pending (the
            # projector defers its views and its cards' vectors while there is).
            result = stores["projector"].apply_batch(
                projector_input,
                part,
                datetime.now(UTC),
                pending=len(changes) - chunk - len(part),
            )
            stores["projector"].clear_outbox([item.key for item in result.outbox])
        rates["projector"] = n / (time.perf_counter() - start)
        if len(posteriors) != n or len(changes) < n:
            raise RuntimeError(
                f"{n} beliefs gave {len(posteriors)} posteriors and "
                f"{len(changes)} changes"
            )
    finally:
        for store in stores.values():
            store.close()
    return rates


# --- the run ------------------------------------------------------------------------


async def measure(config: Config) -> Results:
    loads = load_ops(config, config.beliefs)
    vocabulary = len({w for op in loads for w in op.text.lower().split()})
    with (
        tempfile.TemporaryDirectory(prefix="wl-catchup-") as tmp_name,
        EmbeddedNats(Path(tmp_name) / "nats") as server,
    ):
        tmp = Path(tmp_name)
        core_loads = load_ops(config, config.core_beliefs)
        core_rates = await anyio.to_thread.run_sync(in_core, config, tmp, core_loads)
        procs = await anyio.to_thread.run_sync(
            start_actors, server.url, tmp / "data", config.actors
        )
        try:
            publish, done = await end_to_end(server.url, config, loads)
        finally:
            await anyio.to_thread.run_sync(stop_actor_processes, procs)
    return Results(
        actors=config.actors,
        beliefs=config.beliefs,
        vocabulary=vocabulary,
        publish=publish,
        done=done,
        rates={name: config.beliefs / t for name, t in done.items()},
        core_beliefs=config.core_beliefs,
        core_rates=core_rates,
    )


def report(r: Results) -> None:
    print(
        f"catch-up: {r.beliefs:,} beliefs ({r.vocabulary:,} distinct words) into a "
        f"declared crew world of six agents; actors: {r.actors}"
    )
    print(f"  {'published':<28}{r.publish:>10,.0f} beliefs/s")
    for name, rate in r.rates.items():
        label = f"{name} applied (all at {r.done[name]:.1f}s)"
        print(f"  {label:<28}{rate:>10,.0f} beliefs/s")
    print(f"  {'projector / fusion':<28}{r.ratio:>10.2f}")
    print(f"in core (no bus, {r.core_beliefs:,} beliefs):")
    for name, rate in r.core_rates.items():
        print(f"  {name:<28}{rate:>10,.0f} beliefs/s")
    print(f"  {'projector / fusion':<28}{r.core_ratio:>10.2f}")


def parse(argv: Sequence[str] | None) -> tuple[Config, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beliefs", type=int, default=None, help="(a) the load")
    parser.add_argument("--core-beliefs", type=int, default=None, help="(b) the load")
    parser.add_argument("--actors", choices=("up", "process"), default="up")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--quick", action="store_true", help="a small run")
    args = parser.parse_args(argv)
    base = Config(beliefs=600, core_beliefs=600, window=200) if args.quick else Config()
    overrides = {"beliefs": args.beliefs, "core_beliefs": args.core_beliefs}
    for key, value in overrides.items():
        if value is not None and value < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    config = Config(
        **{
            **asdict(base),
            **{k: v for k, v in overrides.items() if v is not None},
            "actors": args.actors,
        }
    )
    return config, bool(args.json)


def run(config: Config) -> Results:
    """Measure (starts and stops its own nats-server and actors)."""
    return anyio.run(measure, config, backend="asyncio")


def main(argv: Sequence[str] | None = None) -> Results:
    config, as_json = parse(argv)
    results = run(config)
    if as_json:
        encoded = {**asdict(results), "ratio": results.ratio}
        print(msgspec.json.encode(encoded).decode())
    else:
        report(results)
    return results


if __name__ == "__main__":
    main()

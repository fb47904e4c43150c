"""Storage benchmark: how many bytes the actors' LMDB stores hold for the bytes of the
op log that caused them, and where those bytes go.

The outside attack reported "108 MiB of log became 690 MiB of stores" (6.4x). This
bench repeats a load of that shape and takes the stores apart:

1. ``worldline up --nats`` (all five actors in one process, as the attack ran them)
   against an embedded nats-server;
2. ``--beliefs`` ``AddBelief`` ops with sentence-like text, each followed by
   ``--evidence`` ``AddEvidence`` ops with a sentence of their own (the op mix of
   ``bench/pipeline.py``'s stream), published pipelined on ``wl.<world>.ops.<agent>``,
   and ``--observations`` artifacts of a few sentences through the extractor, drawn
   from a small pool so that texts are restated (a restatement is evidence for the
   belief the extractor already made of it);
3. once every durable holds nothing pending or unacked, the actors are stopped (so
   each store is closed) and measured: every stream's bytes; per store the file, the
   pages LMDB uses (``last_pgno``), its databases' pages (branch, leaf, overflow) and
   the free pages between; per store and key prefix (the key up to its first ``/``)
   the count, key and value bytes, the values that spill onto overflow pages and the
   page bytes those take. The ratio is the stores' bytes over ``WL_OPS``'s bytes.

Run: ``python bench/storage.py [--beliefs N] [--evidence N] [--observations N]
[--quick] [--json]``. Results: ``docs/benchmarks.md`` ("Storage: log bytes vs store
bytes").
"""

from __future__ import annotations

import argparse
import hashlib
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import lmdb
import msgspec
from nats.js import api

from worldline.actors.runtime.bus import connect
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.actors.runtime.publish import unbatched
from worldline.protocols.beliefs import Evidence
from worldline.protocols.messages import (
    MATERIALIZER_INBOX,
    AddBelief,
    AddEvidence,
    Observe,
    PosteriorUpdate,
    encode,
)
from worldline.protocols.subjects import (
    DERIVED,
    EXTRACTOR_IN,
    FUSION_IN,
    MATERIALIZER_IN,
    MATERIALIZER_OPS_IN,
    SIMULATOR_IN,
    STREAMS,
    ConsumerSpec,
    obs,
    ops,
    projector_in,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from nats.js import JetStreamContext

__all__ = [
    "Config",
    "PrefixUse",
    "Results",
    "StoreUse",
    "main",
    "measure_store",
    "run",
]

AGENT = "loader"
OBSERVER = "scout"
WORLD = "storage"
BASE = datetime(2026, 1, 1, tzinfo=UTC)
DURABLES: tuple[ConsumerSpec, ...] = (
    EXTRACTOR_IN,
    FUSION_IN,
    MATERIALIZER_OPS_IN,
    MATERIALIZER_IN,
    SIMULATOR_IN,
    projector_in("0"),
)
# LMDB's node header (lo, hi, flags, ksize) and an overflow page's header, bytes.
_NODE = 8
_PAGE_HEADER = 16
COMMON = [  # a belief text mixes them with a long tail of rarer words
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
    """How much to load."""

    beliefs: int = 20_000
    evidence: int = 3  # AddEvidence ops per belief
    observations: int = 2_000  # artifacts through the extractor
    sentences_per_observation: int = 3
    pool: int = 400  # distinct observation sentences (the rest are restatements)
    window: int = 1000  # publish_async window
    seed: int = 7
    drain_timeout: float = 1200.0  # seconds the load may take to apply


@dataclass
class PrefixUse:
    """One key prefix of one database of a store."""

    count: int = 0
    key_bytes: int = 0
    value_bytes: int = 0
    overflow_values: int = 0  # values on overflow pages (too big for a leaf node)
    overflow_bytes: int = 0  # the overflow pages they take
    max_value: int = 0


@dataclass
class StoreUse:
    """One actor's store on disk."""

    file_bytes: int  # data.mdb's size
    disk_bytes: int  # blocks the file system allocated to it
    used_bytes: int  # (last_pgno + 1) * page size: what LMDB has touched
    page_size: int
    pages: dict[str, dict[str, int]]  # per database: branch, leaf, overflow, entries
    free_pages: int  # pages below last_pgno no database holds (free list, metas)
    prefixes: dict[str, dict[str, PrefixUse]]  # database -> prefix -> use


@dataclass
class Results:
    """Bytes, by stream and by store."""

    beliefs: int
    evidence: int
    observations: int
    ops: int  # messages on WL_OPS
    streams: dict[str, dict[str, int]]  # name -> messages, bytes
    stores: dict[str, StoreUse] = field(default_factory=dict)
    seconds: float = 0.0
    # WL_DERIVED's posteriors: their encoded bytes, the bytes of the evidence they
    # carry that an earlier posterior of the belief already carried, and what they
    # would take carrying only their own op's evidence (what they carry since
    # posteriors became deltas, issue 18: then it is all of their bytes).
    posterior_bytes: int = 0
    posterior_repeated_bytes: int = 0
    posterior_delta_bytes: int = 0

    @property
    def log_bytes(self) -> int:
        return self.streams["WL_OPS"]["bytes"]

    @property
    def store_bytes(self) -> int:
        return sum(s.used_bytes for s in self.stores.values())

    @property
    def ratio(self) -> float:
        """The stores' used bytes over the op log's bytes."""
        return self.store_bytes / self.log_bytes


# --- the load -----------------------------------------------------------------------


def sentences(rng: random.Random, n: int) -> Iterator[str]:
    """``n`` sentence-like texts: common words and a long tail of made-up ones,
    8 to 20 words each, now and then a ticket number."""
    syllables = [a + b for a in "bcdfghklmnprstvz" for b in "aeiou"]
    tail = sorted(
        {"".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(5_000)}
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
                words.append(f"ticket-{rng.randint(1, 999)}")
        yield f"{' '.join(words).capitalize()} (note {i})."


def belief_ops(config: Config) -> Iterator[AddBelief | AddEvidence]:
    """Per belief an ``AddBelief``, then ``config.evidence`` ``AddEvidence``."""
    rng = random.Random(config.seed)
    per = 1 + config.evidence
    texts = sentences(rng, config.beliefs * per)
    for b in range(config.beliefs):
        # ids as the SDK makes them (random-looking, not in key order)
        belief = "b-" + hashlib.sha256(f"{config.seed}:{b}".encode()).hexdigest()[:16]
        i = b * per
        yield AddBelief(
            op_id=f"op-{i:09d}",
            author=AGENT,
            at=BASE + timedelta(milliseconds=i),
            belief_id=belief,
            text=next(texts),
            confidence=0.6,
        )
        for k in range(1, per):
            at = BASE + timedelta(milliseconds=i + k)
            yield AddEvidence(
                op_id=f"op-{i + k:09d}",
                author=AGENT,
                at=at,
                evidence=Evidence(
                    id=f"ev-{i + k:09d}",
                    belief_id=belief,
                    direction=("supports", "refutes", "neutral")[(i + k) % 3],
                    kind="measurement",
                    source=f"sensor-{(i + k) % 7}",
                    observed_at=at,
                    text=next(texts),
                    author=AGENT,
                ),
            )


def observations(config: Config) -> Iterator[Observe]:
    """Artifacts of a few sentences drawn from a small pool: most sentences are
    restatements of one an earlier artifact made a belief of."""
    rng = random.Random(config.seed + 1)
    pool = list(sentences(rng, config.pool))
    for n in range(config.observations):
        text = " ".join(rng.choices(pool, k=config.sentences_per_observation))
        digest = hashlib.sha256(f"{n}\0{text}".encode()).hexdigest()[:24]
        yield Observe(
            obs_id=f"obs-{digest}",
            author=OBSERVER,
            at=BASE + timedelta(seconds=n),
            source=f"notes/{n % 50}.md",
            text=text,
        )


# --- the run ------------------------------------------------------------------------


def start_up(url: str, data: Path) -> subprocess.Popen[str]:
    """``worldline up --nats URL``: all five actors in one process; returns once
    it is ready."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "worldline.cli", "up", "--nats", url,
         "--data", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if "ready" in line:
            return proc
    stop(proc)
    raise RuntimeError("worldline up stopped before it was ready")


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    if proc.stdout:
        proc.stdout.close()


async def publish(js: JetStreamContext, items: Iterator[Any], window: int) -> int:
    """Publish ``(subject, msg_id, message)`` pipelined in windows; return how many."""
    sent = 0
    while True:
        chunk = [item for _, item in zip(range(window), items, strict=False)]
        if not chunk:
            return sent
        futures = [
            await js.publish_async(
                subject, encode(message), headers={api.Header.MSG_ID: msg_id}
            )
            for subject, msg_id, message in chunk
        ]
        for future in futures:
            await future
        sent += len(chunk)


async def drained(js: JetStreamContext) -> bool:
    for spec in DURABLES:
        info = await js.consumer_info(spec.stream.name, spec.durable)
        if info.num_pending or info.num_ack_pending:
            return False
    return True


async def posteriors(js: JetStreamContext) -> tuple[int, int, int]:
    """Read WL_DERIVED back: every posterior's bytes, the bytes of evidence in it
    that an earlier posterior of the same belief carried already (recorded before
    the op that caused it), and its bytes if it carried only its own evidence."""
    sub = await js.pull_subscribe(
        DERIVED.subjects[0], durable="bench-storage", stream=DERIVED.name
    )
    total = repeated = delta = 0
    try:
        while True:
            try:
                msgs = await sub.fetch(256, timeout=2)
            except TimeoutError:
                return total, repeated, delta
            for msg in msgs:
                for _, payload in unbatched(msg):
                    update = MATERIALIZER_INBOX.decode(payload)
                    if not isinstance(update, PosteriorUpdate):
                        continue
                    total += len(payload)
                    if update.delta:  # only what its op added (issue 18): no repeats
                        delta += len(payload)
                        continue
                    new = [
                        e for e in update.evidence if e.recorded_seq == update.cause_seq
                    ]
                    old = [e for e in update.evidence if e not in new]
                    repeated += sum(len(encode(e)) for e in old)
                    only = msgspec.structs.replace(update, evidence=new)
                    delta += len(encode(only))
                await msg.ack()
    finally:
        await sub.unsubscribe()
        await js.delete_consumer(DERIVED.name, "bench-storage")


async def load(
    url: str, config: Config
) -> tuple[dict[str, dict[str, int]], tuple[int, int, int]]:
    """Publish the load, wait until every durable is drained, return each stream's
    messages and bytes."""
    nc = await connect(url, name="bench-storage")
    try:
        js = nc.jetstream()
        await publish(
            js,
            ((ops(WORLD, AGENT), op.op_id, op) for op in belief_ops(config)),
            config.window,
        )
        await publish(
            js,
            ((obs(WORLD, OBSERVER), o.obs_id, o) for o in observations(config)),
            config.window,
        )
        with anyio.fail_after(config.drain_timeout):
            # Polling is the measurement: JetStream pushes no "drained" event.
            while not await drained(js):  # noqa: ASYNC110
                await anyio.sleep(0.2)
        streams = {}
        for spec in STREAMS:
            info = await js.stream_info(spec.name)
            streams[spec.name] = {
                "messages": int(info.state.messages),
                "bytes": int(info.state.bytes),
            }
        return streams, await posteriors(js)
    finally:
        await nc.close()


def _prefix(key: bytes) -> str:
    head, slash, _ = key.partition(b"/")
    if not slash:
        # outbox keys are 8-byte counters; meta's keys without a slash read as text
        return "<entry>" if len(key) == 8 and not key.isascii() else key.decode()
    return head.decode(errors="replace")


def measure_store(path: Path) -> StoreUse:
    """Take one closed LMDB store apart (opened read-only, without its lock file)."""
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=4)
    try:
        info, stat = env.info(), env.stat()
        psize = int(stat["psize"])
        nodemax = ((psize - _PAGE_HEADER) // 2) & ~1  # LMDB: 2 keys at least a page
        pages: dict[str, dict[str, int]] = {
            "main": {k: int(stat[k]) for k in ("branch_pages", "leaf_pages",
                                                "overflow_pages", "entries")}
        }  # fmt: skip
        prefixes: dict[str, dict[str, PrefixUse]] = {}
        with env.begin() as txn:
            for name in ("state", "meta", "outbox"):
                try:
                    db = env.open_db(name.encode(), txn=txn, create=False)
                except lmdb.NotFoundError:
                    continue
                s = txn.stat(db)
                pages[name] = {
                    k: int(s[k])
                    for k in ("branch_pages", "leaf_pages", "overflow_pages", "entries")
                }
                uses: dict[str, PrefixUse] = {}
                for key, value in txn.cursor(db=db):
                    use = uses.setdefault(_prefix(bytes(key)), PrefixUse())
                    use.count += 1
                    use.key_bytes += len(key)
                    use.value_bytes += len(value)
                    use.max_value = max(use.max_value, len(value))
                    if _NODE + len(key) + len(value) > nodemax:
                        use.overflow_values += 1
                        n = -(-(_PAGE_HEADER + len(value)) // psize)
                        use.overflow_bytes += n * psize
                prefixes[name] = dict(
                    sorted(uses.items(), key=lambda kv: -kv[1].value_bytes)
                )
        used_pages = int(info["last_pgno"]) + 1
        held = sum(
            p["branch_pages"] + p["leaf_pages"] + p["overflow_pages"]
            for p in pages.values()
        )
        data = path / "data.mdb"
        st = data.stat()
        return StoreUse(
            file_bytes=st.st_size,
            disk_bytes=st.st_blocks * 512,
            used_bytes=used_pages * psize,
            page_size=psize,
            pages=pages,
            free_pages=used_pages - held - 2,  # two meta pages
            prefixes=prefixes,
        )
    finally:
        env.close()


async def measure(config: Config) -> Results:
    with (
        tempfile.TemporaryDirectory(prefix="wl-storage-") as tmp_name,
        EmbeddedNats(Path(tmp_name) / "nats") as server,
    ):
        data = Path(tmp_name) / "data"
        start = time.perf_counter()
        proc = await anyio.to_thread.run_sync(start_up, server.url, data)
        try:
            streams, (sent, repeated, delta) = await load(server.url, config)
        finally:
            await anyio.to_thread.run_sync(stop, proc)
        seconds = time.perf_counter() - start
        stores = {
            folder.name: measure_store(folder)
            for folder in sorted((data / "actors").iterdir())
            if (folder / "data.mdb").exists()
        }
    return Results(
        beliefs=config.beliefs,
        evidence=config.evidence,
        observations=config.observations,
        ops=streams["WL_OPS"]["messages"],
        streams=streams,
        stores=stores,
        seconds=seconds,
        posterior_bytes=sent,
        posterior_repeated_bytes=repeated,
        posterior_delta_bytes=delta,
    )


# --- the report ---------------------------------------------------------------------


def _mib(n: float) -> str:
    return f"{n / (1 << 20):9.2f} MiB"


def report(r: Results, *, top: int = 6) -> None:
    print(
        f"storage: {r.beliefs:,} beliefs x {r.evidence} evidence + "
        f"{r.observations:,} observations -> {r.ops:,} ops ({r.seconds:.0f}s)"
    )
    print("streams:")
    for name, stream in r.streams.items():
        print(f"  {name:<12}{stream['messages']:>10,} msgs {_mib(stream['bytes'])}")
    print("stores (used = (last_pgno+1) * page; free = pages below it no db holds):")
    print(f"  {'store':<14}{'file':>14}{'used':>14}{'free':>14}{'overflow':>14}")
    for name, store in r.stores.items():
        pages = sum(p["overflow_pages"] for p in store.pages.values())
        print(
            f"  {name:<14}{_mib(store.file_bytes)}{_mib(store.used_bytes)}"
            f"{_mib(store.free_pages * store.page_size)}"
            f"{_mib(pages * store.page_size)}"
        )
    print(f"  {'all':<14}{'':>14}{_mib(r.store_bytes)}")
    print(
        f"amplification: stores {r.store_bytes / (1 << 20):.2f} MiB / WL_OPS "
        f"{r.log_bytes / (1 << 20):.2f} MiB = {r.ratio:.2f}x"
    )
    print(
        f"posteriors (WL_DERIVED): {_mib(r.posterior_bytes).strip()}, of which "
        f"evidence sent before {_mib(r.posterior_repeated_bytes).strip()}; carrying "
        f"only their own evidence: {_mib(r.posterior_delta_bytes).strip()}"
    )
    print("by key prefix (db/prefix: count, key + value bytes, mean value, values on")
    print("overflow pages and the page bytes they take):")
    for name, store in r.stores.items():
        rows = [
            (db, prefix, use)
            for db, uses in store.prefixes.items()
            for prefix, use in uses.items()
        ]
        rows.sort(key=lambda row: -(row[2].key_bytes + row[2].value_bytes))
        print(f"  {name}:")
        for db, prefix, use in rows[:top]:
            mean = use.value_bytes / use.count if use.count else 0
            print(
                f"    {db + '/' + prefix:<22}{use.count:>9,}"
                f"{_mib(use.key_bytes + use.value_bytes)}  mean {mean:7.0f} B"
                f"  overflow {use.overflow_values:>7,} ({_mib(use.overflow_bytes)})"
            )


def parse(argv: Sequence[str] | None) -> tuple[Config, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beliefs", type=int, default=None)
    parser.add_argument("--evidence", type=int, default=None, help="per belief")
    parser.add_argument("--observations", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--quick", action="store_true", help="a small run")
    args = parser.parse_args(argv)
    base = (
        Config(beliefs=300, observations=40, pool=30, window=200)
        if args.quick
        else Config()
    )
    overrides = {
        "beliefs": args.beliefs,
        "evidence": args.evidence,
        "observations": args.observations,
    }
    for key, value in overrides.items():
        if value is not None and value < (0 if key != "beliefs" else 1):
            parser.error(f"--{key} must be at least {0 if key != 'beliefs' else 1}")
    config = Config(
        **{**asdict(base), **{k: v for k, v in overrides.items() if v is not None}}
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

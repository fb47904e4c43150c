"""The issue-23 attack, re-run as one command against a secured deploy built from
scratch: ``worldline creds`` for examples/crew.toml (and a second world), the bundled
nats-server with the generated ``auth.conf`` on a free loopback port, every actor its
own ``worldline actor`` process with its own credentials (started before the server:
their first connect must be retried), a simulator over a tiny transition index, the
world declared by the operator. Then spock (and, for collusion, geordi) attack with
their own credentials through the CLI, the SDK and raw nats-py while scotty and ada
keep writing at a steady rate.

Run: ``python bench/attack.py`` (about 2 min), ``--quick`` for the test (fewer
rounds), ``--strict`` to fail on a hole the further attacks found as well. Prints
the figures and a verdict line; exits 1 if any scenario of the issue stalled,
poisoned or lost anything. The further attacks (F1-F16) are reported as held or
HOLE; they decide the exit code only with ``--strict``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import msgspec
from nats.js import api

import worldline
from worldline.actors.belief_model import rivals
from worldline.actors.belief_model.text import answer_id, belief_id
from worldline.actors.extractor.core import handle as extract
from worldline.actors.runtime.auth import AGENT_JS_API, load_credentials
from worldline.actors.runtime.bus import connect as bus_connect
from worldline.actors.runtime.embedded import EmbeddedNats
from worldline.actors.runtime.memory import MemoryState
from worldline.actors.runtime.spec import Context
from worldline.actors.simulator import index as transition_index
from worldline.actors.simulator.sessions import DEFAULT_EXPIRY, DEFAULT_PER_CLIENT
from worldline.protocols.messages import (
    LEASE_VALUE,
    MATERIALIZER_REPLY,
    SIMULATOR_REPLY,
    Observe,
    OpStatus,
    SimError,
    SimStart,
    SimStarted,
    Transition,
    encode,
)
from worldline.protocols.ops import AddBelief
from worldline.protocols.subjects import (
    DLQ,
    INBOX,
    LEASES,
    OPS,
    PRESENCE,
    STREAMS,
    VIEWS,
    bucket_key,
    bucket_put,
    bucket_stream,
    derived,
    inbox,
    inbox_in,
    lease_key,
    obs,
    ops,
    rpc,
    state,
)
from worldline.protocols.world import OPERATOR
from worldline.sdk.batch import AddItem, EvidenceItem
from worldline.sdk.beliefs import observation_id
from worldline.sdk.crew import utc_now
from worldline.sdk.declaration import load_declaration
from worldline.sdk.errors import WorldlineError

if TYPE_CHECKING:
    from nats.aio.client import Client as NATS

    from worldline import World

ROOT = Path(__file__).resolve().parent.parent
CREW = ROOT / "examples" / "crew.toml"
WORLD = "enterprise"
OTHER = "voyager"  # a second world, its own agents
PILOT = "project:soteria-pilot-conversion"
WORLDLINE = str(Path(sys.executable).parent / "worldline")
ACTORS = ("extractor", "fusion", "materializer", "projector", "simulator")
LEASE_KEY = lease_key("materializer", 0, 1)
PUBACK = b'"stream":'
ASK = "Where would you like to fly?"
SLOTS = 12

OTHER_TOML = f"""
[world]
id = "{OTHER}"
kind = "second world"

[authority]
admins = ["janeway"]

[[entities]]
id = "agent:janeway"
fields = {{ role = "captain" }}

[[entities]]
id = "agent:zora"
fields = {{ role = "writer" }}
"""


@dataclass
class Deploy:
    tmp: Path
    url: str
    out: Path

    def creds(self, who: str) -> Path:
        if who == OPERATOR:
            return self.out / f"{OPERATOR}.creds"
        if who in ACTORS:
            return self.out / "actors" / f"{who}.creds"
        return self.out / "agents" / f"{who}.creds"


@dataclass
class Honest:
    """The honest crew's writes while the attack runs."""

    attempted: int = 0
    applied: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Violations(logging.Handler):
    """Counts the server's permission violations the attackers' connections hear
    (each is a refusal by the server; printed as one figure, not line by line)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "permissions violation" in record.getMessage():
            self.count += 1
        else:
            print(f"    bus: {record.getMessage()[:200]}", flush=True)


VIOLATIONS = Violations()


@dataclass
class Figures:
    lines: list[tuple[str, str, bool]] = field(default_factory=list)  # what, fig, ok
    further: list[tuple[str, str, bool]] = field(default_factory=list)

    def add(self, what: str, figure: object, ok: bool) -> None:
        self.lines.append((what, str(figure), ok))
        print(f"  {'ok ' if ok else 'BAD'} {what}: {figure}", flush=True)

    def more(self, what: str, figure: object, hole: bool) -> None:
        self.further.append((what, str(figure), hole))
        print(f"  {'HOLE' if hole else 'held'} {what}: {figure}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}


def make_index(out: Path) -> Path:
    """A tiny transition index (four real-looking transitions)."""

    def tr(n: int, lineage: str, ctx: str, action: str, obs: str) -> Transition:
        return Transition(
            id=f"tr-{lineage}-{n}",
            lineage=lineage,
            task="book a flight",
            context=ctx,
            action=action,
            observation=obs,
            final=obs.startswith("Thanks"),
            pairing="id" if action.startswith("search_flights(") else "turn",
        )

    after = f"assistant: {ASK}\nuser: To Lisbon, please."
    built = transition_index.build(
        [
            tr(1, "lin-a", "", ASK, "To Lisbon, please."),
            tr(2, "lin-a", after, "Booked, anything else?", "Thanks, that's all."),
            tr(1, "lin-b", "", ASK, "Madrid."),
            tr(2, "lin-b", "", 'search_flights({"to": "MAD"})', '["IB3170"]'),
        ],
        held_out=0.0,
    )
    transition_index.save(built, out)
    return out


def cli(
    d: Deploy, who: str, *argv: str, timeout: float = 60, world: str = WORLD
) -> tuple[int, str, str]:
    """A worldline verb as ``who`` with ``who``'s credentials."""
    agent = who if who != "spock-as-zora" else "zora"
    creds = d.creds("spock" if who == "spock-as-zora" else who)
    command = [
        WORLDLINE,
        *argv,
        "--nats",
        d.url,
        "--world",
        world,
        "--agent",
        agent,
        "--creds",
        str(creds),
        "--timeout",
        "8",
    ]
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return -1, "", "timed out"
    return result.returncode, result.stdout, result.stderr


async def acli(
    d: Deploy, who: str, *argv: str, world: str = WORLD
) -> tuple[int, str, str, float]:
    started = time.monotonic()
    code, out, err = await anyio.to_thread.run_sync(
        lambda: cli(d, who, *argv, world=world)
    )
    return code, out, err, time.monotonic() - started


# --- the honest crew ---


async def honest_writer(
    w: World, honest: Honest, stop: anyio.Event, period: float, kind: str
) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        honest.attempted += 1
        started = time.monotonic()
        try:
            with anyio.fail_after(30):
                if kind == "write":
                    await w.write(PILOT, "status", f"active-{n}")
                else:
                    await w.add(f"Honest note {n} from {w.agent}: pilots on track.")
            honest.applied += 1
        except Exception as exc:
            honest.errors.append(f"{kind} {n}: {type(exc).__name__}: {exc}")
        honest.latencies.append(time.monotonic() - started)
        with anyio.move_on_after(period):
            await stop.wait()


# --- readings ---


async def landed(nc: NATS) -> dict[str, int]:
    """Per stream and bucket of the actors' account: messages holding a PubAck."""
    js = nc.jetstream(timeout=5)
    names = [s.name for s in STREAMS] + [
        bucket_stream(b) for b in (LEASES, PRESENCE, VIEWS)
    ]
    found: dict[str, int] = {}
    for name in names:
        info = await js.stream_info(name)
        found[name] = 0
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                msg = await js.get_msg(name, seq)
            except Exception:
                continue
            if msg.data is not None and PUBACK in msg.data:
                found[name] += 1
    return found


async def lease_holder(nc: NATS) -> str:
    kv = await nc.jetstream(timeout=5).key_value(LEASES.bucket)
    entry = await kv.get(LEASE_KEY)
    assert entry.value is not None
    return LEASE_VALUE.decode(entry.value).holder


async def rank(
    w: World, slot: str, honest_text: str, texts: list[str]
) -> tuple[int, float, float]:
    """The honest answer's rank among ``texts`` in ``slot`` (1: it leads; a tie
    counts against it), its confidence and the best rival's."""
    conf: dict[str, float] = {}
    for text in texts:
        got = await w.get(answer_id(WORLD, slot, text))
        conf[text] = -1.0 if got is None else (got.confidence or 0.0)
    mine = conf[honest_text]
    best = max((c for t, c in conf.items() if t != honest_text), default=-1.0)
    place = 1 + sum(1 for t, c in conf.items() if t != honest_text and c >= mine)
    return place, mine, best


# --- scenarios ---


def hostile_replies(d: Deploy) -> list[str]:
    zora = load_credentials(d.creds("zora"))
    assert zora is not None
    return [
        bucket_put(LEASES, LEASE_KEY),
        inbox(WORLD, "zora"),
        ops(WORLD, "zora"),
        ops(WORLD, "ada"),
        ops(OTHER, "janeway"),
        state(WORLD, "field"),
        derived(WORLD, "posterior", "0"),
        bucket_put(PRESENCE, bucket_key(WORLD, "zora")),
        bucket_put(VIEWS, bucket_key(WORLD, "zora")),
        f"_INBOX.{zora.public_key}.stolen",
        f"$JS.API.STREAM.PURGE.{OPS.name}",
        f"$JS.API.STREAM.DELETE.{INBOX.name}",
    ]


def spock_op(text: str) -> bytes:
    return encode(
        AddBelief(
            op_id=f"op-{secrets.token_hex(8)}",
            author="spock",
            at=utc_now(),
            belief_id=answer_id(WORLD, None, text),
            text=text,
        )
    )


async def s1_replies(d: Deploy, f: Figures, rounds: int) -> None:
    print("1. hostile reply subjects on spock's own ops", flush=True)
    async with AsyncExitStack() as stack:
        operator = await stack.enter_async_context(raw(d, OPERATOR))
        before = await landed(operator)
        spock = await stack.enter_async_context(raw(d, "spock"))
        targets = hostile_replies(d)
        sent = 0
        for r in range(rounds):
            for n, target in enumerate(targets):
                body = spock_op(f"Spock's note {r}-{n}") if n % 2 else b"junk"
                await spock.publish(ops(WORLD, "spock"), body, reply=target)
                sent += 1
        await spock.flush()
        await anyio.sleep(1.5)
        after = await landed(operator)
        grew = {k: after[k] - before[k] for k in after if after[k] != before[k]}
        f.add(
            f"PubAcks landed in actors' streams/buckets ({sent} hostile publishes)",
            grew or 0,
            not grew,
        )
        try:
            holder = await lease_holder(operator)
        except Exception as exc:
            holder = f"unreadable ({type(exc).__name__})"
        f.add("materializer lease readable, holder", holder, holder == "materializer")
        info = await operator.jetstream(timeout=5).stream_info(
            OPS.name, subjects_filter=ops("*", "*")
        )
        subjects = info.state.subjects or {}
        forged = {
            s: subjects.get(s, 0)
            for s in (ops(WORLD, "zora"), ops(OTHER, "janeway"))
            if subjects.get(s, 0)
        }
        f.add("ops recorded as zora/janeway", forged or 0, not forged)
    code, _, err, took = await acli(d, "zora", "inbox", "--json")
    f.add("zora's `inbox` readable (exit, s)", f"{code}, {took:.1f}", code == 0)
    if code:
        print("    ", err.strip()[:300])


async def s2_collusion(d: Deploy, f: Figures) -> None:
    print("2. invented sources and collusion", flush=True)
    async with AsyncExitStack() as stack:
        w = {
            a: await stack.enter_async_context(
                worldline.connect(
                    d.url, world=WORLD, agent=a, creds=d.creds(a), request_timeout=30
                )
            )
            for a in ("ada", "scotty", "book", "spock", "geordi")
        }
        operator = await stack.enter_async_context(
            worldline.connect(
                d.url,
                world=WORLD,
                agent=OPERATOR,
                creds=d.creds(OPERATOR),
                request_timeout=30,
            )
        )

        def cite(slot: str, text: str, source: str) -> EvidenceItem:
            return EvidenceItem(
                belief_id=answer_id(WORLD, slot, text),
                direction="supports",
                kind="citation",
                source=source,
            )

        # A: 20 sources spock invents vs ada's declared sec-filing (+ scotty's crm).
        # B: 5 sources of two colluders (spock 3, geordi 2) vs 3 honest voices.
        for tag in ("a", "b"):
            slots = [f"q{tag}{q}" for q in range(SLOTS)]
            adds = [
                AddItem(text=f"{who}{q}", slot=s)
                for q, s in enumerate(slots)
                for who in ("Tolkien", "Lewis")
            ]
            loaded = await operator.load(adds)
            assert {r.outcome for r in loaded} == {"applied"}, loaded
            if tag == "a":
                honest = [
                    cite(s, f"Tolkien{q}", "sec-filing") for q, s in enumerate(slots)
                ]
                await w["ada"].load(honest)
                crm = [
                    cite(s, f"Tolkien{q}", "crm") for q, s in enumerate(slots) if q % 4
                ]
                await w["scotty"].load(crm)
                wires = [
                    cite(s, f"Lewis{q}", f"wire-{i}")
                    for q, s in enumerate(slots)
                    for i in range(20)
                ]
                await w["spock"].load(wires)
            else:
                for agent, source in (
                    ("ada", "sec-filing"),
                    ("scotty", "crm"),
                    ("book", "archive:ledger"),
                ):
                    items = [
                        cite(s, f"Tolkien{q}", source) for q, s in enumerate(slots)
                    ]
                    await w[agent].load(items)
                for agent, names in (
                    ("spock", ("wire-x", "wire-y", "wire-z")),
                    ("geordi", ("crm-mirror", "sec-filing-copy")),
                ):
                    items = [
                        cite(s, f"Lewis{q}", n)
                        for q, s in enumerate(slots)
                        for n in names
                    ]
                    await w[agent].load(items)
            before = [
                await rank(w["ada"], s, f"Tolkien{q}", [f"Tolkien{q}", f"Lewis{q}"])
                for q, s in enumerate(slots)
            ]
            await w["spock"].assess_sources()  # any agent may ask for it
            await anyio.sleep(1.0)
            after = [
                await rank(w["ada"], s, f"Tolkien{q}", [f"Tolkien{q}", f"Lewis{q}"])
                for q, s in enumerate(slots)
            ]
            if tag == "a":
                # Two honest voices (sec-filing, crm) in 9 slots; one (sec-filing)
                # against spock's one voice of twenty names in q0, q4, q8.
                groups = {
                    "20 invented sources (spock) vs sec-filing+crm, 9 slots": [
                        q for q in range(SLOTS) if q % 4
                    ],
                    "20 invented sources (spock) vs sec-filing alone, 3 slots": [
                        q for q in range(SLOTS) if not q % 4
                    ],
                }
            else:
                groups = {
                    "5 colluding sources (spock 3, geordi 2) vs 3 honest, 12 slots": (
                        list(range(SLOTS))
                    )
                }
            for label, qs in groups.items():
                won = (
                    sum(before[q][0] == 1 for q in qs),
                    sum(after[q][0] == 1 for q in qs),
                )
                conf = ", ".join(
                    f"{before[q][1]:.2f}:{before[q][2]:.2f}->"
                    f"{after[q][1]:.2f}:{after[q][2]:.2f}"
                    for q in qs[:3]
                )
                f.add(
                    f"{label}: honest answer first before -> after assess_sources",
                    f"{won[0]}/{len(qs)} -> {won[1]}/{len(qs)} "
                    f"(honest:wrong {conf}{'...' if len(qs) > 3 else ''})",
                    won[1] == len(qs) and (won[0] == len(qs) or "alone" in label),
                )


async def s3_trust(d: Deploy, f: Figures) -> None:
    print("3. trust set by an agent without authority", flush=True)
    async with worldline.connect(
        d.url, world=WORLD, agent="scotty", creds=d.creds("scotty")
    ) as scotty:
        belief = await scotty.add("The coolant loop holds pressure at 40 bar.")
        await scotty.evidence(
            belief.id, direction="supports", kind="measurement", source="agent:scotty"
        )
        held = await scotty.get(belief.id)
        assert held is not None
        refused = 0
        for source, value in (("agent:scotty", "0"), ("agent:spock", "5")):
            code, _, err, _ = await acli(d, "spock", "trust", source, value)
            refused += code != 0 and "unauthorized" in err
        await anyio.sleep(1.0)
        now = await scotty.get(belief.id)
        assert now is not None
        f.add("trust changes by spock refused (of 2)", refused, refused == 2)
        moved = abs((now.confidence or 0.0) - (held.confidence or 0.0))
        f.add(
            "scotty's measurement-backed belief",
            f"{held.confidence:.4f} -> {now.confidence:.4f}",
            moved < 0.01,
        )


async def s4_slot(d: Deploy, f: Figures) -> None:
    print("4. junk answers to fill a slot", flush=True)
    slot = "who leads the soteria pilot"
    async with AsyncExitStack() as stack:
        w = {
            a: await stack.enter_async_context(
                worldline.connect(
                    d.url, world=WORLD, agent=a, creds=d.creds(a), request_timeout=30
                )
            )
            for a in ("spock", "geordi", "scotty")
        }
        applied: dict[str, list[str]] = {}
        for agent in ("spock", "geordi"):
            junk = [
                AddItem(text=f"Junk answer {agent} {n}", slot=slot)
                for n in range(rivals.MAX_RIVALS)
            ]
            loaded = await w[agent].load(junk)
            applied[agent] = [r.belief_id for r in loaded if r.outcome == "applied"]
        held = sum(len(v) for v in applied.values())
        f.add(
            "junk answers applied of 2x64 (spock, geordi)",
            f"{len(applied['spock'])} + {len(applied['geordi'])}",
            held <= 2 * rivals.MAX_AUTHOR_ANSWERS,
        )
        f.add(
            "slot places left for the honest answer",
            rivals.MAX_RIVALS - held,
            rivals.MAX_RIVALS - held > 0,
        )
        truth = await w["scotty"].add("Scotty leads it.", slot=slot)
        f.add("honest answer added to the slot", truth.slot == slot, truth.slot == slot)
        await w["spock"].retract(applied["spock"][0], "freeing a place")
        again = await w["spock"].load([AddItem(text="Junk answer spock 99", slot=slot)])
        f.add(
            "retraction frees spock's place (re-add outcome)",
            again[0].outcome,
            again[0].outcome == "applied",
        )


async def s5_sim(d: Deploy, f: Figures, randoms: int) -> None:
    print("5. simulator sessions under forged reply inboxes", flush=True)
    zora_key = load_credentials(d.creds("zora"))
    assert zora_key is not None
    subject = rpc(WORLD, "sim.start")
    async with raw(d, "spock") as spock, raw(d, "zora") as zora:
        for n in range(20):
            await spock.publish(
                subject,
                encode(SimStart(task="book a flight", agent="zora")),
                reply=f"_INBOX.{zora_key.public_key}.x{n}",
            )
        for n in range(randoms):
            await spock.publish(
                subject,
                encode(SimStart(task="book a flight", agent=f"x{n}")),
                reply=f"_INBOX.{secrets.token_hex(8)}.x",
            )
        await spock.flush()
        await anyio.sleep(2.0)
        opened = 0
        names: list[str] = []
        for _ in range(DEFAULT_PER_CLIENT):
            msg = await zora.request(subject, encode(SimStart(task="t")), timeout=10)
            reply = SIMULATOR_REPLY.decode(msg.data)
            if isinstance(reply, SimStarted):
                opened += 1
            elif isinstance(reply, SimError):
                names.append(reply.name)
        f.add(
            f"simulator sessions zora can still open (of {DEFAULT_PER_CLIENT}), "
            f"after spock's 20 + {randoms} forged",
            f"{opened}{' ' + ','.join(sorted(set(names))) if names else ''}",
            opened == DEFAULT_PER_CLIENT,
        )
        msg = await spock.request(subject, encode(SimStart(task="t")), timeout=10)
        own = SIMULATOR_REPLY.decode(msg.data)
        quota = isinstance(own, SimError) and own.name == "session_quota"
        f.add(
            "spock's own start after its forgeries",
            getattr(own, "name", "started"),
            quota,
        )
        f.add("idle session expiry (s)", DEFAULT_EXPIRY, DEFAULT_EXPIRY <= 600)


async def s6_batch_header(d: Deploy, f: Figures) -> list[str]:
    print("6. ops under a Wl-Batch header", flush=True)
    ids = []
    async with raw(d, "spock") as spock:
        js = spock.jetstream(prefix=AGENT_JS_API, timeout=5)
        for n, header in enumerate(("Wl-Batch", "wl-batch", "WL-BATCH")):
            text = f"Batch-headed belief {n} {secrets.token_hex(4)}"
            ids.append(answer_id(WORLD, None, text))
            await js.publish(ops(WORLD, "spock"), spock_op(text), headers={header: "2"})
    return ids


async def s6_check(d: Deploy, f: Figures, ids: list[str]) -> None:
    async with worldline.connect(
        d.url, world=WORLD, agent="ada", creds=d.creds("ada")
    ) as ada:
        live = [await ada.get(i) for i in ids]
    f.add(
        "ops under Wl-Batch/wl-batch/WL-BATCH headers applied live (of 3)",
        sum(b is not None for b in live),
        True,
    )
    code, out, err, took = await acli(d, OPERATOR, "replay", "--json")
    try:
        result = json.loads(out)
        match = bool(result.get("match"))
    except json.JSONDecodeError:
        match = False
        result = {"err": err.strip()[-300:]}
    f.add(
        f"replay (operator) match, exit {code}, {took:.1f} s",
        f"{'yes' if match else 'NO'} ops={result.get('ops')}",
        match and code == 0,
    )


async def s7_misc(d: Deploy, f: Figures) -> None:
    print("7. agent-credential reads, MCP, push consumer", flush=True)
    for who, argv, want in (
        ("spock", ["who"], 0),
        ("spock", ["presence", "zora"], 0),
        ("spock", ["export"], 2),
        ("spock-as-zora", ["presence", "drafting"], 2),
    ):
        code, _, err, took = await acli(d, who, *argv)
        f.add(
            f"{who} `{' '.join(argv)}` exit (want {want}), s",
            f"{code}, {took:.1f}{' ' + err.strip()[:90] if code else ''}",
            code == want and took < 15,
        )
    # Push consumer of spock's inbox durable aimed at zora's inbox / an actor.
    mine = inbox_in(WORLD, "spock")
    refused = tried = 0
    async with raw(d, "spock") as nc:
        for prefix in (AGENT_JS_API, "$JS.API"):
            js = nc.jetstream(prefix=prefix, timeout=1.0)
            for deliver in (
                inbox(WORLD, "zora"),
                ops(WORLD, "zora"),
                rpc(WORLD, "get"),
            ):
                tried += 1
                try:
                    await js.add_consumer(
                        INBOX.name,
                        api.ConsumerConfig(
                            name=mine.durable,
                            durable_name=mine.durable,
                            filter_subject=mine.filter_subject,
                            ack_policy=api.AckPolicy.NONE,
                            deliver_subject=deliver,
                        ),
                    )
                except Exception:
                    refused += 1
    async with raw(d, OPERATOR) as operator:
        ojs = operator.jetstream(timeout=5)
        try:
            info = await ojs.consumer_info(INBOX.name, mine.durable)
            push = info.config.deliver_subject
        except Exception as exc:
            push = f"no durable ({type(exc).__name__})"
    f.add(
        "push-consumer attempts refused; spock's durable deliver_subject",
        f"{refused}/{tried}; {push}",
        refused == tried and push is None,
    )
    await mcp_checks(d, f)


async def mcp_checks(d: Deploy, f: Figures) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    token = secrets.token_hex(32)
    digest = hashlib.sha256(token.encode()).hexdigest()
    tokens = d.tmp / "tokens.toml"
    lines = []
    for agent in ("spock", "zora", "scotty"):
        dig = digest if agent == "spock" else hashlib.sha256(agent.encode()).hexdigest()
        lines += [
            f"[agents.{agent}]",
            f'token_sha256 = "{dig}"',
            f'creds = "{d.creds(agent)}"',
            "",
        ]
    tokens.write_text("\n".join(lines))
    base = [WORLDLINE, "mcp", "--http", "--tokens", str(tokens), "--nats", d.url]
    base += ["--world", WORLD]
    with anyio.fail_after(30):
        wide = await anyio.run_process(
            [*base, "--port", str(free_port()), "--host", "0.0.0.0"],
            env=env(),
            check=False,
        )
    f.add(
        "MCP --host 0.0.0.0 without --allowed-hosts (exit)",
        wide.returncode,
        wide.returncode == 2,
    )
    port = free_port()
    log = (d.tmp / "mcp.log").open("w")
    proc = await anyio.open_process(
        [*base, "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        env=env(),
    )
    try:
        with anyio.fail_after(30):
            while True:
                try:
                    probe = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    await anyio.sleep(0.1)
                else:
                    await probe.aclose()
                    break
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            Client(
                streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)
            ) as client,
        ):
            listed = [str(r.uri) for r in (await client.list_resources()).resources]
        others = [u for u in listed if "zora" in u or "scotty" in u]
        f.add(
            "MCP HTTP resources/list for spock: others' resources",
            f"{len(others)} of {len(listed)} listed",
            not others and bool(listed),
        )
        # A rebinding attempt: a foreign Host header.
        import httpx2

        async with httpx2.AsyncClient() as h:
            r = await h.post(
                f"http://127.0.0.1:{port}/mcp",
                headers={
                    "Authorization": f"Bearer {token}",
                    "Host": "evil.example",
                    "Origin": "http://evil.example",
                    "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream",
                },
                content=b"{}",
            )
        f.add(
            "MCP request with Host/Origin evil.example (HTTP status)",
            r.status_code,
            r.status_code in (400, 403, 421),
        )
    finally:
        proc.terminate()
        with anyio.fail_after(10):
            await proc.wait()
        log.close()


# --- further attacks (reported, not part of the verdict unless they stall writes) --


async def further(d: Deploy, f: Figures, quick: bool) -> None:
    print("further attacks", flush=True)
    zora_durable = inbox_in(WORLD, "zora").durable
    async with AsyncExitStack() as stack:
        spock = await stack.enter_async_context(raw(d, "spock"))
        operator = await stack.enter_async_context(raw(d, OPERATOR))
        sw = await stack.enter_async_context(
            worldline.connect(
                d.url,
                world=WORLD,
                agent="spock",
                creds=d.creds("spock"),
                request_timeout=15,
            )
        )
        scotty = await stack.enter_async_context(
            worldline.connect(
                d.url,
                world=WORLD,
                agent="scotty",
                creds=d.creds("scotty"),
                request_timeout=15,
            )
        )
        # F1: read zora's inbox through the JS API prefix (fetch / info / ack).
        outcomes = []
        for subject in (
            f"{AGENT_JS_API}.CONSUMER.MSG.NEXT.{INBOX.name}.{zora_durable}",
            f"{AGENT_JS_API}.CONSUMER.INFO.{INBOX.name}.{zora_durable}",
            f"$JS.ACK.{INBOX.name}.{zora_durable}.1.1.1.1.0",
            f"{AGENT_JS_API}.DIRECT.GET.KV_wl-views.$KV.wl-views.{WORLD}.zora",
            f"{AGENT_JS_API}.STREAM.MSG.GET.{INBOX.name}",
        ):
            try:
                await spock.request(subject, b'{"batch":1}', timeout=1.5)
                outcomes.append("ANSWERED")
            except Exception as exc:
                outcomes.append(type(exc).__name__)
        f.more(
            "F1 spock fetches/infos/acks zora's inbox durable, reads her view, "
            "stream msg get",
            outcomes,
            "ANSWERED" in outcomes,
        )
        # F2: retract another agent's belief.
        mine = await scotty.add(f"Scotty's gauge reads 41 bar {secrets.token_hex(3)}.")
        try:
            closed = await sw.retract(mine.id, "spock says so")
            out = f"applied: status {closed.status}"
            hole = True
        except WorldlineError as exc:
            out = f"refused {type(exc).__name__}: {str(exc)[:80]}"
            hole = False
        f.more("F2 spock retracts scotty's belief", out, hole)
        # F3: spock's evidence claiming scotty's voice / scotty's declared source.
        target = await scotty.add(f"Valve V2 is shut {secrets.token_hex(3)}.")
        try:
            await sw.evidence(
                target.id,
                direction="refutes",
                kind="measurement",
                source="agent:scotty",
            )
            trace = await sw.trace(target.id)
            voices = sorted(
                {
                    (s.evidence.source, s.evidence.voice)
                    for s in trace.steps
                    if s.evidence.author == "spock"
                }
            )
            hole = any(v == "agent:scotty" for _, v in voices)
            out = f"voices of spock's evidence {voices}"
        except WorldlineError as exc:
            out, hole = f"refused {type(exc).__name__}", False
        f.more("F3 spock's evidence with source agent:scotty", out, hole)
        # F4: declare a new world / re-declare the crew world as spock.
        decl = load_declaration(CREW)
        new = msgspec.structs.replace(
            decl,
            world=msgspec.structs.replace(decl.world, id=WORLD),
            authority=msgspec.structs.replace(decl.authority, admins=["spock"]),
        )
        try:
            await sw.declare(new)
            out, hole = "re-declaration with spock as admin APPLIED", True
        except WorldlineError as exc:
            out, hole = f"refused {type(exc).__name__}: {str(exc)[:70]}", False
        f.more("F4 spock re-declares enterprise naming itself admin", out, hole)
        code, _, err, _ = await acli(
            d, "spock", "world", "load", str(d.tmp / "squat.toml"), world="squatted"
        )
        f.more(
            "F4b spock declares a new world it holds no creds for (exit)",
            f"{code} {err.strip()[:90]}",
            code == 0,
        )
        # F5: op_status snooping: every op's fate by sequence, anyone's.
        info = await operator.jetstream(timeout=5).stream_info(OPS.name)
        last = info.state.last_seq
        told: dict[str, int] = {}
        leaked: list[str] = []
        for seq in range(max(1, last - 200), last + 1):
            try:
                msg = await spock.request(
                    rpc(WORLD, "op_status"), encode(OpStatus(seq=seq)), timeout=3
                )
                reply = MATERIALIZER_REPLY.decode(msg.data)
            except Exception as exc:
                told[type(exc).__name__] = told.get(type(exc).__name__, 0) + 1
                continue
            kind = getattr(reply, "state", type(reply).__name__)
            told[kind] = told.get(kind, 0) + 1
            rejection = getattr(reply, "rejection", None)
            if rejection is not None and len(leaked) < 2:
                leaked.append(str(rejection)[:120])
        f.more(
            "F5 spock asks op_status for the last 200 op sequences (anyone's)",
            f"{told}; e.g. {leaked}",
            False,
        )
        # F6: bulk malformed and oversized ops on spock's own subject.
        bulk = 200 if quick else 3000
        big = b"\x00" * (900 * 1024)
        js = spock.jetstream(prefix=AGENT_JS_API, timeout=10)
        errors = 0
        started = time.monotonic()
        for n in range(bulk):
            body = big if n % 100 == 0 else secrets.token_bytes(64 + n % 512)
            await spock.publish(ops(WORLD, "spock"), body)
        await spock.flush()
        try:
            await js.publish(ops(WORLD, "spock"), b"x" * (2 * 1024 * 1024))
        except Exception:
            errors += 1
        took = time.monotonic() - started
        f.more(
            f"F6 {bulk} malformed ops (every 100th 900 KiB) + one 2 MiB",
            f"published in {took:.1f} s, 2 MiB refused: {bool(errors)}",
            False,
        )
        # F7: flood sim.forecast / read verbs.
        n_req = 100 if quick else 600
        answered = failed = 0
        lat: list[float] = []

        async def ask_forecast(i: int) -> None:
            nonlocal answered, failed
            t0 = time.monotonic()
            try:
                await sw.forecast(f"book a flight to city {i}")
                answered += 1
            except Exception:
                failed += 1
            lat.append(time.monotonic() - t0)

        async with anyio.create_task_group() as tg:
            for i in range(n_req):
                tg.start_soon(ask_forecast, i)
        f.more(
            f"F7 {n_req} concurrent sim.forecast from spock",
            f"answered {answered}, failed {failed}, max {max(lat):.1f} s",
            False,
        )
        # F8: long subjects and tokens.
        outcomes = []
        for subject in (
            ops(WORLD, "spock") + "." + "x" * 4000,
            ops(WORLD, "spock" + "x" * 200),
            rpc(WORLD, "get") + "." + "y" * 2000,
        ):
            try:
                await spock.publish(subject, b"junk")
                await spock.flush()
                outcomes.append("sent")
            except Exception as exc:
                outcomes.append(type(exc).__name__)
        await anyio.sleep(0.5)
        info = await operator.jetstream(timeout=5).stream_info(
            OPS.name, subjects_filter=OPS.subjects[0]
        )
        extra = [s for s in (info.state.subjects or {}) if len(s) > 60]
        f.more("F8 long subjects", f"{outcomes}; stored: {len(extra)}", bool(extra))
        # F9: a belief whose text is 900 KB (a through-fusion op, not junk).
        try:
            await sw.add("L" * (800 * 1024))
            out = "applied"
        except Exception as exc:
            out = f"{type(exc).__name__}: {str(exc)[:80]}"
        f.more("F9 spock adds one 800 KB belief", out, False)
        # F10: presence flood on own key (writes a KV entry each time).
        for i in range(200 if quick else 2000):
            await spock.publish(
                bucket_put(PRESENCE, bucket_key(WORLD, "spock")), b"x" * 1024 * (i % 2)
            )
        await spock.flush()
        pinfo = await operator.jetstream(timeout=5).stream_info(bucket_stream(PRESENCE))
        f.more(
            "F10 presence writes on own key (bucket stays bounded)",
            f"bucket msgs {pinfo.state.messages}, bytes {pinfo.state.bytes}",
            False,
        )
        zora = await stack.enter_async_context(
            worldline.connect(
                d.url,
                world=WORLD,
                agent="zora",
                creds=d.creds("zora"),
                request_timeout=15,
            )
        )
        geordi = await stack.enter_async_context(
            worldline.connect(
                d.url,
                world=WORLD,
                agent="geordi",
                creds=d.creds("geordi"),
                request_timeout=15,
            )
        )
        await pre_empted_observations(spock, zora, f)
        await self_trust_through_a_grant(geordi, f)
        await work_into_anothers_inbox(sw, zora, f, 20 if quick else 200)
        await junk_volume(d, spock, operator, scotty, f, 100 if quick else 1000)


async def found_after(w: World, ids: list[str], wait: float) -> list[float | None]:
    """Seconds until each belief id reads back (None: not within ``wait``)."""
    started = time.monotonic()
    found: dict[str, float] = {}
    with anyio.move_on_after(wait):
        while len(found) < len(ids):
            for i in ids:
                if i not in found and await w.get(i) is not None:
                    found[i] = round(time.monotonic() - started, 1)
            await anyio.sleep(0.2)
    return [found.get(i) for i in ids]


async def pre_empted_observations(spock: NATS, zora: World, f: Figures) -> None:
    """F11/F12: an observation's id (its Nats-Msg-Id until issue 23's fix, and the
    seed of the extractor's statement op ids) is computed from world, agent and text:
    spock computes zora's id for an artifact zora will observe and uses it first, as
    the Msg-Id, in an Observe of his own, or (F11b) as the seed of the Msg-Ids of the
    statements the extractor will publish for her."""
    js = spock.jetstream(prefix=AGENT_JS_API, timeout=10)
    tag = secrets.token_hex(3)
    control = f"The pager rota {tag} rotates every Monday."
    await zora.observe(control)
    seen = await found_after(zora, [belief_id(WORLD, control)], 20)
    for n, (label, how) in enumerate(
        (
            ("F11 (Nats-Msg-Id header)", "header"),
            ("F12 (body obs_id)", "body"),
            ("F11b (the extractor's statement Msg-Ids, on spock's ops)", "statements"),
        )
    ):
        s1 = f"The audit log {tag} keeps {91 + n} days of entries."
        s2 = f"The archive job {tag} runs nightly at {2 + n}."
        art = f"{s1} {s2}"
        zid = observation_id(WORLD, "zora", "", "artifact", "text", art)
        body = Observe(
            obs_id=zid,
            author="spock",
            at=utc_now(),
            source="",
            text=f"Filler {tag} from spock. Nothing to see here.",
            role="artifact",
            media_type="text",
        )
        if how == "statements":
            for msg_id in statement_ids(zid, art):
                await js.publish(
                    ops(WORLD, "spock"), b"junk", headers={"Nats-Msg-Id": msg_id}
                )
        else:
            await js.publish(
                obs(WORLD, "spock"),
                b"junk" if how == "header" else encode(body),
                headers={"Nats-Msg-Id": zid} if how == "header" else None,
            )
        await anyio.sleep(1.0)
        returned = await zora.observe(art)
        got = await found_after(
            zora, [belief_id(WORLD, s1), belief_id(WORLD, s2)], 15 if seen[0] else 3
        )
        f.more(
            f"{label} spock pre-empts zora's observation of a known artifact",
            f"zora.observe returned {returned == zid and 'its id, as recorded'}; "
            f"her 2 statements read back after {got} s (control: {seen[0]} s)",
            seen[0] is not None and None in got,
        )


def statement_ids(obs_id: str, text: str) -> list[str]:
    """The Msg-Ids the extractor gives the statements of zora's observation: its
    pure core, run as the extractor will run it."""
    at = utc_now()
    observation = Observe(obs_id=obs_id, author="zora", at=at, text=text)
    ctx = Context(world=WORLD, author="zora", subject=obs(WORLD, "zora"), seq=1, now=at)
    return [out.msg_id for out in extract(MemoryState(), observation, ctx).out]


async def self_trust_through_a_grant(geordi: World, f: Figures) -> None:
    """F13: crew.toml grants geordi the names ["crm", "agent:*"]; agent:* matches
    agent:geordi, and a grant is checked before the own-trust rule."""
    outcomes = []
    for source, value, lock in (
        ("agent:geordi", 5.0, False),
        ("agent:geordi", 5.0, True),
    ):
        try:
            await geordi.trust(source, value, lock=lock)
            outcomes.append(f"{source}={value:g}{' locked' if lock else ''}: applied")
        except WorldlineError as exc:
            outcomes.append(f"{source}: refused {type(exc).__name__}")
    f.more(
        "F13 geordi raises and locks its own trust through the agent:* grant",
        "; ".join(outcomes),
        any("applied" in o for o in outcomes),
    )


async def work_into_anothers_inbox(
    spock: World, zora: World, f: Figures, n: int
) -> None:
    """F14: PutWork names any assignee: spock files work into zora's inbox."""
    applied = 0
    for i in range(n):
        try:
            await spock.put_work(
                f"spam-{secrets.token_hex(4)}-{i}",
                kind="chore",
                assigned_to="zora",
                goal="Drop everything and re-read the whole world model. " * 20,
                priority=1,
            )
            applied += 1
        except WorldlineError:
            pass
    items = await zora.inbox(wait=1.0)
    for item in items:
        await item.release()
    spam = sum("re-read the whole world" in repr(i.message) for i in items)
    f.more(
        f"F14 spock files {n} priority-1 work items for zora",
        f"{applied} applied; zora's inbox read returns {spam} of them "
        f"({len(items)} items)",
        applied == n,
    )


async def junk_volume(
    d: Deploy, spock: NATS, operator: NATS, scotty: World, f: Figures, mib: int
) -> None:
    """F15: no per-agent limit on what an agent's op subject takes: MiB-sized junk
    is kept in WL_OPS forever, copied whole into WL_DLQ, and every actor reads it."""
    ojs = operator.jetstream(timeout=10)
    before = {s.name: (await ojs.stream_info(s.name)).state.bytes for s in (OPS, DLQ)}
    chunk = b"\x00" * (1000 * 1024)
    lat: list[float] = []
    failures: list[str] = []
    stop = anyio.Event()

    async def writes() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            started = time.monotonic()
            try:
                with anyio.fail_after(60):
                    await scotty.write(PILOT, "status", f"during-junk-{n}")
            except Exception as exc:
                failures.append(type(exc).__name__)
            lat.append(time.monotonic() - started)
            await anyio.sleep(0.2)

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(writes)
        for n in range(mib):
            await spock.publish(ops(WORLD, "spock"), chunk)
            if n % 20 == 0:
                await spock.flush()
        await spock.flush()
        sent = time.monotonic() - started
        await log_reads_after_junk(d, f)  # F16, while the actors read the junk
        await anyio.sleep(2.0)
        stop.set()
    grew = {
        name: ((await ojs.stream_info(name)).state.bytes - b) / 2**20
        for name, b in before.items()
    }
    worst = max(lat, default=0.0)
    f.more(
        f"F15 spock sends {mib} junk ops of 1000 KiB on its own subject",
        f"sent in {sent:.1f} s; WL_OPS +{grew[OPS.name]:.0f} MiB, "
        f"WL_DLQ +{grew[DLQ.name]:.0f} MiB (kept); scotty's writes meanwhile: "
        f"{len(lat)} tried, {len(failures)} failed {sorted(set(failures))}, "
        f"max {worst:.1f} s",
        worst > 2.0 or bool(failures),
    )


async def log_reads_after_junk(d: Deploy, f: Figures) -> None:
    """F16: right after F15's junk (the actors still reading it), three operator
    `export`s and a `replay` read the whole log at once: do they read all of it, or
    say they did not? (A fetch of 500 MiB-sized ops passes the server's 64 MiB
    max_pending for a client: a slow reader is cut off as a slow consumer.)"""
    async with raw(d, OPERATOR) as operator:
        info = await operator.jetstream(timeout=10).stream_info(
            OPS.name, subjects_filter=ops(WORLD, "*")
        )
        total = info.state.messages
    runs: list[tuple[int, int]] = []
    replayed: dict[str, object] = {}

    async def export() -> None:
        code, out, _, _ = await acli(d, OPERATOR, "export")
        runs.append((code, out.count("\n")))

    async def replay() -> None:
        code, out, _, _ = await acli(d, OPERATOR, "replay", "--json")
        with suppress(json.JSONDecodeError):
            replayed.update(json.loads(out))
        replayed["exit"] = code

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(export)
        tg.start_soon(replay)
    short = [r for r in runs if r[0] == 0 and r[1] < total]
    failed = [r for r in runs if r[0] != 0]
    f.more(
        f"F16 3 operator `export`s + `replay` at once right after F15 "
        f"(log: {total} ops)",
        f"(exit, lines): {runs}; exit 0 yet short of {total}: {len(short)}; "
        f"refused (exit 4, 'run it again'): {len(failed)}; replay "
        f"ops={replayed.get('ops')} match={replayed.get('match')} "
        f"exit {replayed.get('exit')}",
        bool(short or failed) or replayed.get("exit") != 0,
    )


# --- plumbing ---


class raw:
    def __init__(self, d: Deploy, who: str) -> None:
        self.d, self.who = d, who
        self.nc: NATS | None = None

    async def __aenter__(self) -> NATS:
        self.nc = await bus_connect(
            self.d.url, name=f"attack-{self.who}", creds=self.d.creds(self.who)
        )
        return self.nc

    async def __aexit__(self, *exc: object) -> None:
        assert self.nc is not None
        await self.nc.close()


def start_actors(d: Deploy, index: Path) -> list[subprocess.Popen[bytes]]:
    procs = []
    for name in ACTORS:
        cmd = [
            WORLDLINE,
            "actor",
            name,
            "--nats",
            d.url,
            "--creds",
            str(d.creds(name)),
            "--data",
            str(d.tmp / "data"),
            "--connect-wait",
            "60",
        ]
        if name == "simulator":
            cmd += ["--index", str(index)]
        log = (d.tmp / f"{name}.log").open("wb")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=log, env=env()))
    return procs


async def declared(d: Deploy) -> bool:
    """Whether the crew world holds a declaration now."""
    code, out, _ = await anyio.to_thread.run_sync(
        lambda: cli(d, OPERATOR, "world", "show", "--json", timeout=60)
    )
    if code != 0:
        return False
    try:
        return json.loads(out).get("declaration") is not None
    except ValueError:
        return False


async def declare(d: Deploy) -> float:
    """Declare the crew world as the operator, retried while the actors come up."""
    started = time.monotonic()
    code, _, err = await anyio.to_thread.run_sync(
        lambda: cli(d, OPERATOR, "world", "load", str(CREW), timeout=120)
    )
    for _ in range(30):
        if code == 0 or await declared(d):
            # An attempt that timed out while the actors came up may still have
            # applied; a repeat is then a re-declaration, the admins' (refused).
            code = 0
            break
        await anyio.sleep(1)
        code, _, err = await anyio.to_thread.run_sync(
            lambda: cli(d, OPERATOR, "world", "load", str(CREW), timeout=120)
        )
    if code != 0:
        raise SystemExit(f"declaring the world failed: {err}")
    took = time.monotonic() - started
    # Every actor serves before the attack starts: an honest write waits for its
    # read through the projector, which may still be coming up on a loaded machine.
    for _ in range(120):
        code, _, err = await anyio.to_thread.run_sync(
            lambda: cli(d, OPERATOR, "list", "--json", timeout=60)
        )
        if code == 0:
            break
        await anyio.sleep(0.5)
    else:
        raise SystemExit(f"the projector never answered: {err}")
    return took


async def attack(d: Deploy, quick: bool, strict: bool) -> bool:
    f = Figures()
    honest = Honest()
    stop = anyio.Event()
    async with AsyncExitStack() as stack:
        ada = await stack.enter_async_context(
            worldline.connect(
                d.url,
                world=WORLD,
                agent="ada",
                creds=d.creds("ada"),
                request_timeout=30,
            )
        )
        scotty = await stack.enter_async_context(
            worldline.connect(
                d.url,
                world=WORLD,
                agent="scotty",
                creds=d.creds("scotty"),
                request_timeout=30,
            )
        )
        zora = await stack.enter_async_context(
            worldline.connect(d.url, world=WORLD, agent="zora", creds=d.creds("zora"))
        )
        await zora.set_presence("reviewing")
        await ada.write(PILOT, "phase", "sla")  # work for spock, scotty, zora
        tg = await stack.enter_async_context(anyio.create_task_group())
        tg.start_soon(honest_writer, scotty, honest, stop, 0.2, "write")
        tg.start_soon(honest_writer, ada, honest, stop, 0.4, "add")
        try:
            await s1_replies(d, f, 2 if quick else 20)
            await s2_collusion(d, f)
            await s3_trust(d, f)
            await s4_slot(d, f)
            await s5_sim(d, f, 40 if quick else 300)
            batch_ids = await s6_batch_header(d, f)
            await s7_misc(d, f)
        finally:
            stop.set()
    await anyio.sleep(2.0)  # the last honest op settles before the replay
    await s6_check(d, f, batch_ids)
    try:
        await further(d, f, quick)
    except Exception as exc:  # report; the verdict is the issue's scenarios'
        f.more("further attacks stopped", f"{type(exc).__name__}: {exc}", False)
    worst = max(honest.latencies, default=0.0)
    f.add(
        "honest writes during the attack: attempted/applied, max latency",
        f"{honest.attempted}/{honest.applied}, {worst:.2f} s",
        honest.attempted == honest.applied and worst < 10,
    )
    for e in honest.errors[:5]:
        print("    honest error:", e)
    print(
        f"  permission violations the server reported to the attackers: "
        f"{VIOLATIONS.count}"
    )
    bad = [what for what, _, ok in f.lines if not ok]
    holes = [what for what, _, hole in f.further if hole]
    verdict = "HELD" if not bad else f"FAILED ({len(bad)}: {'; '.join(bad)})"
    print(
        f"verdict: {verdict}; further attacks: {len(f.further)} tried, "
        f"{len(holes)} hole(s){': ' + '; '.join(holes) if holes else ''}"
    )
    return not bad and not (strict and holes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (tests)")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit non-zero on a hole the further attacks found too",
    )
    args = parser.parse_args()
    bus_log = logging.getLogger("worldline.bus")
    bus_log.addHandler(VIOLATIONS)
    bus_log.propagate = False
    tmp = Path(tempfile.mkdtemp(prefix="wl-attack-"))
    ok = False
    procs: list[subprocess.Popen[bytes]] = []
    try:
        other = tmp / "voyager.toml"
        other.write_text(OTHER_TOML)
        (tmp / "squat.toml").write_text(
            OTHER_TOML.replace(OTHER, "squatted").replace("janeway", "spock")
        )
        out = tmp / "creds"
        gen = subprocess.run(
            [WORLDLINE, "creds", str(CREW), str(other), "--out", str(out)],
            capture_output=True,
            text=True,
            env=env(),
            check=False,
        )
        if gen.returncode:
            raise SystemExit(f"worldline creds failed: {gen.stderr}")
        port = free_port()
        d = Deploy(tmp, f"nats://127.0.0.1:{port}", out)
        print(f"deploy: {tmp} {d.url}", flush=True)
        procs = start_actors(d, make_index(tmp / "index"))
        time.sleep(2.0)  # the actors wait for a server that is not there yet
        early = [p.poll() for p in procs]
        with EmbeddedNats(tmp / "nats", port=port, config=out / "auth.conf"):
            took = anyio.run(declare, d)
            print(
                f"  actors started 2 s before the server: still waiting "
                f"{sum(c is None for c in early)}/5; world declared after "
                f"{took:.1f} s",
                flush=True,
            )
            ok = anyio.run(attack, d, args.quick, args.strict) and all(
                c is None for c in early
            )
            for p in procs:
                if p.poll() is not None:
                    print(f"  actor {p.args!r} exited {p.returncode}")
                    ok = False
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if args.keep or not ok:
            print(f"logs and stores kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

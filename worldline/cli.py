"""The ``worldline`` command: run the actors, and talk to a world from a shell.

Exit codes: 0 success; 2 bad usage or bad input (one line on stderr), or credentials
the server refuses for what the verb needs ("permission denied publishing to ...":
another agent's, say); 3 the world rejected the request (the reason is printed); 4 the
bus cannot be reached, holds no worldline streams, or refused the request (a JetStream
error such as storage full, named with its fix), or no actor applied the request in
time; 1 a failure of our own side (a store that cannot open, a
stream whose stored config cannot be updated, a replay that does not match);
130 interrupted before it could finish.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import logging
import os
import re
import signal
import sys
import tempfile
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import msgspec
import nats.errors

from actors.registry import ACTORS, build
from actors.runtime.auth import CREDS_ENV, load_credentials
from actors.runtime.bus import MAX_REPLICAS, REPLICAS_ENV
from actors.runtime.embedded import EmbeddedNats, keep_writable
from actors.runtime.errors import ActorError
from actors.runtime.errors import BusUnavailable as RuntimeBusUnavailable
from actors.runtime.lock import FolderLock
from actors.runtime.metrics import Registry
from actors.runtime.supervise import run_actors
from protocols.beliefs import DIRECTIONS, EDGE_TYPES, EVIDENCE_KINDS
from protocols.messages import (
    BELIEF_TYPES,
    Belief,
    InboxMessage,
    Notification,
    Rejection,
    StateHashReply,
    WorkAssigned,
)
from protocols.world import Value, WorldDecl
from worldline.client import DEFAULT_URL, World, connect
from worldline.creds import write_credentials
from worldline.crew import RawRecord
from worldline.declaration import load_declaration
from worldline.errors import (
    BadRequest,
    BusUnavailable,
    NotApplied,
    PermissionDenied,
    Rejected,
    ServerError,
    SimulationError,
    WorldlineError,
    bus_errors,
)
from worldline.replay import ReplayResult, read_export, replay
from worldline.status import gather as gather_status
from worldline.status import render as render_status

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Sequence

    from anyio.abc import TaskStatus

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REJECTED, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
URL_FILE = "nats.url"
LOCK_FILE = "worldline.lock"  # held by the `worldline up` that uses the data folder


def default_data() -> Path:
    """``$WORLDLINE_DATA``, else ``~/.local/share/worldline``."""
    env = os.environ.get("WORLDLINE_DATA")
    return Path(env) if env else Path.home() / ".local" / "share" / "worldline"


def default_url() -> str:
    """``$WORLDLINE_NATS``, else the URL a local ``worldline up`` wrote, else :4222."""
    env = os.environ.get("WORLDLINE_NATS")
    if env:
        return env
    try:
        return (default_data() / URL_FILE).read_text().strip() or DEFAULT_URL
    except OSError:
        return DEFAULT_URL


def default_agent() -> str:
    env = os.environ.get("WORLDLINE_AGENT")
    if env:
        return env
    try:
        user = re.sub(r"[^A-Za-z0-9_-]", "-", getpass.getuser())[:64]
    except (KeyError, OSError):
        user = ""
    return user or "cli"


class _Failure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# --- running actors -------------------------------------------------------------------


async def _serve_until_signal(
    start: Callable[..., Coroutine[Any, Any, None]],
    on_ready: Callable[[], Awaitable[None]],
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:
            await tg.start(start)
            await on_ready()
            async for _ in signals:
                break
            tg.cancel_scope.cancel()


def _stream_replicas(args: argparse.Namespace) -> None:
    """``--stream-replicas N`` holds for every actor this process runs (the runtime
    reads it from the environment when it declares streams and buckets)."""
    if args.stream_replicas is not None:
        os.environ[REPLICAS_ENV] = str(args.stream_replicas)


def _metrics(args: argparse.Namespace) -> dict[str, Any]:
    """``run_actors`` options: one registry, served when ``--metrics-port`` is set."""
    return {
        "metrics": Registry(),
        "metrics_port": args.metrics_port,
        "metrics_host": args.metrics_host,
    }


def _announce_metrics(options: dict[str, Any]) -> None:
    port = options["metrics"].port
    if port is not None:
        print(f"metrics: http://{options['metrics_host']}:{port}/metrics", flush=True)


def _up(args: argparse.Namespace) -> int:
    _stream_replicas(args)
    data: Path = args.data
    # One `up` per data folder: a second would start a second server and actor set
    # on the same stores (kill -9 drops the lock, so a crash never blocks the next).
    lock = FolderLock(
        data / LOCK_FILE,
        what=f"data folder {data}",
        fix="stop that `worldline up` first (Ctrl-C in its terminal, or kill -INT "
        "its pid), or pass another --data folder (env WORLDLINE_DATA)",
    ).acquire(command="worldline up")
    try:
        return _up_locked(args, data, lock)
    finally:
        lock.release()


def _up_locked(args: argparse.Namespace, data: Path, lock: FolderLock) -> int:
    specs = [build(name, sim_index=args.sim_index) for name in ACTORS]
    server: EmbeddedNats | None = None
    url_file = data / URL_FILE
    declaration = load_declaration(args.world_file) if args.world_file else None
    if declaration is not None and os.environ.get(CREDS_ENV):
        # With credentials the first declaration of a world must come from the
        # operator (the materializer's gate), and up holds only the actors' rights.
        raise BadRequest(
            "--world-file cannot declare a world on a secured server (up runs with "
            "the actors' credentials; a world's first declaration must come from the "
            "operator): drop --world-file and, once up is ready, run `worldline world "
            f"load {args.world_file} --world {declaration.world.id} --agent operator "
            "--creds operator.creds`"
        )
    url = ""
    try:
        if args.nats:
            url = args.nats
        else:
            server = EmbeddedNats(
                data / "nats", port=args.port or -1, config=args.server_config
            )
            url = server.start()
        lock.update(url=url)
        print(f"nats: {url}", flush=True)
        if server is not None:  # on stderr: stdout's lines are what scripts parse
            print(_reach(url, args.server_config), file=sys.stderr, flush=True)

        async def ready() -> None:
            if declaration is not None:
                await _declare_once(url, declaration)
            if server is not None:
                await anyio.Path(url_file).write_text(url + "\n")
            _announce_metrics(metrics)
            print("ready", flush=True)

        async def run(
            *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
        ) -> None:
            async with anyio.create_task_group() as tg:
                if server is not None:  # a full disk heals without a restart of up
                    await tg.start(keep_writable, server)
                actors = partial(run_actors, specs, url=url, data=data / "actors")
                await tg.start(partial(actors, **metrics))
                task_status.started()

        metrics = _metrics(args)
        anyio.run(_serve_until_signal, run, ready, backend="asyncio")
    finally:
        if server is not None:
            _remove_url_file(url_file, url)
            server.stop()
    return EXIT_OK


def _remove_url_file(url_file: Path, url: str) -> None:
    """Remove the URL file if it still names ``url``: never one this process did not
    write."""
    with contextlib.suppress(OSError):
        if url and url_file.read_text().strip() == url:
            url_file.unlink()


def _reach(url: str, config: Path | None) -> str:
    """Who can reach the embedded server ``up`` started (it binds 127.0.0.1)."""
    if config is not None:
        return f"nats: {url} (loopback only; clients authenticate as {config} says)"
    return (
        f"nats: {url} (loopback only: every local process can act as any agent; "
        "see deploy/credentials.md for a secured server)"
    )


async def _declare_once(url: str, declaration: WorldDecl) -> None:
    """Declare the world unless it already holds exactly this declaration."""
    name = declaration.world.id
    author = (declaration.authority.admins or ["worldline"])[0]
    async with connect(url, world=name, agent=author) as world:
        crew = await world.read_world(entity_type="none", beliefs=False)
        current = crew.declaration
        if current == declaration:
            print(f"world: {name} (already declared)", flush=True)
            return
        await world.declare(declaration)
        print(f"world: {name} declared by {author}", flush=True)


def _actor(args: argparse.Namespace) -> int:
    _stream_replicas(args)
    spec = build(
        args.name,
        replica=args.replica,
        shard=args.shard,
        partition=args.partition,
        sim_index=args.index,
    )
    url = args.nats or default_url()

    async def ready() -> None:
        _announce_metrics(metrics)
        print(f"{spec.instance}: consuming from {url}", flush=True)

    metrics = _metrics(args)
    anyio.run(
        _serve_until_signal,
        partial(run_actors, [spec], url=url, data=args.data / "actors", **metrics),
        ready,
        backend="asyncio",
    )
    return EXIT_OK


def _mcp(args: argparse.Namespace) -> int:
    """Serve this agent's world model as MCP tools over stdio (stdout is the
    protocol; logs go to stderr)."""
    from worldline.mcp_server import serve  # the MCP SDK is only loaded here

    anyio.run(
        partial(
            serve,
            args.nats or default_url(),
            world=args.world,
            agent=args.agent,
            request_timeout=args.timeout,
        ),
        backend="asyncio",
    )
    return EXIT_OK


# --- client verbs ---------------------------------------------------------------------


def _show(belief: Belief) -> str:
    if belief.confidence is None:
        reading = "no probability"
    else:
        reading = f"confidence {belief.confidence:.2f}"
        if belief.uncertainty is not None:
            reading += f" ±{belief.uncertainty:.2f}"
    flags = f"  [{', '.join(belief.flags)}]" if belief.flags else ""
    return (
        f"{belief.id}  {belief.type}  {reading}  weight {belief.evidence_weight:g}  "
        f"v{belief.version}{flags}\n  {belief.text}"
    )


def _emit(args: argparse.Namespace, value: Any, human: str) -> None:
    if args.json:
        sys.stdout.write(msgspec.json.encode(value).decode() + "\n")
    else:
        print(human)


async def _client(
    args: argparse.Namespace, verb: Callable[[World], Awaitable[None]]
) -> None:
    async with connect(
        args.nats or default_url(),
        world=args.world,
        agent=args.agent,
        request_timeout=args.timeout,
    ) as world:
        await verb(world)


def _add(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        belief = await world.add(
            args.text, confidence=args.confidence, type=args.type, id=args.id
        )
        _emit(args, belief, _show(belief))

    return run


def _evidence(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        belief = await world.evidence(
            args.id,
            direction=args.direction,
            kind=args.kind,
            source=args.source,
            text=args.text,
            observed_at=args.at,
        )
        _emit(args, belief, _show(belief))

    return run


def _close(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        if args.verb == "resolve":
            belief = await world.resolve(args.id, args.reason)
        else:
            belief = await world.retract(args.id, args.reason)
        _emit(args, belief, _show(belief))

    return run


def _relate(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        seq = await world.relate(
            args.source, args.target, type=args.type, confidence=args.confidence
        )
        _emit(
            args,
            {"source": args.source, "target": args.target, "seq": seq},
            f"{args.source} -{args.type} ({args.confidence:g})-> {args.target}",
        )

    return run


def _trust(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        seq = await world.trust(args.source, args.value, lock=args.lock)
        _emit(
            args,
            {"source": args.source, "trust": args.value, "seq": seq},
            f"trust {args.source} = {args.value:g}{' (locked)' if args.lock else ''}",
        )

    return run


def _trace(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        reply = await world.trace(args.id)
        assert reply.belief is not None
        lines = [_show(reply.belief)]
        for step in reply.steps:
            e = step.evidence
            moved = (
                "no probability"
                if step.after is None
                else f"{step.before:.2f} -> {step.after:.2f}"
            )
            where = f" [{e.artifact}]" if e.artifact else ""
            lines.append(
                f"  {e.observed_at.isoformat()}  {e.direction:<8} {e.kind:<15} "
                f"{e.source}{where} by {e.author}: {moved}"
                + (f"\n      {e.text}" if e.text else "")
            )
        lines += [
            f"  edge {e.id}: {e.source} -{e.type} ({e.confidence:g})-> {e.target}"
            for e in reply.edges
        ]
        _emit(args, reply, "\n".join(lines))

    return run


def _read(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        reply = await world.read(at=args.at)
        lines = [f"beliefs ({len(reply.beliefs)}):"]
        lines += [_show(b) for b in reply.beliefs]
        lines.append(f"gaps ({len(reply.gaps)}):")
        lines += [_show(b) for b in reply.gaps]
        lines.append(f"goals ({len(reply.goals)}):")
        lines += [_show(b) for b in reply.goals]
        lines.append(f"contradictions ({len(reply.contradictions)}):")
        lines += [
            f"  {c.kind}: {' vs '.join(c.beliefs)} (strength {c.strength:.2f})"
            for c in reply.contradictions
        ]
        lines.append(f"edges ({len(reply.belief_edges)}):")
        lines += [
            f"  {e.source} -{e.type} ({e.confidence:g})-> {e.target}"
            for e in reply.belief_edges
        ]
        _emit(args, reply, "\n".join(lines))

    return run


def _before(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        view = await world.before(args.query, at=args.at)
        if args.json:  # canonical: sorted keys, so equal views are equal bytes
            sys.stdout.write(msgspec.json.encode(view, order="sorted").decode() + "\n")
        else:
            sys.stdout.write(view.prompt)

    return run


def _watch(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        async for view in world.watch(args.of):
            if args.json:
                sys.stdout.write(msgspec.json.encode(view, order="sorted").decode())
                sys.stdout.write("\n")
            elif view.worldview is not None:
                sys.stdout.write(view.worldview.prompt + "\n")
            sys.stdout.flush()

    return run


def _get(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        belief = await world.get(args.id, at=args.at)
        if belief is None:
            raise BadRequest(f"no belief {args.id!r} in world {world.world!r}")
        _emit(args, belief, _show(belief))

    return run


def _list(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        beliefs = await world.list(
            type=args.type,
            label=args.label,
            flag=args.flag,
            status=args.status,
            at=args.at,
            limit=args.limit,
        )
        human = (
            "\n".join(_show(b) for b in beliefs) or f"world {world.world!r} is empty"
        )
        _emit(args, beliefs, human)

    return run


def _observe(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(args.file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise BadRequest(f"cannot read {args.file}: {exc}") from exc
    source = args.source or ("stdin" if args.file == "-" else Path(args.file).name)

    async def run(world: World) -> None:
        if args.verb == "after":
            obs_id = await world.after(text)
        else:
            obs_id = await world.observe(text, source=source)
        _emit(args, {"obs_id": obs_id}, f"observed {obs_id} (extraction is async)")

    return run


def _world_load(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    declaration = load_declaration(Path(args.file))

    async def run(world: World) -> None:
        seq = await world.declare(declaration)
        _emit(
            args,
            {"world": world.world, "seq": seq},
            f"world {world.world!r} declared from {args.file} (op {seq})",
        )

    return run


def _world_show(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        reply = await world.read_world(entity_type=args.type)
        if reply.declaration is None:
            raise BadRequest(
                f"world {world.world!r} is not declared; "
                "run `worldline world load FILE`"
            )
        lines = [f"world {reply.declaration.world.id}: {reply.declaration.world.kind}"]
        for entity in reply.entities:
            fields = ", ".join(
                f"{name}={state.value!r}@v{state.version}"
                for name, state in sorted(entity.fields.items())
            )
            lines.append(f"  {entity.id}  {fields}")
        lines += [f"  {e.source} -{e.type}-> {e.target}  ({e.id})" for e in reply.edges]
        _emit(args, reply, "\n".join(lines))

    return run


def _value(text: str) -> Value:
    """JSON if it parses as a scalar, list of strings or null; else the text itself."""
    try:
        value: Value = msgspec.json.decode(text.encode(), type=Value)
        return value
    except msgspec.MsgspecError:
        return text


def _write(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    value = _value(args.value)

    async def run(world: World) -> None:
        version = await world.write(
            args.entity, args.field, value, expect_version=args.expect_version
        )
        _emit(
            args,
            {"entity": args.entity, "field": args.field, "version": version},
            f"{args.entity}.{args.field} = {value!r} (version {version})",
        )

    return run


def _inbox(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        items = await world.inbox(wait=args.wait, limit=args.limit)
        try:
            human = "\n".join(_inbox_line(item.message) for item in items)
            _emit(
                args,
                [item.message for item in items],
                human or f"{world.agent}'s inbox is empty",
            )
        finally:
            if args.ack:
                await world.ack(items)
            else:
                for item in items:
                    await item.release()

    return run


def _inbox_line(message: InboxMessage) -> str:
    match message:
        case Rejection():
            return f"rejected  {message.op_id}: {message.code}: {message.reason}"
        case WorkAssigned():
            due = f" due {message.due_at.isoformat()}" if message.due_at else ""
            return (
                f"work      {message.work} ({message.work_kind}, p{message.priority}"
                f"{due}) from {message.requested_by}: {message.goal}"
            )
        case Notification():
            return (
                f"changed   {message.entity}.{message.field} = {message.value!r} "
                f"(v{message.version}, {message.rule})"
            )
    return repr(message)


def _view(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        view = await world.view(args.of)
        if view is None:
            raise BadRequest(f"world {world.world!r} is not declared")
        encoded = msgspec.json.encode(view)
        _emit(args, view, msgspec.json.format(encoded.decode(), indent=2))

    return run


def _export(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        # Every op the log holds, each on its line: one that does not decode is kept
        # as its bytes (a backup that silently drops nothing).
        lines = []
        raw = []
        async for record in world.backup():
            lines.append(msgspec.json.encode(record) + b"\n")
            if isinstance(record, RawRecord):
                raw.append(record.seq)
        if args.out:
            await anyio.Path(args.out).write_bytes(b"".join(lines))
            sys.stderr.write(f"exported {len(lines)} ops to {args.out}\n")
        else:
            sys.stdout.write(b"".join(lines).decode())
        if raw:
            shown = ", ".join(map(str, raw[:10])) + (", ..." if len(raw) > 10 else "")
            sys.stderr.write(
                f"warning: {len(raw)} of {len(lines)} ops do not decode (seq "
                f'{shown}); kept as their bytes ("payload"), as the actors '
                "dead-lettered them; replay does the same\n"
            )

    return run


def _presence(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        await world.set_presence(args.status, args.task)
        _emit(args, {"agent": world.agent, "status": args.status}, "presence set")

    return run


CLIENT_VERBS: dict[str, Callable[[argparse.Namespace], Callable[[World], Any]]] = {
    "add": _add,
    "get": _get,
    "list": _list,
    "observe": _observe,
    "after": _observe,
    "evidence": _evidence,
    "retract": _close,
    "resolve": _close,
    "relate": _relate,
    "trust": _trust,
    "trace": _trace,
    "read": _read,
    "before": _before,
    "watch": _watch,
    "world.load": _world_load,
    "world.show": _world_show,
    "write": _write,
    "inbox": _inbox,
    "view": _view,
    "export": _export,
    "presence": _presence,
}


def _sim_index(args: argparse.Namespace) -> int:
    """Read traces, pair their transitions, and write a read-only index artifact."""
    from actors.extractor.traces import UnknownTraceFormat, parse_trace
    from actors.simulator import index as transition_index

    transitions = []
    issues = []
    names = []
    total = len(args.traces)
    for number, path in enumerate(args.traces, start=1):
        try:
            parsed = parse_trace(path.name, path.read_bytes())
        except OSError as exc:
            raise BadRequest(f"cannot read {path}: {exc}") from exc
        except UnknownTraceFormat as exc:
            raise BadRequest(f"{path}: {exc}") from exc
        transitions += parsed.transitions
        issues += parsed.issues
        names.append(path.name)
        bar = "#" * (20 * number // total)
        line = (
            f"[{bar:<20}] {number}/{total} {path.name}: {parsed.format}, "
            f"{len(parsed.transitions)} transitions, {len(parsed.issues)} issues"
        )
        sys.stderr.write(f"\r{line:<120}")
        sys.stderr.write("\n" if number == total else "")
    built = transition_index.build(
        transitions, sources=names, issues=issues, held_out=args.held_out
    )
    try:
        transition_index.save(built, args.out)
    except (OSError, ValueError) as exc:
        raise BadRequest(f"cannot write the index to {args.out}: {exc}") from exc
    manifest = built.manifest
    _emit(
        args,
        manifest,
        f"index {manifest.id[:12]} at {args.out}: {manifest.transitions} transitions "
        f"from {len(names)} traces, {len(manifest.issues)} issues recorded",
    )
    return EXIT_OK


def _sim_session(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        started = await world.sim_start(
            args.task, context=args.context, exclude_lineages=args.exclude
        )
        sys.stderr.write(f"session {started.session_id} (index {started.index[:12]})\n")
        try:
            for line in sys.stdin:
                if not line.strip():
                    continue
                reply = await world.sim_step(started.session_id, line.rstrip("\n"))
                if args.json:
                    sys.stdout.write(msgspec.json.encode(reply).decode() + "\n")
                else:
                    print(f"user: {reply.message['content']}")
                sys.stdout.flush()
                if reply.terminal:
                    return
        finally:
            with contextlib.suppress(SimulationError):  # ended by a terminal step
                await world.sim_end(started.session_id)

    return run


CLIENT_VERBS["sim.session"] = _sim_session


def _sim_run(args: argparse.Namespace) -> int:
    """Run (or resume) an evaluation plan: one immutable rollout per task."""
    from actors.runtime.consume import utcnow
    from actors.simulator.evaluate import PlanError, run_plan

    try:
        report = run_plan(args.plan, now=utcnow)
    except PlanError as exc:
        raise BadRequest(str(exc)) from exc
    _emit(
        args,
        {"summary": report.summary(), "rollouts": [str(p) for p in report.rollouts]},
        report.summary(),
    )
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    """Print every actor instance's lag, rates, dead letters and store size."""
    from actors.runtime.consume import utcnow

    url = args.nats or default_url()

    async def run() -> Any:
        try:
            with anyio.fail_after(args.timeout):
                return await gather_status(url, now=utcnow())
        except TimeoutError as exc:
            raise BusUnavailable(
                f"NATS at {url} did not answer status queries within "
                f"{args.timeout:g}s; retry with a longer --timeout"
            ) from exc

    report = anyio.run(run, backend="asyncio")
    _emit(args, report, render_status(report))
    # A stalled actor (a batch failing to commit) needs an operator: say so.
    stalled = any(i.state == "stalled" for i in report.instances)
    return EXIT_FAILED if stalled else EXIT_OK


def _creds(args: argparse.Namespace) -> int:
    """Write auth.conf and one credentials file per agent, actor and operator."""
    decls = [load_declaration(path) for path in args.files]
    report = write_credentials(
        decls, args.out, rotate=args.rotate, sources=[str(p) for p in args.files]
    )
    agents = [u.name for u in report.users if u.role == "agent"]
    lines = [
        f"auth.conf: {report.config} (include it in the nats-server config)",
        f"agents: {', '.join(agents)}",
        f"credentials: {len(report.created)} new, {len(report.kept)} kept, "
        f"{len(report.rotated)} rotated (under {args.out})",
    ]
    lines += [
        f"stale: {path} (no declaration names it; it no longer logs in: delete it)"
        for path in report.stale
    ]
    _emit(
        args,
        {
            "config": str(report.config),
            "agents": agents,
            "created": [str(p) for p in report.created],
            "kept": [str(p) for p in report.kept],
            "rotated": [str(p) for p in report.rotated],
            "stale": [str(p) for p in report.stale],
        },
        "\n".join(lines),
    )
    return EXIT_OK


def _use_creds(args: argparse.Namespace) -> None:
    """``--creds FILE`` holds for every connection this process makes (the runtime
    reads it from the environment); a bad file fails here, before any work."""
    creds = getattr(args, "creds", None)
    if creds:
        load_credentials(creds)
        os.environ[CREDS_ENV] = str(creds)


def _replay(args: argparse.Namespace) -> int:
    """Rebuild from an export file, or from the bus, and compare with the live hash."""
    if args.data is None:
        with tempfile.TemporaryDirectory(prefix="worldline-replay-") as tmp:
            return _replay_into(args, Path(tmp) / "state")
    return _replay_into(args, args.data)


def _replay_into(args: argparse.Namespace, data: Path) -> int:
    if args.source:
        try:
            with open(args.source, "rb") as f:
                records = read_export(f)
        except (OSError, msgspec.MsgspecError) as exc:
            raise BadRequest(f"cannot read export {args.source}: {exc}") from exc
        result = replay(records, data, args.world)
        live = None
    else:
        result, live = anyio.run(_replay_from_bus, args, data, backend="asyncio")
    human = [f"state-hash: {result.hash}", f"ops: {result.ops}"]
    if result.raw:
        human.append(f"undecodable: {result.raw} (dead-lettered, as the actors did)")
    # ``applied``: the last op the world's materializer applied or rejected, on both
    # sides (an op dead-lettered at the end of the log moves neither).
    matches = live is None or (
        live.hash == result.hash and live.applied == result.applied
    )
    if live is not None:
        human.append(f"live-hash: {live.hash} (applied through op {live.applied})")
        human.append("match: yes" if matches else "match: NO")
    _emit(
        args,
        {
            "state_hash": result.hash,
            "ops": result.ops,
            "undecodable": result.raw,
            "live_hash": None if live is None else live.hash,
            "match": matches,
        },
        "\n".join(human),
    )
    return EXIT_OK if matches else EXIT_FAILED


async def _replay_from_bus(
    args: argparse.Namespace, data: Path
) -> tuple[ReplayResult, StateHashReply]:
    async with connect(
        args.nats or default_url(),
        world=args.world,
        agent=args.agent,
        request_timeout=args.timeout,
    ) as world:
        records = [record async for record in world.backup()]
        live = await world.state_hash()
    return replay(records, data, args.world), live


# --- argument parsing -----------------------------------------------------------------


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is outside 0-1")
    return value


def _replicas(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_REPLICAS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a replica count: use 1 to {MAX_REPLICAS}, at most the "
            "number of JetStream servers in the cluster"
        )
    return int(text)


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO time like 2026-03-01T12:00:00+00:00"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def parser() -> argparse.ArgumentParser:
    """The CLI's argument parser (also the source of the CLI reference)."""
    root = argparse.ArgumentParser(
        prog="worldline",
        description="A shared, evidence-kept world model for crews of AI agents.",
    )
    root.add_argument("-v", "--verbose", action="store_true", help="log more")
    verbs = root.add_subparsers(dest="verb", required=True, metavar="VERB")

    server = argparse.ArgumentParser(add_help=False)
    server.add_argument(
        "--data", type=Path, default=default_data(), help="state folder (LMDB, NATS)"
    )
    server.add_argument(
        "--nats", default=None, help="join this NATS instead of the embedded server"
    )
    server.add_argument(
        "--creds",
        default=None,
        help=f"the actor's credentials file from `worldline creds` (env {CREDS_ENV})",
    )
    server.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus GET /metrics on this port (0: a free one; default off)",
    )
    server.add_argument(
        "--metrics-host", default="127.0.0.1", help="address /metrics binds to"
    )
    server.add_argument(
        "--stream-replicas",
        type=_replicas,
        default=None,
        help=f"copies of each stream and bucket, 1-{MAX_REPLICAS} (env {REPLICAS_ENV}; "
        "default 1; 3 on a 3-node cluster)",
    )

    up = verbs.add_parser(
        "up", parents=[server], help="embedded nats-server plus all five actors"
    )
    up.add_argument("--port", type=int, default=0, help="NATS port (default: free)")
    up.add_argument(
        "--server-config",
        type=Path,
        default=None,
        help="embedded nats-server reads this config first (e.g. the auth.conf "
        "`worldline creds` wrote; then pass --creds too)",
    )
    up.add_argument(
        "--sim-index",
        type=Path,
        default=None,
        help="serve simulator sessions from this transition index folder",
    )
    up.add_argument(
        "--world-file",
        type=Path,
        default=None,
        help="declare this world (TOML) once the actors run, as its first admin",
    )
    up.set_defaults(run=_up)

    actor = verbs.add_parser("actor", parents=[server], help="run one actor alone")
    actor.add_argument("name", choices=list(ACTORS))
    actor.add_argument(
        "--replica",
        default=None,
        help="projector: its own read replica (default 0); materializer: this "
        "replica's name, unique per partition (a hot standby runs with another)",
    )
    actor.add_argument(
        "--partition",
        default="0/1",
        help="materializer: write the worlds of partition I of N (e.g. 0/2)",
    )
    actor.add_argument(
        "--shard", default="0/1", help="fusion: own belief shard I of N (e.g. 0/2)"
    )
    actor.add_argument(
        "--index", type=Path, default=None, help="simulator: transition index folder"
    )
    actor.set_defaults(run=_actor)

    client = argparse.ArgumentParser(add_help=False)
    client.add_argument("--nats", default=None, help="NATS URL (env WORLDLINE_NATS)")
    client.add_argument(
        "--world",
        default=os.environ.get("WORLDLINE_WORLD", "default"),
        help="world name (env WORLDLINE_WORLD)",
    )
    client.add_argument(
        "--agent", default=default_agent(), help="agent name (env WORLDLINE_AGENT)"
    )
    client.add_argument(
        "--creds",
        default=None,
        help=f"this agent's credentials file from `worldline creds` (env {CREDS_ENV})",
    )
    client.add_argument("--json", action="store_true", help="machine-readable output")
    client.add_argument("--timeout", type=float, default=10.0, help="seconds to wait")

    add = verbs.add_parser("add", parents=[client], help="seed a belief (weak prior)")
    add.add_argument("text")
    add.add_argument("--confidence", type=_confidence, default=None)
    add.add_argument("--type", choices=BELIEF_TYPES, default="claim")
    add.add_argument("--id", default=None, help="belief id (default: generated)")

    get = verbs.add_parser("get", parents=[client], help="one belief by id")
    get.add_argument("id")
    get.add_argument("--at", type=_instant, default=None, help="read at this clock")

    lst = verbs.add_parser("list", parents=[client], help="the active set of beliefs")
    lst.add_argument("--type", choices=BELIEF_TYPES, default=None)
    lst.add_argument("--limit", type=int, default=1000)
    lst.add_argument("--label", default=None)
    lst.add_argument(
        "--flag", choices=["stale", "stable", "contradicted", "uncertain"], default=None
    )
    lst.add_argument(
        "--status", choices=["active", "retracted", "resolved", "any"], default="active"
    )
    lst.add_argument("--at", type=_instant, default=None, help="read at this clock")

    ev = verbs.add_parser(
        "evidence", parents=[client], help="attach one piece of evidence to a belief"
    )
    ev.add_argument("id", help="belief id")
    ev.add_argument("--direction", choices=DIRECTIONS, required=True)
    ev.add_argument("--kind", choices=EVIDENCE_KINDS, required=True)
    ev.add_argument("--source", required=True, help="who or what it came from")
    ev.add_argument("--text", default="")
    ev.add_argument("--at", type=_instant, default=None, help="when it was observed")

    after = verbs.add_parser(
        "after", parents=[client], help="hand this agent's turn output to the extractor"
    )
    after.add_argument("file", help="a text file, or - for standard input")
    after.add_argument("--source", default="", help=argparse.SUPPRESS)

    before = verbs.add_parser(
        "before", parents=[client], help="the worldview to read before a move"
    )
    before.add_argument("query", help="the move about to be made")
    before.add_argument("--at", type=_instant, default=None, help="evaluate at")

    watch = verbs.add_parser(
        "watch", parents=[client], help="stream this agent's view as it changes"
    )
    watch.add_argument("of", nargs="?", default=None, help="agent (default: --agent)")

    trace = verbs.add_parser("trace", parents=[client], help="a belief's provenance")
    trace.add_argument("id")

    read = verbs.add_parser(
        "read", parents=[client], help="the whole world model (beliefs, gaps, ...)"
    )
    read.add_argument("--at", type=_instant, default=None, help="read at this clock")

    for name, what in (("retract", "tombstone a belief"), ("resolve", "close a gap")):
        closing = verbs.add_parser(name, parents=[client], help=what)
        closing.add_argument("id")
        closing.add_argument("--reason", default="")

    relate = verbs.add_parser(
        "relate", parents=[client], help="a typed edge between two beliefs"
    )
    relate.add_argument("source", help="belief id")
    relate.add_argument("type", choices=EDGE_TYPES)
    relate.add_argument("target", help="belief id")
    relate.add_argument("--confidence", type=_confidence, default=0.8)

    trust = verbs.add_parser(
        "trust", parents=[client], help="scale a source's (or agent:NAME's) weight"
    )
    trust.add_argument("source")
    trust.add_argument("value", type=float)
    trust.add_argument("--lock", action="store_true")

    observe = verbs.add_parser(
        "observe", parents=[client], help="hand an artifact to the extractor"
    )
    observe.add_argument("file", help="a text file, or - for standard input")
    observe.add_argument("--source", default="", help="where the artifact came from")

    world = verbs.add_parser("world", help="declare a world, or show it")
    world_verbs = world.add_subparsers(dest="world_verb", required=True, metavar="VERB")
    load = world_verbs.add_parser(
        "load", parents=[client], help="declare the world from a TOML file"
    )
    load.add_argument("file")
    show = world_verbs.add_parser(
        "show", parents=[client], help="the declaration, entities and edges"
    )
    show.add_argument("--type", default=None, help="only entities of this type")

    write = verbs.add_parser(
        "write", parents=[client], help="write one field (authority + versions)"
    )
    write.add_argument("entity", help="type:name, e.g. project:soteria")
    write.add_argument("field")
    write.add_argument("value", help="JSON scalar or list, else taken as text")
    write.add_argument(
        "--expect-version",
        type=int,
        default=None,
        help="apply only if the field is at this version (0: must not exist)",
    )

    box = verbs.add_parser("inbox", parents=[client], help="this agent's inbox")
    box.add_argument("--ack", action="store_true", help="acknowledge what is shown")
    box.add_argument("--wait", type=float, default=0.5, help="seconds to wait")
    box.add_argument("--limit", type=int, default=100)

    view = verbs.add_parser("view", parents=[client], help="an agent's startup view")
    view.add_argument("of", nargs="?", default=None, help="agent (default: --agent)")

    export = verbs.add_parser(
        "export", parents=[client], help="the op log as JSON lines (replayable)"
    )
    export.add_argument("--out", default=None, help="file (default: stdout)")

    rep = verbs.add_parser(
        "replay",
        parents=[client],
        help="rebuild state from the log in a fresh LMDB; print state-hash",
    )
    rep.add_argument(
        "--data", type=Path, default=None, help="fresh folder (default: temp)"
    )
    rep.add_argument(
        "--from", dest="source", default=None, help="an export file instead of the bus"
    )
    rep.set_defaults(run=_replay)

    sim = verbs.add_parser("sim", help="the grounded simulator")
    sim_verbs = sim.add_subparsers(dest="sim_verb", required=True, metavar="VERB")
    index = sim_verbs.add_parser(
        "index", help="pair real transitions from traces into a read-only index"
    )
    index.add_argument("traces", nargs="+", type=Path, help="trace files")
    index.add_argument("--out", type=Path, required=True, help="a new folder")
    index.add_argument(
        "--held-out", type=float, default=0.2, help="share of lineages held out"
    )
    index.add_argument("--json", action="store_true")
    index.set_defaults(run=_sim_index)
    run_plan = sim_verbs.add_parser(
        "run", help="run or resume an evaluation plan (TOML): one rollout per task"
    )
    run_plan.add_argument("plan", type=Path)
    run_plan.add_argument("--json", action="store_true")
    run_plan.set_defaults(run=_sim_run)
    session = sim_verbs.add_parser(
        "session",
        parents=[client],
        help="a world-model session: assistant messages on stdin, replies out",
    )
    session.add_argument("task")
    session.add_argument("--context", default="")
    session.add_argument("--exclude", nargs="*", default=[], help="lineages to skip")

    status = verbs.add_parser(
        "status", help="actors, consumer lag, rates, dead letters, store sizes"
    )
    status.add_argument("--nats", default=None, help="NATS URL (env WORLDLINE_NATS)")
    status.add_argument(
        "--creds",
        default=None,
        help="the operator's credentials file from `worldline creds` (operator.creds; "
        f"env {CREDS_ENV})",
    )
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--timeout", type=float, default=10.0, help="seconds to wait")
    status.set_defaults(run=_status)

    creds = verbs.add_parser(
        "creds",
        help="per-agent NATS users from world declarations: auth.conf + .creds files",
    )
    creds.add_argument("files", nargs="+", type=Path, help="world declarations (TOML)")
    creds.add_argument(
        "--out", type=Path, required=True, help="folder for auth.conf and .creds files"
    )
    creds.add_argument(
        "--rotate", action="store_true", help="issue new keys (default: keep them)"
    )
    creds.add_argument("--json", action="store_true", help="machine-readable output")
    creds.set_defaults(run=_creds)

    presence = verbs.add_parser(
        "presence", parents=[client], help="set ephemeral status (expires)"
    )
    presence.add_argument("status")
    presence.add_argument("--task", default="")

    mcp = verbs.add_parser(
        "mcp",
        parents=[client],
        help="serve this agent's world model as MCP tools over stdio",
    )
    mcp.set_defaults(run=_mcp)
    return root


def _fail(code: int, message: str) -> NoReturn:
    sys.stderr.write(f"worldline: {message}\n")
    raise SystemExit(code)


def _run(args: argparse.Namespace, verb_name: str) -> int:
    """Run the verb; an error raised inside a task group comes out unwrapped, so it
    maps to its exit code instead of a traceback."""
    try:
        _use_creds(args)
        if verb_name in CLIENT_VERBS:
            if not args.verbose:  # the SDK names what it hears (one line, below)
                logging.getLogger("worldline.bus").setLevel(logging.ERROR)
            verb = CLIENT_VERBS[verb_name](args)
            anyio.run(_client, args, verb, backend="asyncio")
            return EXIT_OK
        code: int = args.run(args)
        return code
    except BaseExceptionGroup as group:
        raise _leaf(group) from group


def _bus_error(exc: nats.errors.Error, args: argparse.Namespace, verb: str) -> str:
    """One line for a nats-py error that reached ``main``: the cause and the fix."""
    url = getattr(args, "nats", None) or default_url()
    try:
        with bus_errors(url, f"`worldline {verb}`"):
            raise exc
    except WorldlineError as mapped:
        return str(mapped)
    except nats.errors.Error:
        pass
    return (
        f"NATS at {url} failed `worldline {verb}`: {exc or type(exc).__name__}; "
        "check the server and `worldline status`, then retry"
    )


def _leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first error in a (nested) exception group that is not itself a group."""
    first: BaseException = group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``worldline`` console script."""
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="worldline %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("nats").setLevel(logging.CRITICAL)
    verb_name = args.verb
    if verb_name == "world":
        verb_name = f"world.{args.world_verb}"
    if verb_name == "sim":
        verb_name = f"sim.{args.sim_verb}"
    try:
        return _run(args, verb_name)
    except PermissionDenied as exc:  # before OSError's kin: it is a PermissionError
        _fail(EXIT_USAGE, str(exc))
    except BadRequest as exc:
        _fail(EXIT_USAGE, str(exc))
    except SimulationError as exc:
        _fail(EXIT_REJECTED, f"simulator refused: {exc}")
    except Rejected as exc:
        detail = ""
        if exc.current_version is not None:
            detail = (
                f" (current version {exc.current_version}, value {exc.current_value!r})"
            )
        _fail(EXIT_REJECTED, f"rejected: {exc.reason}{detail}")
    except (RuntimeBusUnavailable, NotApplied) as exc:  # the SDK's BusUnavailable too
        _fail(EXIT_UNREACHABLE, str(exc))
    except ServerError as exc:  # an actor failed answering: worldline's side
        _fail(EXIT_FAILED, str(exc))
    except ActorError as exc:  # the server, a store or a declaration: not the input
        _fail(EXIT_FAILED, str(exc))
    except nats.errors.Error as exc:  # one the SDK did not translate: still one line
        _fail(EXIT_UNREACHABLE, _bus_error(exc, args, verb_name))
    except ValueError as exc:
        _fail(EXIT_USAGE, str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`worldline list | head`): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())

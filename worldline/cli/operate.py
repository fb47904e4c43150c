"""The operator's verbs: ``up`` (an embedded nats-server and all five actors),
``actor`` (one actor alone), ``status``, ``creds``, ``export`` and ``replay``."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio
import msgspec

from worldline.actors.runtime.auth import CREDS_ENV
from worldline.actors.runtime.declare import REPLICAS_ENV
from worldline.actors.runtime.patience import CONNECT_WAIT_ENV
from worldline.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    LOCK_FILE,
    URL_FILE,
    default_url,
    emit,
)
from worldline.cli.notices import discovery_hint, notice, reach
from worldline.cli.progress import Progress
from worldline.cli.server_parts import require_server
from worldline.sdk.client import World, connect
from worldline.sdk.declaration import load_declaration
from worldline.sdk.errors import BadRequest, BusUnavailable
from worldline.sdk.export import ExportRecord, RawRecord

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable, Coroutine, Iterator

    from anyio.abc import TaskStatus

    from worldline.actors.runtime.embedded import EmbeddedNats
    from worldline.actors.runtime.lock import FolderLock
    from worldline.ops.replay import ReplayResult
    from worldline.protocols.messages import (
        StateHashReply,
    )
    from worldline.protocols.world import WorldDecl

__all__ = ["VERBS", "run_actor", "run_creds", "run_replay", "run_status", "run_up"]


async def _serve_until_signal(
    start: Callable[..., Coroutine[Any, Any, None]],
    on_ready: Callable[[], Awaitable[None]],
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                async for _ in signals:
                    break
                tg.cancel_scope.cancel()

            # Heard while starting too: an actor waiting for its server (the first
            # connect, JetStream not ready) stops at once on SIGTERM or Ctrl-C.
            tg.start_soon(stop_on_signal)
            await tg.start(start)
            # A long-lived server from here on: what starting built (modules, specs,
            # caches) leaves the collector's generations, so a full collection
            # scans only what the actors make while they run (about 25 ms -> 1.4 ms
            # a full collection in a 500-agent crew's materializer).
            gc.freeze()
            await on_ready()


def _stream_replicas(args: argparse.Namespace) -> None:
    """``--stream-replicas N`` holds for every actor this process runs (the runtime
    reads it from the environment when it declares streams and buckets)."""
    if args.stream_replicas is not None:
        os.environ[REPLICAS_ENV] = str(args.stream_replicas)


def _connect_wait(args: argparse.Namespace) -> None:
    """``--connect-wait SECONDS`` holds for every actor this process runs (the
    runtime reads it from the environment when it first connects)."""
    if args.connect_wait is not None:
        os.environ[CONNECT_WAIT_ENV] = f"{args.connect_wait:g}"


def _metrics(args: argparse.Namespace) -> dict[str, Any]:
    """``run_actors`` options: one registry, served when ``--metrics-port`` is set."""
    from worldline.actors.runtime.metrics import Registry

    return {
        "metrics": Registry(),
        "metrics_port": args.metrics_port,
        "metrics_host": args.metrics_host,
    }


def _announce_metrics(options: dict[str, Any]) -> None:
    port = options["metrics"].port
    if port is not None:
        print(f"metrics: http://{options['metrics_host']}:{port}/metrics", flush=True)


def run_up(args: argparse.Namespace) -> int:
    # The server side loads here, never for --help or a client verb.
    require_server("worldline up")
    from worldline.actors.runtime.lock import FolderLock

    _stream_replicas(args)
    _connect_wait(args)
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
    from worldline.actors.belief_model import contextual
    from worldline.actors.belief_model.embedding import ENV_EMBEDDER
    from worldline.actors.registry import ACTORS, build
    from worldline.actors.runtime.embedded import EmbeddedNats, keep_writable
    from worldline.actors.runtime.supervise import run_actors

    # With the semantic extra, the contextual channel unless WORLDLINE_EMBEDDER says
    # otherwise (docs/worldview.md, "The contextual channel").
    chosen = contextual.default_for_up(os.environ, sim_index=bool(args.sim_index))
    if chosen is not None:
        os.environ[ENV_EMBEDDER] = chosen
        notice(
            f"embedder: {chosen} ({ENV_EMBEDDER}=hashing to turn it off)",
            args.log_format,
        )
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
            notice(reach(args.server_config), args.log_format)
            hint = discovery_hint(data, url)
            if hint:
                notice(hint, args.log_format)

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


def run_actor(args: argparse.Namespace) -> int:
    require_server("worldline actor")
    from worldline.actors.registry import build
    from worldline.actors.runtime.supervise import run_actors

    _stream_replicas(args)
    _connect_wait(args)
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


def _export(args: argparse.Namespace) -> Callable[[World], Awaitable[None]]:
    async def run(world: World) -> None:
        # Every op the log holds, each on its line as it arrives (nothing held in
        # memory): one that does not decode is kept as its bytes (a backup that
        # silently drops nothing).
        raw: list[int] = []
        count = 0
        progress = Progress(f"export {world.world}")  # on a terminal only
        with contextlib.ExitStack() as stack:
            out: BinaryIO
            if args.out:
                try:
                    out = stack.enter_context(open(args.out, "wb"))  # noqa: ASYNC230
                except OSError as exc:
                    raise BadRequest(f"cannot write {args.out}: {exc}") from exc
            else:
                out = sys.stdout.buffer
            async for record in world.backup():
                out.write(msgspec.json.encode(record) + b"\n")
                count += 1
                progress.advance()
                if isinstance(record, RawRecord):
                    raw.append(record.seq)
            out.flush()
        progress.close()
        if args.out:
            sys.stderr.write(f"exported {count} ops to {args.out}\n")
        if raw:
            shown = ", ".join(map(str, raw[:10])) + (", ..." if len(raw) > 10 else "")
            sys.stderr.write(
                f"warning: {len(raw)} of {count} ops do not decode (seq "
                f'{shown}); kept as their bytes ("payload"), as the actors '
                "dead-lettered them; replay does the same\n"
            )

    return run


def run_status(args: argparse.Namespace) -> int:
    """Print every actor instance's lag, rates, dead letters and store size."""
    from worldline.actors.runtime.consume import utcnow
    from worldline.ops.status import gather as gather_status
    from worldline.ops.status_table import render as render_status

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
    emit(args, report, render_status(report))
    # A stalled actor (a batch failing to commit) needs an operator: say so.
    stalled = any(i.state == "stalled" for i in report.instances)
    return EXIT_FAILED if stalled else EXIT_OK


def run_creds(args: argparse.Namespace) -> int:
    """Write auth.conf and one credentials file per agent, actor and operator."""
    from worldline.ops.creds import write_credentials

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
    emit(
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


def run_replay(args: argparse.Namespace) -> int:
    """Rebuild from an export file, or from the bus, and compare with the live hash."""
    if args.data is None:
        with tempfile.TemporaryDirectory(prefix="worldline-replay-") as tmp:
            return _replay_into(args, Path(tmp) / "state")
    return _replay_into(args, args.data)


def _replay_into(args: argparse.Namespace, data: Path) -> int:
    require_server("worldline replay")
    from worldline.ops.replay import read_export, replay

    if args.source:
        try:
            with open(args.source, "rb") as f:
                records = read_export(f)
        except (OSError, msgspec.MsgspecError) as exc:
            raise BadRequest(f"cannot read export {args.source}: {exc}") from exc
        result = replay(_applying(records, args.world), data, args.world)
        live = before = None
    else:
        result, live, before = anyio.run(
            _replay_from_bus, args, data, backend="asyncio"
        )
    human = [f"state-hash: {result.hash}", f"ops: {result.ops}"]
    if result.raw:
        human.append(f"undecodable: {result.raw} (dead-lettered, as the actors did)")
    # ``applied``: the last op the world's materializer applied or rejected, on both
    # sides (an op dead-lettered at the end of the log moves neither).
    matches = live is None or (
        live.hash == result.hash and live.applied == result.applied
    )
    # Still applying, or written to after the log was read: the live world where
    # it stood before the log was read is compared with the replay at that op too.
    then = (
        not matches
        and before is not None
        and before.applied > 0
        and (before.hash, before.applied) == (result.hash_at, result.applied_at)
    )
    behind = live is not None and live.applied < result.applied
    moved = live is not None and live.applied > result.applied
    if live is not None:
        human.append(f"live-hash: {live.hash} (applied through op {live.applied})")
        human.append("match: yes" if matches or then else "match: NO")
    if then and before is not None:
        human.append(
            f"(as the world stood when the log was read: op {before.applied}, "
            f"hash {before.hash})"
        )
    elif behind and live is not None:
        human.append(
            f"the live actors are behind: the log's ops through {result.applied} "
            f"apply, the live world has applied through {live.applied} "
            f"after {REPLAY_CATCH_UP:g}s; run replay again once they catch up"
        )
    elif moved and live is not None:
        human.append(
            f"the live world has moved on: it has applied through op "
            f"{live.applied}, ops written after the replay read the log (through "
            f"op {result.applied}); a replay compares a quiet world: run it again"
        )
    emit(
        args,
        {
            "state_hash": result.hash,
            "ops": result.ops,
            "undecodable": result.raw,
            "live_hash": None if live is None else live.hash,
            "match": matches or then,
            "behind": behind,
            "moved_on": moved,
        },
        "\n".join(human),
    )
    return EXIT_OK if matches or then else EXIT_FAILED


async def _replay_from_bus(
    args: argparse.Namespace, data: Path
) -> tuple[ReplayResult, StateHashReply, StateHashReply]:
    from worldline.ops.replay import replay

    async with connect(
        args.nats or default_url(),
        world=args.world,
        agent=args.agent,
        request_timeout=args.timeout,
    ) as world:
        # Where the live world stands before the log is read: if it is written
        # to meanwhile, the replay is compared there too (see _replay_into).
        before = await world.state_hash()
        progress = Progress(f"replay {world.world}: reading the log")
        records = []
        async for record in world.backup():
            records.append(record)
            progress.advance()
        progress.close()
        rebuild = partial(
            replay, _applying(records, args.world), data, args.world, at=before.applied
        )
        result = await anyio.to_thread.run_sync(rebuild)
        live = await _live_at(world, result.applied)
    return result, live, before


REPLAY_CATCH_UP = 30.0  # seconds a replay waits for the live actors to catch up


async def _live_at(world: World, applied: int) -> StateHashReply:
    """The live state once the world's materializer has applied as far as the
    replay did, or after :data:`REPLAY_CATCH_UP` seconds: the log may hold ops the
    actors are still reading (an agent's MiB-sized junk, say), and a world compared
    before they are applied reads as another state."""
    deadline = anyio.current_time() + REPLAY_CATCH_UP
    while True:
        live = await world.state_hash()
        if live.applied >= applied or anyio.current_time() >= deadline:
            return live
        await anyio.sleep(0.2)


def _applying(
    records: list[ExportRecord | RawRecord], world: str
) -> Iterator[ExportRecord | RawRecord]:
    """``records``, drawing how many are applied (on a terminal only)."""
    progress = Progress(f"replay {world}: applying", total=len(records))
    for record in records:
        yield record
        progress.advance()
    progress.close()


VERBS: dict[str, Callable[[argparse.Namespace], Callable[[World], Any]]] = {
    "export": _export,
}

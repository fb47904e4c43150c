"""The operator's part of the CLI's parser: ``up`` and ``actor`` (which run actors),
``status`` and ``creds``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from worldline.actors.runtime.auth import CREDS_ENV
from worldline.actors.runtime.declare import MAX_REPLICAS, REPLICAS_ENV
from worldline.actors.runtime.patience import CONNECT_WAIT, CONNECT_WAIT_ENV
from worldline.cli import operate
from worldline.cli.common import default_data
from worldline.cli.manners import Parser
from worldline.protocols.subjects import ACTOR_NAMES

if TYPE_CHECKING:
    from typing import Any

__all__ = ["add_admin_verbs", "add_server_verbs"]


def _replicas(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_REPLICAS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a replica count: use 1 to {MAX_REPLICAS}, at most the "
            "number of JetStream servers in the cluster"
        )
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds (0 or more)"
        )
    return value


def add_server_verbs(verbs: Any) -> None:
    """``up`` and ``actor``."""
    server = Parser(add_help=False)
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
        "--connect-wait",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="how long each actor keeps trying its first connect while no NATS "
        f"answers, retrying with backoff (env {CONNECT_WAIT_ENV}; default "
        f"{CONNECT_WAIT:g}; 0: one attempt)",
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
        "--log-format",
        choices=["text", "json"],
        default=None,
        help="log lines as text (time, level, actor) or JSON objects (env "
        "WORLDLINE_LOG_FORMAT; default text)",
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
    up.set_defaults(run=operate.run_up)

    actor = verbs.add_parser("actor", parents=[server], help="run one actor alone")
    actor.add_argument("name", choices=list(ACTOR_NAMES))
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
    actor.set_defaults(run=operate.run_actor)


def add_admin_verbs(verbs: Any) -> None:
    """``status`` and ``creds``."""
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
    status.set_defaults(run=operate.run_status)

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
    creds.set_defaults(run=operate.run_creds)

"""The CLI's argument parser: every verb, its options, and the function that runs it
(``docs/cli.md`` is generated from it: ``python -m worldline.cli_reference``)."""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from worldline.actors.runtime.auth import CREDS_ENV
from worldline.cli import calibration as calibration_verb
from worldline.cli import completion, operate
from worldline.cli import contradictions as contradictions_verb
from worldline.cli import load as load_verb
from worldline.cli import mcp as mcp_verb
from worldline.cli import sim as sim_verb
from worldline.cli import sources as sources_verb
from worldline.cli.common import default_agent
from worldline.cli.manners import Parser, describe
from worldline.cli.parsing_ops import add_admin_verbs, add_server_verbs
from worldline.protocols.beliefs import DIRECTIONS, EDGE_TYPES, EVIDENCE_KINDS
from worldline.protocols.messages import BELIEF_TYPES
from worldline.sdk.batch import CHUNK

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["parser"]


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is outside 0-1")
    return value


def _count(low: int, high: int | None) -> Callable[[str], int]:
    """An argument type: a whole number from ``low`` to ``high`` (None: no bound)."""
    bounds = f"{low} to {high}" if high is not None else f"{low} or more"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number ({bounds})"
            ) from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text} is outside {bounds}")
        return value

    return parse


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO time like 2026-03-01T12:00:00+00:00"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


AS_OF = "as the world had been told by this time (recorded time)"


def parser() -> argparse.ArgumentParser:
    """The CLI's argument parser (also the source of the CLI reference)."""
    from worldline import __version__

    root = Parser(
        prog="worldline",
        description="A shared, evidence-kept world model for crews of AI agents. "
        "The client options (--nats, --world, --agent, --creds, --json, --timeout) "
        "go before the verb or after it.",
    )
    root.add_argument("-v", "--verbose", action="store_true", help="log more")
    root.add_argument("--version", action="version", version=f"worldline {__version__}")
    verbs = root.add_subparsers(dest="verb", required=True, metavar="VERB")

    add_server_verbs(verbs)

    client = Parser(add_help=False)
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
    client.add_argument(
        "--require-declared",
        action="store_true",
        help="refuse to write to a world no declaration names (env "
        "WORLDLINE_REQUIRE_DECLARED=1); without it, a new world named like a known "
        "one is only warned of",
    )
    client.add_argument("--json", action="store_true", help="machine-readable output")
    client.add_argument("--timeout", type=float, default=10.0, help="seconds to wait")

    add = verbs.add_parser("add", parents=[client], help="seed a belief (weak prior)")
    add.add_argument("text")
    add.add_argument("--confidence", type=_confidence, default=None)
    add.add_argument("--type", choices=BELIEF_TYPES, default="claim")
    add.add_argument("--id", default=None, help="belief id (default: generated)")
    add.add_argument(
        "--slot",
        default=None,
        help="the question it answers, when it is one of several rival answers "
        "(evidence for one then counts against the others)",
    )
    add.add_argument(
        "--label",
        default=None,
        help="a category set by hand, once (load-bearing, limiting-belief: 1-64 "
        "letters, digits and _.:/-); list --label filters by it",
    )

    get = verbs.add_parser("get", parents=[client], help="one belief by id")
    get.add_argument("id")
    get.add_argument("--at", type=_instant, default=None, help="read at this clock")
    get.add_argument("--as-of", type=_instant, default=None, help=AS_OF)

    lst = verbs.add_parser(
        "list",
        parents=[client],
        help="the active set of beliefs",
        description="Beliefs oldest first, a page at a time: when more follow, the "
        "next page's --cursor is printed on stderr.",
    )
    lst.add_argument("--type", choices=BELIEF_TYPES, default=None)
    lst.add_argument(
        "--limit",
        type=_count(1, None),
        default=1000,
        help="beliefs per page (with --all: per request, up to 10,000)",
    )
    lst.add_argument(
        "--label",
        default=None,
        help="only beliefs with this label (set on add, or derived: load-bearing, "
        "risky-assumption)",
    )
    lst.add_argument(
        "--flag", choices=["stale", "stable", "contradicted", "uncertain"], default=None
    )
    lst.add_argument(
        "--status", choices=["active", "retracted", "resolved", "any"], default="active"
    )
    lst.add_argument("--at", type=_instant, default=None, help="read at this clock")
    lst.add_argument("--as-of", type=_instant, default=None, help=AS_OF)
    lst.add_argument(
        "--cursor",
        default="",
        help="start where the previous page ended (the cursor it printed)",
    )
    lst.add_argument(
        "--all",
        action="store_true",
        help="follow the cursors to the end, printing each page as it arrives",
    )

    search = verbs.add_parser(
        "search",
        parents=[client],
        help="ranked beliefs for a query, with each channel's score and the trace",
        description="The active beliefs that best answer QUERY, best first: each hit "
        "shows its rank, fused score, each channel's score (lexical, semantic, "
        "prior), confidence, id, text and trace. Ranks count from the first hit "
        "printed. When more follow, the next page's --cursor is printed on stderr "
        "(with --json, it is the page's next_cursor).",
    )
    search.add_argument("query", help="what to look for")
    search.add_argument(
        "--limit",
        type=_count(1, 200),
        default=10,
        help="hits per page, 1-200 (with --all: per request)",
    )
    search.add_argument("--type", choices=BELIEF_TYPES, default=None)
    search.add_argument("--at", type=_instant, default=None, help="read at this clock")
    search.add_argument("--as-of", type=_instant, default=None, help=AS_OF)
    search.add_argument(
        "--cursor",
        default="",
        help="start where the previous page ended (its next_cursor)",
    )
    search.add_argument(
        "--all",
        action="store_true",
        help="follow the cursors to the last hit (--json: one array of every hit)",
    )

    ev = verbs.add_parser(
        "evidence", parents=[client], help="attach one piece of evidence to a belief"
    )
    ev.add_argument("id", help="belief id (with --edge: belief edge id)")
    ev.add_argument(
        "--edge",
        action="store_true",
        help="the id names a belief edge: evidence that the relation holds "
        "(supports) or not (refutes)",
    )
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
    before.add_argument("--as-of", type=_instant, default=None, help=AS_OF)
    before.add_argument(
        "--forecast",
        action="store_true",
        help="under the moves, the real outcomes the simulator's index holds for the "
        "top 3 (or no grounding)",
    )

    watch = verbs.add_parser(
        "watch", parents=[client], help="stream this agent's view as it changes"
    )
    watch.add_argument("of", nargs="?", default=None, help="agent (default: --agent)")

    trace = verbs.add_parser("trace", parents=[client], help="a belief's provenance")
    trace.add_argument("id")
    trace.add_argument("--as-of", type=_instant, default=None, help=AS_OF)

    read = verbs.add_parser(
        "read", parents=[client], help="the whole world model (beliefs, gaps, ...)"
    )
    read.add_argument("--at", type=_instant, default=None, help="read at this clock")
    read.add_argument("--as-of", type=_instant, default=None, help=AS_OF)

    for name, what in (
        ("retract", "tombstone a belief"),
        ("resolve", "close a gap, or a claim as true or false"),
    ):
        closing = verbs.add_parser(name, parents=[client], help=what)
        closing.add_argument("id")
        closing.add_argument("--reason", default="")
    calibration_verb.add_resolve_options(closing)

    relate = verbs.add_parser(
        "relate", parents=[client], help="a typed edge between two beliefs"
    )
    relate.add_argument("source", help="belief id")
    relate.add_argument("type", choices=EDGE_TYPES)
    relate.add_argument("target", help="belief id")
    relate.add_argument("--confidence", type=_confidence, default=0.8)
    relate.add_argument(
        "--id",
        default=None,
        help="the edge's id (default: derived from source, type and target, so "
        "relating them again names the same edge); an id already linked re-states "
        "that edge, which only its author, the operator, the world's admins and "
        "[trust] close agents may",
    )
    unrelate = verbs.add_parser(
        "unrelate", parents=[client], help="remove a belief edge (still traceable)"
    )
    unrelate.add_argument(
        "edge_id", help="the edge's id (`relate` prints it; `trace BELIEF` lists them)"
    )

    trust = verbs.add_parser(
        "trust", parents=[client], help="scale a source's (or agent:NAME's) weight"
    )
    trust.add_argument("source")
    trust.add_argument("value", type=float)
    trust.add_argument("--lock", action="store_true")
    sources_verb.add_parsers(verbs, client)
    contradictions_verb.add_parsers(verbs, client, _instant)
    calibration_verb.add_parsers(verbs, client)

    bulk = verbs.add_parser(
        "load",
        parents=[client],
        help="many adds and evidence items from JSON lines, in chunks",
        description='Each line: {"add": {"text", "confidence"?, "type"?, "id"?, '
        '"slot"?}} or '
        '{"evidence": {"belief_id", "direction", "kind", "source", "text"?}}. Every '
        "line is checked first: a bad one refuses the file (exit 2) before anything "
        "is published. Exit 3 if fusion refused any item.",
    )
    bulk.add_argument("file", help="a JSON-lines file, or - for standard input")
    bulk.add_argument(
        "--chunk",
        type=_count(1, 4000),
        default=CHUNK,
        help=f"ops published together before one wait (default {CHUNK})",
    )
    bulk.set_defaults(run=load_verb.run)

    observe = verbs.add_parser(
        "observe", parents=[client], help="hand an artifact to the extractor"
    )
    observe.add_argument("file", help="a text file, or - for standard input")
    observe.add_argument("--source", default="", help="where the artifact came from")
    context = "what came just before it (the previous turn), read beside its statements"
    observe.add_argument("--context", default="", help=context)
    said = "when the artifact says it happened (ISO time; default: now)"
    observe.add_argument("--observed-at", type=_instant, default=None, help=said)

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
    rep.set_defaults(run=operate.run_replay)

    sim = verbs.add_parser("sim", help="the grounded simulator")
    sim_verbs = sim.add_subparsers(dest="sim_verb", required=True, metavar="VERB")
    index = sim_verbs.add_parser(
        "index", help="pair real transitions from traces into a read-only index"
    )
    index.add_argument("traces", nargs="+", type=Path, help="trace files")
    index.add_argument("--out", type=Path, required=True, help="a new folder")
    index.add_argument(
        "--held-out",
        type=float,
        default=0.2,
        help="fraction in [0, 1) of lineage groups held out (split by group: all "
        "trials of a task together; a group is held out when a hash of its name "
        "falls below it, so the share of transitions varies)",
    )
    index.add_argument("--json", action="store_true")
    index.set_defaults(run=sim_verb.run_index)
    run_plan = sim_verbs.add_parser(
        "run", help="run or resume an evaluation plan (TOML): one rollout per task"
    )
    run_plan.add_argument("plan", type=Path)
    run_plan.add_argument("--json", action="store_true")
    run_plan.set_defaults(run=sim_verb.run_evaluation)
    session = sim_verbs.add_parser(
        "session",
        parents=[client],
        help="a world-model session: assistant messages on stdin, replies out",
    )
    session.add_argument("task")
    session.add_argument("--context", default="")
    session.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="LINEAGE",
        help="a lineage to keep out of retrieval (repeat for more)",
    )
    session.add_argument(
        "--best-guess",
        action="store_true",
        help="below the similarity floor, answer with the nearest real transition "
        "anyway, flagged (stderr; --json: grounded false) instead of refusing "
        "no_grounding",
    )

    forecast = verbs.add_parser(
        "forecast",
        parents=[client],
        help="what really followed actions like a move (the simulator's index)",
        description="The distinct real observations of the nearest transitions after "
        "actions like MOVE (written name(arguments): a tool call; else a message), "
        "each with how many transitions support it, their lineages and the best "
        "similarity; 'no grounding' (exit 0) when none scores above the floor. "
        "Needs a simulator serving an index (worldline up --sim-index DIR).",
    )
    forecast.add_argument("move", help="the action: a message, or name(arguments)")
    forecast.add_argument(
        "--context", default="", help="the conversation before the move"
    )
    forecast.add_argument(
        "--k", type=_count(1, 10), default=5, help="neighbours retrieved, 1-10"
    )
    forecast.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="LINEAGE",
        help="a lineage (or group) to keep out of retrieval (repeat for more)",
    )
    forecast.add_argument(
        "--record",
        action="store_true",
        help="put it on record: one claim per outcome, settled later with "
        "`worldline resolve ID --settle-slot` (scored by `worldline calibration`)",
    )

    add_admin_verbs(verbs)

    presence = verbs.add_parser(
        "presence", parents=[client], help="set ephemeral status (expires)"
    )
    presence.add_argument("status")
    presence.add_argument("--task", default="")

    mcp = verbs.add_parser(
        "mcp",
        parents=[client],
        help="serve this agent's world model as MCP tools (stdio, or --http)",
    )
    mcp_verb.add_arguments(mcp)
    mcp.set_defaults(run=mcp_verb.run_mcp)
    console = verbs.add_parser(
        "console",
        parents=[client],
        help="serve the web console and MCP over HTTP (as `mcp --http`; "
        "docs/console.md)",
    )
    mcp_verb.add_arguments(console, http=True)
    console.set_defaults(run=mcp_verb.run_mcp, http=True)

    who = verbs.add_parser(
        "who",
        parents=[client],
        help="who is present in the world (presence set in the last two minutes)",
        description="Each agent whose presence (`worldline presence STATUS`) has not "
        "expired: its status, task and when it was set; only the named agents when "
        "AGENT is given.",
    )
    who.add_argument("agents", nargs="*", metavar="AGENT", help="only these agents")

    shell = verbs.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or fish)",
        description="Print a completion script for SHELL on stdout: "
        '`eval "$(worldline completion bash)"` in ~/.bashrc, '
        '`eval "$(worldline completion zsh)"` in ~/.zshrc, or '
        "`worldline completion fish > ~/.config/fish/completions/worldline.fish`.",
    )
    shell.add_argument("shell", choices=sorted(completion.SHELLS))
    shell.set_defaults(run=completion.run)
    describe(root)
    return root

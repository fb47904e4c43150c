"""The published contract: an AsyncAPI 3.0 document of every subject an agent (or an
operator's tool) meets, and a JSON Schema of every message, both generated from this
package, so an agent in any language can speak to the bus.

Subjects come from the builders in :mod:`worldline.protocols.subjects` (called with
``{placeholder}`` tokens), schemas from the msgspec Structs via
``msgspec.json.schema_components``. The files live in ``docs/contract/``;
``python -m worldline.protocols.contract docs/contract`` rewrites them and
``tests/test_contract.py`` fails when they differ from the code.

On the wire every payload is **msgpack**: the schemas describe the msgpack map (field
names as keys, ``kind`` the message's tag), read as JSON Schema with two encodings
told apart: a ``bytes`` field (``contentEncoding: base64`` in the schema) is a msgpack
``bin``, and a ``date-time`` string is written as a msgpack timestamp (extension type
-1; an RFC 3339 string is accepted too).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final

import msgspec

from worldline.protocols import messages as m
from worldline.protocols import subjects as s
from worldline.protocols.status import Heartbeat

__all__ = [
    "ASYNCAPI_FILE",
    "RPC",
    "SCHEMA_FILE",
    "asyncapi",
    "message_schemas",
    "render",
]

ASYNCAPI_FILE: Final = "asyncapi.json"
SCHEMA_FILE: Final = "messages.schema.json"
_REF: Final = "#/components/schemas/{name}"

# Each request/reply verb: what it asks with, what answers, and who serves it.
RPC: Final[dict[str, tuple[type[msgspec.Struct], Any, str]]] = {
    "get": (m.GetBelief, m.ProjectorReply, "projector"),
    "list": (m.ListBeliefs, m.ProjectorReply, "projector"),
    "read": (m.ReadWorld, m.ProjectorReply, "projector"),
    "view": (m.GetView, m.ProjectorReply, "projector"),
    "trace": (m.TraceBelief, m.ProjectorReply, "projector"),
    "before": (m.Before, m.ProjectorReply, "projector"),
    "search": (m.SearchBeliefs, m.ProjectorReply, "projector"),
    "contradictions": (m.ListContradictions, m.ProjectorReply, "projector"),
    "calibration": (m.GetCalibration, m.ProjectorReply, "projector"),
    "sources": (m.Sources, m.FusionReply, "fusion"),
    "state_hash": (m.StateHash, m.MaterializerReply, "materializer"),
    "op_status": (m.OpStatus, m.MaterializerReply, "materializer"),
    "sim.status": (m.SimStatus, m.SimulatorReply, "simulator"),
    "sim.start": (m.SimStart, m.SimulatorReply, "simulator"),
    "sim.step": (m.SimStep, m.SimulatorReply, "simulator"),
    "sim.end": (m.SimEnd, m.SimulatorReply, "simulator"),
    "sim.forecast": (m.SimForecast, m.SimulatorReply, "simulator"),
}

_W, _A = "{world}", "{agent}"
_PARAMETERS: Final = {
    "world": "the world's name: 1-64 letters, digits, '_' or '-'",
    "agent": "the agent's name (the author of what it publishes), same alphabet",
    "shard": "the belief shard fusion wrote it from (a number)",
    "kind": "the change's kind (the last word of its tag)",
    "actor": "the actor instance that could not accept the input",
    "key": "the key: for status <instance>.<host>-<pid> (subjects.status_key), for "
    "leases materializer.p<I>of<N> (subjects.lease_key)",
}

# name -> (address, message type(s), who publishes, description)
_CHANNELS: Final[list[tuple[str, str, Any, str, str]]] = [
    (
        "observations",
        s.obs(_W, _A),
        m.ExtractorInbox,
        "agent",
        "An artifact (a turn's output, a document) for the extractor to read into "
        "statements. Stream WL_OBS, a work queue.",
    ),
    (
        "ops",
        s.ops(_W, _A),
        m.OpsInbox,
        "agent",
        "The record: every op an agent writes, kept forever in WL_OPS. The last "
        "subject token is the author, so bus permissions pin an agent to its own.",
    ),
    (
        "posteriors",
        s.derived(_W, "posterior", "{shard}"),
        m.MaterializerInbox,
        "fusion",
        "Fusion's posteriors and verdicts (WL_DERIVED), batched (header "
        f"{s.BATCH_HEADER}).",
    ),
    (
        "transitions",
        s.derived(_W, "transition", "{shard}"),
        m.SimulatorInbox,
        "no actor yet",
        "Recorded transitions for the simulator (WL_DERIVED); none is published "
        "yet: the simulator serves sessions from an index built offline.",
    ),
    (
        "state",
        s.state(_W, "{kind}"),
        m.ProjectorInbox,
        "materializer",
        "The change feed (WL_STATE, 30 days). It travels batched on the batch "
        "subject below; a reader of single changes sees these messages.",
    ),
    (
        "stateBatch",
        s.state(_W, "batch"),
        m.BatchItems,
        "materializer",
        f"Many changes in one message (header {s.BATCH_HEADER}: how many): an array "
        "of [subject, bytes] pairs in publish order, each bytes one msgpack message "
        "of the change feed.",
    ),
    (
        "inbox",
        s.inbox(_W, _A),
        m.InboxMessage,
        "materializer",
        "An agent's inbox (WL_INBOX): notifications, work, rejections of its ops. "
        f"Read it through the durable {s.inbox_in(_W, _A).durable}.",
    ),
    (
        "deadLetters",
        s.dlq(_W, "{actor}"),
        m.DeadLetter,
        "actor",
        "Input an actor could not accept, with the reason (WL_DLQ, 30 days).",
    ),
    (
        "views",
        s.bucket_put(s.VIEWS, s.bucket_key(_W, _A)),
        m.ViewReply,
        "projector",
        f"Each agent's startup view, the latest value of key <world>.<agent> in KV "
        f"bucket {s.VIEWS.bucket} (watch the key for changes).",
    ),
    (
        "presence",
        s.bucket_put(s.PRESENCE, s.bucket_key(_W, _A)),
        m.Presence,
        "agent",
        f"An agent's presence in KV bucket {s.PRESENCE.bucket} (TTL "
        f"{s.PRESENCE.ttl:g} s): put it again to stay present.",
    ),
    (
        "leases",
        s.bucket_put(s.LEASES, "{key}"),
        m.Lease,
        "materializer",
        f"The materializer's write lease in KV bucket {s.LEASES.bucket}, key "
        f"{s.lease_key('materializer', 0, 1)} (one per partition).",
    ),
    (
        "status",
        s.bucket_put(s.STATUS, "{key}"),
        Heartbeat,
        "actor",
        f"Each actor process's heartbeat in KV bucket {s.STATUS.bucket} (TTL "
        f"{s.STATUS.ttl:g} s), key <instance>.<host>-<pid>.",
    ),
]


def _types() -> list[Any]:
    """Every wire type the document names, in a stable order."""
    found: list[Any] = [kind for _, _, kind, _, _ in _CHANNELS]
    for request, reply, _ in RPC.values():
        found += [request, reply]
    return found


def _components() -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
    return msgspec.json.schema_components(_types(), ref_template=_REF)


def _message(name: str, schema: dict[str, Any], summary: str) -> dict[str, Any]:
    return {
        "name": name,
        "summary": summary,
        "contentType": "application/msgpack",
        "payload": schema,
    }


def _placeholders(address: str) -> dict[str, Any]:
    names = [part[1:-1] for part in address.split(".") if part.startswith("{")]
    return {
        name: {"description": _PARAMETERS.get(name, f"the {name} token")}
        for name in names
    }


def asyncapi() -> dict[str, Any]:
    """The AsyncAPI 3.0 document: channels, operations and message schemas."""
    top, schemas = _components()
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    index = 0
    for name, address, _, publisher, summary in _CHANNELS:
        schema = top[index]
        index += 1
        channels[name] = {
            "address": address,
            "description": summary,
            "parameters": _placeholders(address),
            "messages": {name: _message(name, schema, summary)},
        }
        operations[f"{name}Publish"] = {
            "action": "send",
            "summary": f"published by {publisher}",
            "channel": {"$ref": f"#/channels/{name}"},
        }
    for verb, (_, _, actor) in RPC.items():
        request, reply = top[index], top[index + 1]
        index += 2
        key = "rpc" + "".join(w.title() for w in verb.replace("_", ".").split("."))
        address = s.rpc(_W, verb)  # type: ignore[arg-type]
        channels[key] = {
            "address": address,
            "description": f"Request/reply verb {verb!r}, answered by the {actor} "
            f"(queue group). Requests within an agent's account go to "
            f"{s.REPLY_ROOT}.… reply subjects.",
            "parameters": _placeholders(address),
            "messages": {"request": _message(f"{key}Request", request, verb)},
        }
        channels[f"{key}Reply"] = {
            "address": None,
            "description": f"The answer to {verb!r} on the request's NATS reply "
            "subject; an RpcError with retry_after > 0 means ask again then.",
            "messages": {"reply": _message(f"{key}Reply", reply, f"{verb} reply")},
        }
        operations[key] = {
            "action": "send",
            "summary": f"ask the {actor}: {verb}",
            "channel": {"$ref": f"#/channels/{key}"},
            "reply": {
                "address": {
                    "description": "the NATS reply subject of the request",
                    "location": "$message.header#/replyTo",
                },
                "channel": {"$ref": f"#/channels/{key}Reply"},
            },
        }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "worldline",
            "version": "1",
            "description": (__doc__ or "").strip(),
        },
        "defaultContentType": "application/msgpack",
        "servers": {
            "local": {
                "host": "127.0.0.1:4222",
                "protocol": "nats",
                "description": "NATS with JetStream (`worldline up` prints its URL)",
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {"schemas": schemas},
    }


def message_schemas() -> dict[str, Any]:
    """One JSON Schema (2020-12) whose ``$defs`` hold every message, and which
    accepts any one of the tagged messages."""
    _, schemas = msgspec.json.schema_components(_types(), ref_template="#/$defs/{name}")
    tagged = sorted(name for name, schema in schemas.items() if _tag(schema))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "worldline messages (msgpack maps; see asyncapi.json)",
        "oneOf": [{"$ref": f"#/$defs/{name}"} for name in tagged],
        "$defs": schemas,
    }


def _tag(schema: dict[str, Any]) -> str | None:
    """The message tag a struct's schema pins ``kind`` to, or None (no tag)."""
    kind = schema.get("properties", {}).get("kind", {})
    values = kind.get("enum") or ([kind["const"]] if "const" in kind else [])
    return values[0] if len(values) == 1 else None


def render() -> dict[str, str]:
    """Each file of docs/contract/ and its text."""
    return {
        ASYNCAPI_FILE: json.dumps(asyncapi(), indent=2, sort_keys=False) + "\n",
        SCHEMA_FILE: json.dumps(message_schemas(), indent=2) + "\n",
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m worldline.protocols.contract docs/contract")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for file, text in render().items():
        (out / file).write_text(text, encoding="utf-8")

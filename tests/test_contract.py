"""The published contract (docs/contract/) is generated from the code and must match
it: regenerating gives the checked-in files byte for byte, every RPC verb and every
tagged message is in it, and every golden wire message (tests/golden/) validates
against its JSON Schema, so the schemas describe the msgpack the actors really read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import jsonschema
import msgspec
import pytest

from worldline.protocols import messages as m
from worldline.protocols.base import Message
from worldline.protocols.contract import (
    ASYNCAPI_FILE,
    RPC,
    SCHEMA_FILE,
    asyncapi,
    message_schemas,
    render,
)
from worldline.protocols.subjects import PREFIX, VIEWS, RpcVerb, bucket_put, rpc

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "contract"
GOLDEN = ROOT / "tests" / "golden"
COMMAND = "python -m worldline.protocols.contract docs/contract"


@pytest.mark.parametrize("file", [ASYNCAPI_FILE, SCHEMA_FILE])
def test_the_checked_in_contract_matches_the_code(file: str) -> None:
    current = (CONTRACT / file).read_text() if (CONTRACT / file).exists() else ""
    assert current == render()[file], (
        f"docs/contract/{file} is out of date with worldline/protocols; regenerate "
        f"it from the repository root with:\n    {COMMAND}"
    )


def test_the_command_writes_the_files(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "worldline.protocols.contract", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for file, text in render().items():
        assert (tmp_path / "c" / file).read_text() == text


def _tag(schema: dict[str, Any]) -> str | None:
    kind = schema.get("properties", {}).get("kind", {})
    values = kind.get("enum") or ([kind["const"]] if "const" in kind else [])
    return values[0] if len(values) == 1 else None


def _tags_of(cls: type[msgspec.Struct]) -> set[str]:
    found = set()
    subclasses: list[type[msgspec.Struct]] = cls.__subclasses__()
    for sub in subclasses:
        tag = sub.__struct_config__.tag
        if isinstance(tag, str):
            found.add(tag)
        found |= _tags_of(sub)
    return found


def test_every_rpc_verb_is_published_with_what_serves_it() -> None:
    assert set(RPC) == set(get_args(RpcVerb))
    served = {
        "projector": m.ProjectorRpc,
        "fusion": m.FusionRpc,
        "materializer": m.MaterializerRpc,
        "simulator": m.SimulatorRpc,
    }
    for verb, (request, _, actor) in RPC.items():
        assert request in (get_args(served[actor]) or (served[actor],)), verb
    channels = asyncapi()["channels"]
    addresses = {c["address"] for c in channels.values()}
    assert rpc("{world}", "get") in addresses
    # every address starts at a root subjects.py builds: wl. or the KV API's
    roots = {PREFIX, bucket_put(VIEWS, "key").split(".")[0]}
    assert {a.split(".")[0] for a in addresses if a is not None} == roots


def test_every_tagged_message_has_a_schema() -> None:
    schemas = message_schemas()["$defs"]
    published = {tag for schema in schemas.values() if (tag := _tag(schema))}
    assert _tags_of(Message) - published == set()


def _json_view(value: Any) -> Any:
    """A decoded msgpack value as JSON Schema sees it: bin as base64 text, a
    timestamp as RFC 3339 text (what the schema's encodings say)."""
    return msgspec.json.decode(msgspec.json.encode(value))


GOLDEN_FILES = sorted(GOLDEN.glob("*.msgpack"))


def test_there_are_golden_messages() -> None:
    assert len(GOLDEN_FILES) > 60


def test_every_golden_message_validates_against_its_schema() -> None:
    document = message_schemas()
    by_tag = {
        tag: name for name, schema in document["$defs"].items() if (tag := _tag(schema))
    }
    whole = jsonschema.Draft202012Validator(document)
    failed = []
    for path in GOLDEN_FILES:
        tag = path.name.removesuffix(".msgpack")
        value = _json_view(msgspec.msgpack.decode(path.read_bytes()))
        assert value["kind"] == tag
        one = jsonschema.Draft202012Validator(
            {"$ref": f"#/$defs/{by_tag[tag]}", "$defs": document["$defs"]}
        )
        # its own schema, and the document as a whole (exactly one message fits)
        failed += [f"{tag}: {e.message[:300]}" for e in one.iter_errors(value)]
        failed += [f"{tag} (any): {e.message[:300]}" for e in whole.iter_errors(value)]
    assert failed == []


def test_a_schema_refuses_what_the_decoder_refuses() -> None:
    """The check above can fail: a message with a field of the wrong type."""
    document = message_schemas()
    raw = msgspec.msgpack.decode((GOLDEN / "op.add_belief.v1.msgpack").read_bytes())
    bad = {**_json_view(raw), "confidence": "very"}
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(msgspec.msgpack.encode(bad), type=m.AddBelief)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, document)


def test_the_document_says_the_wire_is_msgpack() -> None:
    document = json.loads((CONTRACT / ASYNCAPI_FILE).read_text())
    assert document["asyncapi"].startswith("3.")
    assert document["defaultContentType"] == "application/msgpack"
    assert "msgpack" in document["info"]["description"]

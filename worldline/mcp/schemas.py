"""Tool registration for the MCP server: output schemas from the SDK's own msgspec
types, annotations, and argument models that refuse unknown arguments.

Every tool's structured result is described by its ``outputSchema`` (the official
client validates results against it), built from the same msgspec structs the SDK
returns, so the schema cannot drift from the data. Regex ``pattern`` keywords are
dropped from output schemas: they are written for Python's ``re`` (``\\Z``), which a
JavaScript client would read differently, and a result never needs them.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import msgspec
from mcp.server.mcpserver.tools import Tool
from mcp.types import ToolAnnotations
from pydantic import ConfigDict, model_validator

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ARRAY_OF_IDS", "shape", "struct_schema", "tool"]

ARRAY_OF_IDS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}


def _drop_patterns(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: _drop_patterns(value)
            for key, value in node.items()
            if not (key == "pattern" and isinstance(value, str))
        }
    if isinstance(node, list):
        return [_drop_patterns(item) for item in node]
    return node


def struct_schema(kind: Any) -> dict[str, Any]:
    """The JSON schema of a msgspec type, its root inlined (an MCP output schema is
    an object at the top), without regex patterns."""
    schema = _drop_patterns(msgspec.json.schema(kind))
    ref = schema.pop("$ref", None)
    if ref is None:
        return dict(schema)
    definitions: dict[str, Any] = schema.get("$defs", {})
    root = definitions[ref.rsplit("/", 1)[-1]]
    return {**root, "$defs": definitions}


def shape(fields: dict[str, Any], *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object schema: each field a JSON schema (a dict) or a msgspec type (its
    schema, sharing one ``$defs``); every field required but ``optional``."""
    kinds = [kind for kind in fields.values() if not isinstance(kind, dict)]
    schemas, definitions = msgspec.json.schema_components(
        kinds, ref_template="#/$defs/{name}"
    )
    found = iter(schemas)
    properties = {
        name: kind if isinstance(kind, dict) else next(found)
        for name, kind in fields.items()
    }
    out: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": [name for name in fields if name not in optional],
    }
    if definitions:
        out["$defs"] = definitions
    return dict(_drop_patterns(out))


def _strict(entry: Tool) -> None:
    """Swap the tool's argument model for one that refuses unknown arguments with a
    message naming them and the ones the tool takes (the input schema then says
    ``additionalProperties: false``)."""
    base = entry.fn_metadata.arg_model
    known = {field.alias or name for name, field in base.model_fields.items()}
    takes = ", ".join(sorted(known)) or "no arguments"
    name = entry.name

    class Strict(base):  # type: ignore[valid-type,misc]  # built per tool
        model_config = ConfigDict(
            arbitrary_types_allowed=True, extra="forbid", title=base.__name__
        )

        @model_validator(mode="before")
        @classmethod
        def _known_only(cls, data: Any) -> Any:
            if isinstance(data, dict):
                unknown = sorted(set(data) - known)
                if unknown:
                    listed = ", ".join(repr(key) for key in unknown)
                    raise ValueError(
                        f"unknown argument(s) {listed}: {name} takes {takes}"
                    )
            return data

    entry.fn_metadata.arg_model = Strict
    entry.parameters = Strict.model_json_schema(by_alias=True)


def tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    title: str,
    output: dict[str, Any],
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
) -> Tool:
    """A tool with its title, annotations (hints: read-only, destructive,
    idempotent; none reaches outside this world), output schema, and strict
    arguments."""
    annotations = ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=None if read_only else destructive,
        idempotent_hint=True if read_only else idempotent,
        open_world_hint=False,
    )
    entry = Tool.from_function(
        fn,
        name=name,
        title=title,
        description=inspect.cleandoc(fn.__doc__ or ""),
        annotations=annotations,
    )
    _strict(entry)
    entry.fn_metadata.output_schema = output
    return entry

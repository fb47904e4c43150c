"""Read a world declaration from TOML, with errors that name the line and the field."""

from __future__ import annotations

import tomllib
from typing import TYPE_CHECKING, Any, Final

import msgspec

from worldline.protocols.world import WorldDecl
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["MAX_DECLARATION_BYTES", "load_declaration", "parse_declaration"]

MAX_DECLARATION_BYTES: Final = 1024 * 1024


def load_declaration(path: Path) -> WorldDecl:
    """Read and validate ``path``.

    Raises:
        BadRequest: unreadable, oversized, not TOML, an unknown key, or a value of the
            wrong type or out of range; the message names the file, line and field.
    """
    try:
        size = path.stat().st_size
        if size > MAX_DECLARATION_BYTES:
            raise BadRequest(
                f"{path}: {size} bytes is over the {MAX_DECLARATION_BYTES}-byte limit "
                "for a world declaration; keep bulk data out of it"
            )
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(f"cannot read {path}: {exc}") from exc
    return parse_declaration(text, source=str(path))


def parse_declaration(text: str, *, source: str = "<declaration>") -> WorldDecl:
    """Validate TOML text as a :class:`WorldDecl` (see :func:`load_declaration`)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadRequest(f"{source}: not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise BadRequest(
            f"{source}: nested too deeply to read; a world declaration is a few "
            "levels of tables and lists"
        ) from exc
    unknown = _unknown_keys(raw, WorldDecl, "")
    if unknown:
        path, key = unknown
        where = path or "the top level"
        raise BadRequest(
            f"{source}{_line_of(text, key)}: unknown key {key!r} in {where}; "
            "check the spelling against examples/crew.toml"
        )
    try:
        return msgspec.convert(raw, WorldDecl)
    except msgspec.ValidationError as exc:
        field = str(exc).rsplit("`$.", 1)[-1].rstrip("`") if "`$." in str(exc) else ""
        key = field.replace("[", ".").split(".")[-1].rstrip("]") if field else ""
        where = _line_of(text, key) if key and not key.isdigit() else ""
        raise BadRequest(f"{source}{where}: {exc}") from exc


def _line_of(text: str, key: str) -> str:
    """``:N`` for the first line that assigns or opens ``key``, else empty."""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip().lstrip("[").rstrip("]").strip()
        if stripped.split("=", 1)[0].strip() == key or stripped.endswith(f".{key}"):
            return f":{number}"
        if stripped == key:
            return f":{number}"
    return ""


def _unknown_keys(value: Any, annotation: Any, path: str) -> tuple[str, str] | None:
    """The first key in ``value`` that ``annotation`` (a Struct, or a list or dict of
    Structs) does not declare, as (path, key)."""
    info = msgspec.inspect.type_info(annotation)
    return _walk(value, info, path)


def _walk(value: Any, info: Any, path: str) -> tuple[str, str] | None:
    if isinstance(info, msgspec.inspect.StructType) and isinstance(value, dict):
        fields = {f.encode_name: f for f in info.fields}
        for key, item in value.items():
            if key not in fields:
                return path, key
            found = _walk(item, fields[key].type, f"{path}.{key}" if path else key)
            if found:
                return found
    elif isinstance(info, msgspec.inspect.ListType) and isinstance(value, list):
        for index, item in enumerate(value):
            found = _walk(item, info.item_type, f"{path}[{index}]")
            if found:
                return found
    return None

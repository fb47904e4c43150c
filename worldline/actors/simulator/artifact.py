"""Reading and writing an index's files: each hashed as it is read or written,
refused by name (and with the command that rebuilds it) when it does not match
what the manifest certifies (see ``index.py``)."""

from __future__ import annotations

import hashlib
import io
from typing import TYPE_CHECKING, Any, Final

import msgspec
import numpy as np

from worldline.actors.simulator.storage import IndexRefused

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from worldline.actors.simulator.storage import Vectors

__all__ = [
    "REBUILD",
    "check_sha256",
    "decoded_lines",
    "lines_sha256",
    "read_array",
    "read_bytes",
    "sha256_of",
    "vectors_bytes",
    "verified",
    "write_lines",
]

REBUILD: Final = "worldline sim index TRACES... --out NEW_DIR"

_ENCODER: Final = msgspec.json.Encoder()


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def lines_sha256(items: Iterable[msgspec.Struct]) -> str:
    """The sha256 of the JSONL of ``items`` (one msgspec-JSON value a line), hashed
    line by line, never held whole."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(_ENCODER.encode(item) + b"\n")
    return digest.hexdigest()


def write_lines(path: Path, items: Iterable[msgspec.Struct]) -> None:
    with path.open("wb") as f:
        for item in items:
            f.write(_ENCODER.encode(item) + b"\n")


def vectors_bytes(vectors: Vectors) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, vectors, allow_pickle=False)
    return buffer.getvalue()


def read_bytes(path: Path, name: str) -> bytes:
    try:
        return (path / name).read_bytes()
    except OSError as exc:
        raise IndexRefused(
            f"{name}: cannot be read ({exc.strerror}); point at a directory written "
            f"by save() (built with {REBUILD})"
        ) from exc


def verified(path: Path, name: str, expected: str) -> bytes:
    data = read_bytes(path, name)
    check_sha256(name, sha256_of(data), expected)
    return data


def check_sha256(name: str, found: str, expected: str) -> None:
    if found != expected:
        raise IndexRefused(
            f"{name}: sha256 does not match the manifest (changed after it was "
            f"built); rebuild the index from its traces ({REBUILD})"
        )


def decoded_lines(
    path: Path, name: str, decoder: msgspec.json.Decoder[Any], expected: str
) -> tuple[Any, ...]:
    """Each line of a JSONL file decoded, the file hashed as it is read (never held
    whole); a sha256 other than ``expected`` is refused."""
    digest = hashlib.sha256()
    found = []
    try:
        with (path / name).open("rb") as f:
            for line in f:
                digest.update(line)
                found.append(decoder.decode(line))
    except OSError as exc:
        raise IndexRefused(
            f"{name}: cannot be read ({exc.strerror}); point at a directory written "
            f"by save() (built with {REBUILD})"
        ) from exc
    except msgspec.DecodeError as exc:
        verified(path, name, expected)  # a changed file is refused as changed
        raise IndexRefused(f"{name}: unreadable ({exc}); {REBUILD}") from exc
    check_sha256(name, digest.hexdigest(), expected)
    return tuple(found)


def read_array(path: Path, name: str, expected: str) -> Vectors:
    blob = verified(path, name, expected)
    try:
        array = np.load(io.BytesIO(blob), allow_pickle=False)
    except ValueError as exc:
        raise IndexRefused(f"{name}: unreadable ({exc}); {REBUILD}") from exc
    if array.dtype != np.float32:
        raise IndexRefused(f"{name}: dtype {array.dtype}, not float32; rebuild")
    out: Vectors = array
    return out

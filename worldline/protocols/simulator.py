"""The grounded simulator's records and wire messages: normalization issues, the index
manifest, sessions and their limits."""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

__all__ = [
    "DEFAULT_LIMITS",
    "INDEX_VERSION",
    "IndexManifest",
    "Limits",
    "TraceIssue",
]


class TraceIssue(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A record a trace adapter could not use, and why (never silently skipped)."""

    source: str  # file and position
    reason: str


class Limits(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a world-model session may hold. Exceeding one fails the step, by name."""

    sessions: int = 256  # active sessions
    expiry: float = 3600.0  # seconds a session lives without a step
    messages: int = 128  # transcript messages
    transcript_bytes: int = 1024 * 1024
    observation_bytes: int = 64 * 1024  # one predicted observation
    task_bytes: int = 64 * 1024
    context_bytes: int = 256 * 1024


DEFAULT_LIMITS: Final = Limits()


# 2: contexts stored once, as shared chains of segments; 3: large blocks cut into
# cells (k-means), their rows stored by cell, so a query reads a few cells
INDEX_VERSION: Final = 3


class IndexManifest(msgspec.Struct, frozen=True, kw_only=True):
    """What an index artifact holds, and the hashes that prove it (read-only).

    Every field is written, ``kind`` and ``version`` included (no defaults are
    omitted), so a reader can refuse another kind or an older format by name."""

    kind: Literal["real-transitions"] = "real-transitions"  # never rollouts
    version: int = INDEX_VERSION
    embedder: str  # id and version of the embedder the vectors came from
    dimensions: int
    query: str  # what is embedded for each row and each query (a recipe id)
    transitions: int
    contexts: int  # stored context segments (shared between transitions)
    transitions_sha256: str  # of transitions.jsonl
    contexts_sha256: str  # of contexts.jsonl
    vectors_sha256: str  # of vectors.npy
    centroids_sha256: str = ""  # of centroids.npy (every cell's centroid, in order)
    # each partitioned block's cells: each cell's first row, then the block's end
    partitions: list[list[int]] = msgspec.field(default_factory=list)
    lineages: dict[str, str] = msgspec.field(default_factory=dict)  # -> its group
    groups: dict[str, Literal["fit", "held-out"]] = msgspec.field(default_factory=dict)
    sources: list[str] = msgspec.field(default_factory=list)  # trace files, by name
    issues: list[TraceIssue] = msgspec.field(default_factory=list)
    id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}\Z")]  # sha256 of the rest

"""The read-only index of real transitions, and retrieval from it.

An index holds real action -> observation
:class:`~worldline.protocols.messages.Transition` records taken from traces, one unit
vector per transition, each transition's lineage, each lineage's group, and each
group's partition ("fit" or "held-out", by a stable hash of the group's name, so the
trials of one task never straddle the split). It is content-addressed: the manifest
carries the sha256 of each data file and its own id is the sha256 of everything else
it says, so :func:`load` refuses an artifact that was changed, and one written in an
older format (naming the command that rebuilds it).

Read-only by design: there is no way to add to an index. :func:`build` (or
:class:`~worldline.actors.simulator.builder.IndexBuilder`, which streams) makes a new
one from ``Transition`` structs only, and a ``Transition`` is real by construction.
Generated rollouts and predicted observations are other types; building from one
raises ``TypeError``, so the world model never retrieves its own earlier guesses.

Retrieval is centred on the action (:func:`retrieve`). Candidates are of the
action's kind only: a tool call is answered from tool results (the same tool's
first, then other tools' when fewer than ``k`` remain), a message from user or
environment replies; never the other kind. A row's vector and a query's embed the
action and a bounded window of recent context
(:func:`~worldline.actors.simulator.storage.recent`), never the observation and never
the whole prefix, so a long system prompt cannot drown the action. Excluded lineages
and groups and the rows of the other partition are removed *before* scoring; ranking
is cosine similarity, ties broken by transition id. Excluding a name the index does
not hold raises :class:`UnknownLineage`.

Large blocks (one tool's results, or the message turns, of at least
:data:`~worldline.actors.simulator.partition.PARTITION_MIN` rows) are cut into cells
by k-means, their rows stored by cell, and a query reads the cells nearest it
(``partition.py``).

Artifact layout (a directory), version 3 (see ``storage.py``, ``partition.py``):

- ``manifest.json``: :class:`~worldline.protocols.simulator.IndexManifest`;
- ``transitions.jsonl``: one :class:`~worldline.actors.simulator.storage.Row` per
  line (msgspec JSON arrays), tool results first, grouped by tool, then message
  turns, each group sorted by cell (a partitioned block's; else one) then id;
- ``contexts.jsonl``: one :class:`~worldline.actors.simulator.storage.Segment` per
  line, each context's messages stored once and shared between transitions;
- ``vectors.npy``: float32 ``[n, dimensions]``, row i embeds transition i;
- ``centroids.npy``: float32 ``[cells, dimensions]``, every cell's centroid, in the
  order of the manifest's ``partitions`` (each block's cell bounds).

The embedder is the process's selected one unless one is passed; an index is only
loaded or queried with the embedder it names (else :class:`IndexRefused`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec
import numpy as np
import numpy.typing as npt

from worldline.actors.belief_model.embedding import active
from worldline.actors.simulator.artifact import (
    REBUILD,
    decoded_lines,
    lines_sha256,
    read_array,
    read_bytes,
    sha256_of,
    vectors_bytes,
    write_lines,
)
from worldline.actors.simulator.partition import Cells, row_cells
from worldline.actors.simulator.retrieval import (
    Kind,
    UnknownLineage,
    check_exclusions,
    query_vector,
    retrieve,
)
from worldline.actors.simulator.storage import (
    MANIFEST,
    QUERY,
    IndexRefused,
    Row,
    Segment,
    commands,
    context_text,
    embedder_refused,
    row_tool,
)
from worldline.protocols.messages import Transition
from worldline.protocols.simulator import INDEX_VERSION, IndexManifest

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

    from worldline.actors.belief_model.embedding import Embedder

__all__ = [
    "CENTROIDS",
    "CONTEXTS",
    "KIND",
    "MANIFEST",
    "REBUILD",
    "TRANSITIONS",
    "VECTORS",
    "IndexRefused",
    "Kind",
    "Split",
    "TransitionIndex",
    "UnknownLineage",
    "build",
    "check_exclusions",
    "load",
    "manifest_id",
    "query_vector",
    "retrieve",
    "save",
]

TRANSITIONS: Final = "transitions.jsonl"
CONTEXTS: Final = "contexts.jsonl"
VECTORS: Final = "vectors.npy"
CENTROIDS: Final = "centroids.npy"
KIND: Final = "real-transitions"

Split = Literal["fit", "held-out"]
Vectors = npt.NDArray[np.float32]
_NONE: Final[Vectors] = np.zeros((0, 0), dtype=np.float32)  # no cells given

_ENCODER: Final = msgspec.json.Encoder()
_ROW: Final = msgspec.json.Decoder(Row)
_SEGMENT: Final = msgspec.json.Decoder(Segment)
_MANIFEST: Final = msgspec.json.Decoder(IndexManifest)


def manifest_id(manifest: IndexManifest) -> str:
    """The sha256 of every field of the manifest but ``id`` (sorted-key JSON), so
    the id names exactly what the manifest says."""
    fields: dict[str, Any] = msgspec.structs.asdict(manifest)
    del fields["id"]
    return sha256_of(msgspec.json.encode(msgspec.to_builtins(fields), order="sorted"))


def _kind_key(row: Row) -> tuple[int, str, str]:
    """The stored order: tool results by tool, then message turns; each by id."""
    return (1, "", row.id) if row.pairing == "turn" else (0, row_tool(row), row.id)


class _Transitions(Sequence[Transition]):
    """The index's transitions, each built from its stored row when read."""

    def __init__(self, index: TransitionIndex) -> None:
        self._index = index

    def __len__(self) -> int:
        return len(self._index.rows)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._index.transition(j) for j in range(len(self))[i]]
        return self._index.transition(range(len(self))[i])

    def __iter__(self) -> Iterator[Transition]:
        return (self._index.transition(i) for i in range(len(self._index.rows)))


@dataclass(frozen=True, eq=False)
class TransitionIndex:
    """A read-only index: ``rows`` in stored order, ``contexts`` their shared
    segments, ``vectors[i]`` embeds row i (float32, unit, not writeable),
    ``centroids`` the cells' (none when no block is partitioned). Make one
    with :func:`build` or :func:`load`. Construction checks that the parts are
    exactly what the manifest certifies (counts, shape, order, lineages and groups,
    the manifest id and every content hash), so no index holds a row its manifest
    does not name. Two indexes are equal when their manifests are (the manifest
    carries the sha256 of every part)."""

    manifest: IndexManifest
    rows: tuple[Row, ...]
    contexts: tuple[Segment, ...]
    vectors: Vectors = field(repr=False)
    centroids: Vectors = field(default_factory=lambda: _NONE, repr=False)
    hashed: InitVar[bool] = False  # build and load checked the bytes' hashes
    _codes: dict[str, int] = field(init=False, repr=False)
    _group_codes: dict[str, int] = field(init=False, repr=False)
    _lineage_group: npt.NDArray[np.int32] = field(init=False, repr=False)
    _held: npt.NDArray[np.bool_] = field(init=False, repr=False)  # per lineage
    _row_lineage: npt.NDArray[np.int32] = field(init=False, repr=False)
    _rank: npt.NDArray[np.int64] = field(init=False, repr=False)  # of each row's id
    _tools: dict[str, tuple[int, int]] = field(init=False, repr=False)
    _spans: dict[Kind, tuple[int, int]] = field(init=False, repr=False)
    _cells: Cells = field(init=False, repr=False)  # the partitioned blocks' cells
    # message rows by the command their action issues (storage.command_of)
    _commands: dict[str, npt.NDArray[np.int64]] = field(init=False, repr=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TransitionIndex):
            return NotImplemented
        return self.manifest == other.manifest

    __hash__ = None  # type: ignore[assignment]

    def __post_init__(self, hashed: bool) -> None:
        m = self.manifest
        if m.kind != KIND:
            raise IndexRefused(
                f"kind {m.kind!r}: an index holds only {KIND!r}; build it from real "
                "Transition records (rollouts and predictions are never indexed)"
            )
        if m.id != manifest_id(m):
            raise IndexRefused(
                f"{MANIFEST}: its id does not match its content (changed after it was "
                f"built); rebuild the index from its traces ({REBUILD})"
            )
        vectors = np.ascontiguousarray(self.vectors, dtype=np.float32)
        n = len(self.rows)
        if vectors.shape != (n, m.dimensions):
            raise IndexRefused(
                f"{VECTORS}: shape {vectors.shape}, manifest says {m.dimensions} "
                f"dimensions ({m.embedder}) for {n} transitions; rebuild the index"
            )
        if m.transitions != n:
            raise IndexRefused(
                f"{TRANSITIONS}: {n} transitions, manifest says {m.transitions}; "
                "rebuild the index"
            )
        cells = sum(len(edges) - 1 for edges in m.partitions)
        centroids = np.ascontiguousarray(
            np.zeros((0, m.dimensions)) if self.centroids is _NONE else self.centroids,
            dtype=np.float32,
        )
        if centroids.shape != (cells, m.dimensions):
            raise IndexRefused(
                f"{CENTROIDS}: shape {centroids.shape}, the manifest's partitions "
                f"have {cells} cells of {m.dimensions} dimensions; rebuild the index"
            )
        if m.contexts != len(self.contexts):
            raise IndexRefused(
                f"{CONTEXTS}: {len(self.contexts)} segments, manifest says "
                f"{m.contexts}; rebuild the index"
            )
        if not hashed:
            for name, found, expected in (
                (TRANSITIONS, lines_sha256(self.rows), m.transitions_sha256),
                (CONTEXTS, lines_sha256(self.contexts), m.contexts_sha256),
                (VECTORS, sha256_of(vectors_bytes(vectors)), m.vectors_sha256),
                (CENTROIDS, sha256_of(vectors_bytes(centroids)), m.centroids_sha256),
            ):
                if found != expected:
                    raise IndexRefused(
                        f"{name}: sha256 does not match the manifest; an index is "
                        "never changed: build a new one"
                    )
        self._check_segments()
        self._derive(vectors, centroids)

    def _check_segments(self) -> None:
        for i, segment in enumerate(self.contexts):
            if not -1 <= segment.parent < i:
                raise IndexRefused(
                    f"{CONTEXTS}: segment {i} names parent {segment.parent}, not an "
                    "earlier segment; rebuild the index"
                )

    def _derive(self, vectors: Vectors, centroids: Vectors) -> None:
        m, n = self.manifest, len(self.rows)
        try:
            cell = row_cells(m.partitions, n).tolist()
        except ValueError as exc:
            raise IndexRefused(f"{MANIFEST}: partitions: {exc}; rebuild") from exc
        groups = {name: i for i, name in enumerate(sorted(m.groups))}
        codes = {name: i for i, name in enumerate(sorted(m.lineages))}
        lineage_group = np.empty(len(codes), dtype=np.int32)
        for name, code in codes.items():
            group = groups.get(m.lineages[name])
            if group is None:
                raise IndexRefused(
                    f"{MANIFEST}: lineage {name!r} names group "
                    f"{m.lineages[name]!r}, which has no split; rebuild the index"
                )
            lineage_group[code] = group
        held_group = np.array([m.groups[g] == "held-out" for g in groups], dtype=bool)
        row_lineage = np.empty(n, dtype=np.int32)
        tools: dict[str, tuple[int, int]] = {}
        previous: tuple[int, str, int, str] | None = None
        segments = len(self.contexts)
        for i, row in enumerate(self.rows):
            if not isinstance(row, Row):
                raise TypeError(f"row {i} is a {type(row).__name__}, not a Row")
            kind_key = _kind_key(row)
            key = (kind_key[0], kind_key[1], cell[i], row.id)
            if previous is not None and key <= previous:
                raise IndexRefused(
                    f"{TRANSITIONS}: rows not in stored order at {row.id!r}; "
                    "rebuild the index"
                )
            previous = key
            lineage_code = codes.get(row.lineage)
            if lineage_code is None:
                raise IndexRefused(
                    f"{MANIFEST}: lineage {row.lineage!r} of {row.id!r} has no "
                    "group; rebuild the index"
                )
            if not (-1 <= row.task < segments and -1 <= row.context < segments):
                raise IndexRefused(
                    f"{TRANSITIONS}: {row.id!r} names a segment {CONTEXTS} does not "
                    "hold; rebuild the index"
                )
            row_lineage[i] = lineage_code
            if key[0] == 0:
                start, _ = tools.get(key[1], (i, i))
                tools[key[1]] = (start, i + 1)
        ids = [row.id for row in self.rows]
        if len(set(ids)) != n:
            raise IndexRefused(f"{TRANSITIONS}: an id repeats; rebuild the index")
        rank = np.empty(n, dtype=np.int64)
        rank[sorted(range(n), key=ids.__getitem__)] = np.arange(n)
        first_turn = next(
            (i for i, r in enumerate(self.rows) if r.pairing == "turn"), n
        )
        blocks = {*tools.values(), (first_turn, n)}
        if any((edges[0], edges[-1]) not in blocks for edges in m.partitions):
            raise IndexRefused(
                f"{MANIFEST}: a partition is not one block (a tool's results or the "
                "message turns); rebuild the index"
            )
        vectors.flags.writeable = False
        centroids.flags.writeable = False
        setattr_ = object.__setattr__
        setattr_(self, "centroids", centroids)
        setattr_(self, "_cells", Cells.of(m.partitions, centroids))
        setattr_(self, "vectors", vectors)
        setattr_(self, "_codes", codes)
        setattr_(self, "_group_codes", groups)
        setattr_(self, "_lineage_group", lineage_group)
        setattr_(self, "_held", held_group[lineage_group])
        setattr_(self, "_row_lineage", row_lineage)
        setattr_(self, "_rank", rank)
        setattr_(self, "_tools", tools)
        setattr_(self, "_spans", {"tool": (0, first_turn), "message": (first_turn, n)})
        setattr_(self, "_commands", commands(self.rows, first_turn))

    @property
    def transitions(self) -> Sequence[Transition]:
        """Every transition, in stored order (built from its row when read)."""
        return _Transitions(self)

    def transition(self, i: int) -> Transition:
        """Row ``i`` as the transition it was built from."""
        row = self.rows[i]
        return Transition(
            id=row.id,
            lineage=row.lineage,
            task=context_text(self.contexts, row.task),
            context=context_text(self.contexts, row.context),
            action=row.action,
            observation=row.observation,
            pairing=row.pairing,
            source=row.source,
            final=row.final,
            support=row.support,
        )

    def group_of(self, lineage: str) -> str:
        """The group a lineage belongs to (``KeyError`` if the index has none)."""
        return self.manifest.lineages[lineage]

    def split_of(self, lineage: str) -> Split:
        """The partition a lineage is in: its group's."""
        return self.manifest.groups[self.group_of(lineage)]

    def tools(self) -> list[str]:
        """The tools whose results the index holds, sorted."""
        return sorted(self._tools)


def build(
    transitions: Iterable[Transition],
    *,
    sources: Sequence[str] = (),
    issues: Sequence[Any] = (),
    held_out: float = 0.2,
    embedder: Embedder | None = None,
    groups: dict[str, str] | None = None,
) -> TransitionIndex:
    """A new index of real transitions (see
    :class:`~worldline.actors.simulator.builder.IndexBuilder`, which this streams
    ``transitions`` into): ``groups`` maps a lineage to its group (a lineage not in
    it is its own group). Raises ``ValueError`` for a ``held_out`` outside [0, 1)
    or one that leaves no transition to fit."""
    from worldline.actors.simulator.builder import IndexBuilder

    builder = IndexBuilder(held_out=held_out, embedder=embedder)
    builder.add_all(transitions, groups or {})
    return builder.finish(sources=sources, issues=issues)


def save(index: TransitionIndex, out: Path) -> None:
    """Write the artifact into ``out`` (created if missing; refused if not empty:
    an index is never updated in place)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(
            f"{out}: not an empty directory; an index is written once, choose a new "
            "directory"
        )
    out.mkdir(parents=True, exist_ok=True)
    write_lines(out / TRANSITIONS, index.rows)
    write_lines(out / CONTEXTS, index.contexts)
    (out / VECTORS).write_bytes(vectors_bytes(index.vectors))
    (out / CENTROIDS).write_bytes(vectors_bytes(index.centroids))
    (out / MANIFEST).write_bytes(msgspec.json.format(_ENCODER.encode(index.manifest)))


def load(path: Path, *, embedder: Embedder | str | None = None) -> TransitionIndex:
    """Read an artifact written by :func:`save`, verifying it before use: the kind
    is real transitions, the format is this version, the embedder and the query
    recipe are this process's (``embedder``: default the selected one, or an
    embedder id), the manifest id matches its content and every file its sha256.
    Anything else raises :class:`IndexRefused` naming the cause and the fix."""
    raw = read_bytes(path, MANIFEST)
    try:
        head = msgspec.json.decode(raw, type=dict[str, Any])
    except msgspec.DecodeError as exc:
        raise IndexRefused(f"{MANIFEST}: not a manifest ({exc}); {REBUILD}") from exc
    kind = head.get("kind", KIND)
    if kind != KIND:
        raise IndexRefused(
            f"{MANIFEST}: kind {kind!r}, not {KIND!r}; only real transitions are "
            "indexed (rollouts and predictions are evaluation artifacts): rebuild "
            f"the index from real traces ({REBUILD})"
        )
    version = head.get("version", 1)
    if version != INDEX_VERSION:
        raise IndexRefused(
            f"{MANIFEST}: index format version {version}, this worldline reads "
            f"version {INDEX_VERSION} (contexts stored once, large blocks cut into "
            f"cells a query probes); rebuild it from its traces: {REBUILD}"
        )
    if embedder is None:
        embedder = active()
    expected = embedder if isinstance(embedder, str) else embedder.id
    if head.get("embedder") != expected:
        raise embedder_refused(str(head.get("embedder")), expected, f"{MANIFEST}:")
    if head.get("query") != QUERY:
        raise IndexRefused(
            f"{MANIFEST}: rows embedded as {head.get('query')!r}, this worldline "
            f"queries as {QUERY!r}; rebuild it from its traces: {REBUILD}"
        )
    try:
        manifest = _MANIFEST.decode(raw)
    except msgspec.DecodeError as exc:
        raise IndexRefused(f"{MANIFEST}: invalid ({exc}); {REBUILD}") from exc
    if manifest.id != manifest_id(manifest):
        raise IndexRefused(
            f"{MANIFEST}: its id does not match its content (changed after it was "
            f"built); rebuild the index from its traces ({REBUILD})"
        )
    stored = decoded_lines(path, TRANSITIONS, _ROW, manifest.transitions_sha256)
    segments = decoded_lines(path, CONTEXTS, _SEGMENT, manifest.contexts_sha256)
    vectors, centroids = (
        read_array(path, name, expected)
        for name, expected in (
            (VECTORS, manifest.vectors_sha256),
            (CENTROIDS, manifest.centroids_sha256),
        )
    )
    return TransitionIndex(manifest, stored, segments, vectors, centroids, hashed=True)

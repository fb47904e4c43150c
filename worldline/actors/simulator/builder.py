"""Build an index by streaming transitions into it, in memory that does not grow with
the traces' text: what is held per transition is its id, sort key, lineage and a few
numbers, while texts wait in temporary files until the index is written.

:class:`IndexBuilder` takes transitions one at a time (:meth:`~IndexBuilder.add`):
it interns each context as shared segments (``storage.py``, texts spilled to a
temporary file), appends a compact row to a temporary file, embeds in batches
(vectors appended to a temporary file), and forgets the transition.
:meth:`~IndexBuilder.write` sorts the rows into stored order (a large block's rows by
the cell k-means puts them in, ``partition.py``, its vectors read from disk a chunk
at a time), numbers the segments
canonically, splits the lineage groups into fit and held-out, and writes the files
line by line and the vectors chunk by chunk, hashing as it goes, then certifies them
in a manifest; :meth:`~IndexBuilder.finish` does the same into a temporary folder
and loads it. The same transitions give the same index (bytes and id) in any order.

**Support.** A transition's id is content-derived (lineage, context, action,
observation, pairing), so the same exchange recorded twice in one lineage (two
trials of a task sharing their first exchange) has one id: it is stored once, its
``support`` counting how often it was seen (evidence of how likely it is). The same
id over different content is an adapter bug, refused naming both sources.
"""

from __future__ import annotations

import hashlib
import io
import tempfile
import weakref
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import msgspec
import numpy as np
import numpy.typing as npt

from worldline.actors.belief_model.embedding import active
from worldline.actors.simulator.index import (
    CENTROIDS,
    CONTEXTS,
    KIND,
    TRANSITIONS,
    VECTORS,
    Split,
    TransitionIndex,
    _kind_key,
    load,
    manifest_id,
)
from worldline.actors.simulator.partition import cells_of
from worldline.actors.simulator.storage import (
    MANIFEST,
    QUERY,
    ContextTable,
    Row,
    embed_pairs,
    recent,
)
from worldline.protocols.messages import Transition
from worldline.protocols.simulator import INDEX_VERSION, IndexManifest, TraceIssue

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from worldline.actors.belief_model.embedding import Embedder

__all__ = ["BATCH", "CHUNK", "IndexBuilder", "group_split"]

BATCH: Final = 512  # transitions embedded together
CHUNK: Final = 4096  # vector rows copied into the index at a time
_ENCODER: Final = msgspec.json.Encoder()
_ROW: Final = msgspec.json.Decoder(Row)


def content_digest(t: Transition) -> bytes:
    """What a transition's id stands for: everything but where it was seen
    (``source``) and whether its trace ended there (``final``)."""
    named = (t.lineage, t.task, t.context, t.action, t.observation, t.pairing)
    return hashlib.sha256(_ENCODER.encode(named)).digest()


def group_split(group: str, held_out: float) -> Split:
    """A stable partition for a lineage group: the first 8 bytes of the sha256 of
    its name, as a fraction of 2**64, below ``held_out`` -> held-out."""
    point = int.from_bytes(hashlib.sha256(group.encode()).digest()[:8], "big")
    return "held-out" if point / 2.0**64 < held_out else "fit"


class IndexBuilder:
    """Streams real transitions into a new index (see the module docstring).

    ``held_out`` is the fraction of lineage groups kept out of the fit partition,
    in [0, 1); ``embedder`` defaults to the process's selected one. ``pairs``
    counts every transition added (repeats included), ``len()`` the distinct ones.
    """

    def __init__(
        self,
        *,
        held_out: float = 0.2,
        embedder: Embedder | None = None,
        batch: int = BATCH,
    ) -> None:
        if not 0.0 <= held_out < 1.0:
            raise ValueError(
                f"held_out {held_out!r} (--held-out): a fraction in [0, 1); at 1 "
                "every lineage group is held out and nothing is left to ground a "
                "prediction on"
            )
        self.held_out = held_out
        self.embedder = embedder if embedder is not None else active()
        self.batch = batch
        self.pairs = 0  # every transition added, repeats included
        self._table = ContextTable()
        self._rows: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (one Row each)
        self._ends: list[int] = [0]  # row i is bytes _ends[i]:_ends[i + 1]
        self._vectors: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (float32)
        # Closed by close(), or when the builder is dropped (an add that raised).
        self._closer = weakref.finalize(
            self, _close, self._rows, self._vectors, self._table
        )
        self._embedded = 0  # rows whose vectors are in the file
        # Per distinct transition, by row number: what ordering, grouping and
        # merging need, never its text.
        self._keys: list[tuple[int, str, str]] = []  # _kind_key of the row
        self._nodes: list[tuple[int, int]] = []  # (task, context) segments
        self._lineage: list[str] = []
        self._support: list[int] = []
        self._finals: list[int] = []  # how many of its occurrences ended a trace
        self._sources: list[str] = []  # the first source seen (sorted)
        self._seen: dict[str, tuple[bytes, int]] = {}  # id -> (content, row)
        self._groups: dict[str, str] = {}  # lineage -> group
        self._pending: list[tuple[str, str]] = []  # (action, recent window)

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, t: Transition, group: str | None = None) -> None:
        """Add one real transition; ``group`` is its lineage's group (default: the
        lineage itself). A repeated id with the same content adds to its support;
        with other content it is refused, as is a lineage in two groups
        (``ValueError``)."""
        if not isinstance(t, Transition):
            raise TypeError(
                f"{type(t).__name__} is not a Transition: an index holds only real "
                "action -> observation pairs from traces (rollouts and predictions "
                "are never indexed)"
            )
        group = group or t.lineage
        held = self._groups.setdefault(t.lineage, group)
        if held != group:
            raise ValueError(
                f"lineage {t.lineage!r} is in group {held!r} and in group {group!r}: "
                "a lineage belongs to one group; fix the declared groups"
            )
        self.pairs += 1
        digest = content_digest(t)
        seen = self._seen.get(t.id)
        if seen is not None:
            kept, at = seen
            if kept != digest:
                raise ValueError(
                    f"transition id {t.id!r} names two different pairs, at "
                    f"{self._sources[at] or '(no source)'} and at "
                    f"{t.source or '(no source)'}; ids are content-derived (lineage, "
                    "context, action, observation, pairing): fix the adapter that "
                    "made them"
                )
            self._support[at] += 1
            self._finals[at] += t.final
            self._sources[at] = min(self._sources[at], t.source)
            return
        at = len(self._keys)
        self._seen[t.id] = (digest, at)
        row = Row(
            id=t.id,
            lineage=t.lineage,
            task=self._table.task(t.task),
            context=self._table.context(t.context),
            action=t.action,
            observation=t.observation,
            pairing=t.pairing,
            source="",
            final=False,
        )
        line = _ENCODER.encode(row)
        self._rows.seek(self._ends[-1])
        self._rows.write(line)
        self._ends.append(self._ends[-1] + len(line))
        self._keys.append(_kind_key(row))
        self._nodes.append((row.task, row.context))
        self._lineage.append(t.lineage)
        self._support.append(1)
        self._finals.append(int(t.final))
        self._sources.append(t.source)
        self._pending.append((t.action, recent(t.context)))
        if len(self._pending) >= self.batch:
            self._flush()

    def add_all(
        self, transitions: Iterable[Transition], groups: Mapping[str, str] = {}
    ) -> None:
        """Add each transition, its group from ``groups`` (lineage -> group)."""
        for t in transitions:
            self.add(t, groups.get(t.lineage) if isinstance(t, Transition) else None)

    def _flush(self) -> None:
        if self._pending:
            vectors = embed_pairs(self._pending, self.embedder)
            self._vectors.seek(self._embedded * 4 * self.embedder.dimensions)
            self._vectors.write(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
            self._embedded += len(self._pending)
            self._pending.clear()

    def _row(self, i: int, new: Sequence[int]) -> Row:
        """Row ``i`` as stored: segments renumbered, support, source and final."""
        self._rows.seek(self._ends[i])
        row = _ROW.decode(self._rows.read(self._ends[i + 1] - self._ends[i]))
        support = self._support[i]
        return msgspec.structs.replace(
            row,
            task=new[row.task] if row.task >= 0 else -1,
            context=new[row.context] if row.context >= 0 else -1,
            source=self._sources[i],
            final=2 * self._finals[i] > support,
            support=support,
        )

    def _added(self) -> np.memmap[Any, np.dtype[np.float32]]:
        """The vectors embedded so far, in the order they were added (on disk)."""
        self._vectors.flush()
        dims = self.embedder.dimensions
        return np.memmap(
            self._vectors, dtype="<f4", mode="r", shape=(self._embedded, dims)
        )

    def _vector_chunks(self, order: Sequence[int]) -> Iterator[bytes]:
        """The vectors in stored order, ``CHUNK`` rows at a time."""
        if not order:
            return
        added = self._added()
        for start in range(0, len(order), CHUNK):
            picked = np.array(order[start : start + CHUNK], dtype=np.intp)
            yield np.ascontiguousarray(added[picked]).tobytes()
        del added

    def _partition(
        self, order: list[int]
    ) -> tuple[list[int], list[list[int]], list[bytes]]:
        """Cut each large block (one tool's results, or the message turns) into
        cells (``partition.py``) and store its rows by cell, then id: the stored
        order, each partitioned block's cell bounds, and the centroids' bytes.
        Reads the block's vectors from disk a chunk at a time."""
        if not order:
            return order, [], []
        added = self._added()
        stored: list[int] = []
        bounds: list[list[int]] = []
        centroids: list[bytes] = []
        start = 0
        while start < len(order):
            kind, tool = self._keys[order[start]][:2]
            stop = start + 1
            while stop < len(order) and self._keys[order[stop]][:2] == (kind, tool):
                stop += 1
            block = np.array(order[start:stop], dtype=np.intp)

            def rows(at: npt.NDArray[np.intp], block: Any = block) -> Any:
                return np.asarray(added[block[at]])

            cell, fitted = cells_of(rows, len(block))
            if len(fitted):
                by_cell = np.argsort(cell, kind="stable")  # id order kept inside
                block = block[by_cell]
                edges = np.flatnonzero(np.diff(cell[by_cell])) + 1
                bounds.append([start, *(start + edges).tolist(), stop])
                centroids.append(fitted.astype("<f4").tobytes())
            stored.extend(block.tolist())
            start = stop
        return stored, bounds, centroids

    def close(self) -> None:
        """Drop the temporary files (the builder is unusable after)."""
        self._closer()

    def write(
        self,
        out: Path,
        *,
        sources: Sequence[str] = (),
        issues: Sequence[TraceIssue] = (),
    ) -> IndexManifest:
        """Write the index of everything added into ``out`` (created if missing;
        refused if not an empty folder), streaming every file, and return its
        manifest. ``sources`` (trace files) and ``issues`` (records the adapters
        could not use) are recorded, sorted. Raises ``ValueError`` when the split
        leaves no transition to fit, ``FileExistsError`` for a used ``out``. The
        builder is spent after (its temporary files are dropped)."""
        try:
            return self._write(out, sources, issues)
        finally:
            self.close()

    def _write(
        self, out: Path, sources: Sequence[str], issues: Sequence[TraceIssue]
    ) -> IndexManifest:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise FileExistsError(
                f"{out}: not an empty directory; an index is written once, choose a "
                "new directory"
            )
        self._flush()
        n, dims = len(self._keys), self.embedder.dimensions
        order, partitions, centroids = self._partition(
            sorted(range(n), key=self._keys.__getitem__)
        )
        splits = {
            g: group_split(g, self.held_out) for g in sorted(set(self._groups.values()))
        }
        fit = {g for g, s in splits.items() if s == "fit"}
        if n and not any(self._groups[lineage] in fit for lineage in self._lineage):
            raise ValueError(
                f"held_out {self.held_out!r} (--held-out) holds out every one of the "
                f"{len(splits)} lineage group(s), leaving no transition to ground a "
                "prediction on; use a smaller fraction (0 keeps every group in the fit "
                "partition)"
            )
        stored, new = self._table.canonical(self._nodes[i] for i in order)
        out.mkdir(parents=True, exist_ok=True)
        rows = (self._row(i, new) for i in order)
        header = _npy_header((n, dims))
        fields: dict[str, Any] = {
            "kind": KIND,
            "version": INDEX_VERSION,
            "embedder": self.embedder.id,
            "dimensions": dims,
            "query": QUERY,
            "transitions": n,
            "contexts": len(stored),
            "transitions_sha256": _write(
                out / TRANSITIONS, (_ENCODER.encode(r) + b"\n" for r in rows)
            ),
            "contexts_sha256": _write(
                out / CONTEXTS,
                (_ENCODER.encode(s) + b"\n" for s in self._table.stored(stored, new)),
            ),
            "vectors_sha256": _write(
                out / VECTORS, _chain(header, self._vector_chunks(order))
            ),
            "centroids_sha256": _write(
                out / CENTROIDS,
                _chain(
                    _npy_header((sum(map(len, centroids)) // (4 * dims), dims)),
                    centroids,
                ),
            ),
            "partitions": partitions,
            "lineages": dict(sorted(self._groups.items())),
            "groups": splits,
            "sources": sorted(set(sources)),
            "issues": sorted(set(issues), key=lambda i: (i.source, i.reason)),
        }
        unsigned = IndexManifest(id="0" * 64, **fields)
        manifest = IndexManifest(id=manifest_id(unsigned), **fields)
        (out / MANIFEST).write_bytes(msgspec.json.format(_ENCODER.encode(manifest)))
        return manifest

    def finish(
        self, *, sources: Sequence[str] = (), issues: Sequence[TraceIssue] = ()
    ) -> TransitionIndex:
        """The index of everything added, in memory (written to a temporary folder
        by :meth:`write` and loaded back). Raises ``ValueError`` when the split
        leaves no transition to fit."""
        with tempfile.TemporaryDirectory(prefix="worldline-index-") as folder:
            out = Path(folder) / "index"
            self.write(out, sources=sources, issues=issues)
            return load(out, embedder=self.embedder.id)


def _close(*held: IO[bytes] | ContextTable) -> None:
    for item in held:
        item.close()


def _npy_header(shape: tuple[int, int]) -> bytes:
    """The header ``np.save`` writes for a float32 array of ``shape``."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer,
        {
            "descr": np.lib.format.dtype_to_descr(np.dtype("<f4")),
            "fortran_order": False,
            "shape": shape,
        },
    )
    return buffer.getvalue()


def _chain(first: bytes, rest: Iterable[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def _write(path: Path, chunks: Iterable[bytes]) -> str:
    """Write ``chunks`` to ``path`` one at a time; the sha256 of what was written."""
    digest = hashlib.sha256()
    with path.open("wb") as f:
        for chunk in chunks:
            digest.update(chunk)
            f.write(chunk)
    return digest.hexdigest()

"""The read-only index of real transitions, and retrieval from it.

An index holds real action -> observation
:class:`~worldline.protocols.messages.Transition` records taken from traces, one unit
vector per transition, the lineage (trace or conversation family) each came from, and
that lineage's partition ("fit" or "held-out"). It is content-addressed: the manifest
carries the sha256 of the canonical ``transitions.jsonl`` and ``vectors.npy`` bytes, and
its own id is the sha256 of everything else it says, so :func:`load` refuses an artifact
that was changed.

Read-only by design: there is no way to add to an index. :func:`build` makes a new
one from ``Transition`` structs only, and a ``Transition`` is real by construction (the
type is "a real action -> observation pair taken from a trace"). Generated rollouts
and predicted observations are different types (a session's ``Prediction``, a
rollout artifact); :func:`build` raises ``TypeError`` for anything that is not a
``Transition``, so the world model can never retrieve its own earlier guesses as
precedent. The vectors array is not writeable.

What is embedded, for a query and for every transition alike, is
:func:`query_text` of the task, the context and the (candidate) action, never the
observation: retrieval looks for what happened after a similar action, it does not
search by the consequence it is meant to predict.

:func:`retrieve` removes the excluded lineages and the rows of the other partition
*before* scoring, so an evaluated episode cannot find a near-duplicate of itself in
its own conversation; it then ranks by cosine similarity (a dot product of unit
vectors), ties broken by transition id.

Artifact layout (a directory): ``manifest.json`` (:class:`IndexManifest`),
``transitions.jsonl`` (one msgspec-JSON transition per line, sorted by id) and
``vectors.npy`` (``np.save`` of a float32 ``[n, dimensions]`` array, row i =
transition i).

The embedder is the process's selected one
(:func:`worldline.actors.belief_model.embedding.active`, ``WORLDLINE_EMBEDDER``; the
hashing embedder by default) unless one is passed. Its id
and size are in the manifest, and an index is only ever loaded or queried with that
same embedder: anything else raises :class:`IndexRefused` naming both ids and the fix.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec
import numpy as np
import numpy.typing as npt

from worldline.actors.belief_model.embedding import ENV_EMBEDDER, active
from worldline.protocols.messages import Transition
from worldline.protocols.simulator import IndexManifest, TraceIssue

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Sequence
    from pathlib import Path

    from worldline.actors.belief_model.embedding import Embedder

__all__ = [
    "KIND",
    "MANIFEST",
    "TRANSITIONS",
    "VECTORS",
    "IndexRefused",
    "Split",
    "TransitionIndex",
    "build",
    "load",
    "manifest_id",
    "query_text",
    "retrieve",
    "save",
]

MANIFEST: Final = "manifest.json"
TRANSITIONS: Final = "transitions.jsonl"
VECTORS: Final = "vectors.npy"
KIND: Final = "real-transitions"

Split = Literal["fit", "held-out"]
Vectors = npt.NDArray[np.float32]

_CHUNK: Final = 2048  # rows gathered per block when filtering before scoring
_ENCODER: Final = msgspec.json.Encoder()
_TRANSITION: Final = msgspec.json.Decoder(Transition)
_MANIFEST: Final = msgspec.json.Decoder(IndexManifest)


class IndexRefused(ValueError):
    """An index artifact that must not be used: the message names the cause (and the
    file, when one is at fault) and the fix."""


def query_text(task: str, context: str, action: str) -> str:
    """What is embedded, for a query and for each transition: the task, the context
    and the action, never the observation."""
    return "\n".join((task, context, action))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _transitions_bytes(transitions: Iterable[Transition]) -> bytes:
    """The canonical ``transitions.jsonl``: one msgspec-JSON transition per line."""
    return b"".join(_ENCODER.encode(t) + b"\n" for t in transitions)


def _vectors_bytes(vectors: Vectors) -> bytes:
    """The canonical ``vectors.npy``: what ``np.save`` writes for the array."""
    buffer = io.BytesIO()
    np.save(buffer, vectors, allow_pickle=False)
    return buffer.getvalue()


def manifest_id(manifest: IndexManifest) -> str:
    """The sha256 of every field of the manifest but ``id`` (sorted-key JSON), so
    the id names exactly what the manifest says."""
    fields: dict[str, Any] = msgspec.structs.asdict(manifest)
    del fields["id"]
    return _sha256(msgspec.json.encode(msgspec.to_builtins(fields), order="sorted"))


def _lineage_split(lineage: str, held_out: float) -> Split:
    """A stable partition for a lineage: the first 8 bytes of its sha256, as a
    fraction of 2**64, below ``held_out`` -> held-out."""
    point = int.from_bytes(hashlib.sha256(lineage.encode()).digest()[:8], "big")
    return "held-out" if point / 2.0**64 < held_out else "fit"


@dataclass(frozen=True)
class TransitionIndex:
    """A read-only index: transitions sorted by id, ``vectors[i]`` embeds
    ``transitions[i]`` (float32, unit, not writeable). Make one with :func:`build`
    or :func:`load`. Construction checks that the parts are exactly what the
    manifest certifies (counts, shape, order, lineages, the manifest id and both
    content hashes), so no index can hold a row its manifest does not name.

    Equality compares the manifest (which carries the vectors' sha256) and the
    transitions.
    """

    manifest: IndexManifest
    transitions: tuple[Transition, ...]
    vectors: Vectors = field(compare=False, repr=False)
    _lineage: npt.NDArray[np.int32] = field(init=False, compare=False, repr=False)
    _codes: dict[str, int] = field(init=False, compare=False, repr=False)
    _held_out: npt.NDArray[np.bool_] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        m = self.manifest
        if m.kind != KIND:
            raise IndexRefused(
                f"kind {m.kind!r}: an index holds only {KIND!r}; build it from real "
                "Transition records (rollouts and predictions are never indexed)"
            )
        if m.id != manifest_id(m):
            raise IndexRefused(
                f"{MANIFEST}: its id does not match its content (changed after it was "
                "built); rebuild the index from its traces"
            )
        vectors = np.ascontiguousarray(self.vectors, dtype=np.float32)
        n = len(self.transitions)
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
        codes = {lineage: i for i, lineage in enumerate(sorted(m.lineages))}
        lineage = np.empty(n, dtype=np.int32)
        previous = None
        for i, t in enumerate(self.transitions):
            if not isinstance(t, Transition):
                raise TypeError(
                    f"row {i} is a {type(t).__name__}, not a real Transition"
                )
            if previous is not None and t.id <= previous:
                raise IndexRefused(
                    f"{TRANSITIONS}: ids not strictly sorted at {t.id!r}; rebuild "
                    "the index"
                )
            previous = t.id
            code = codes.get(t.lineage)
            if code is None:
                raise IndexRefused(
                    f"{MANIFEST}: lineage {t.lineage!r} of {t.id!r} has no "
                    "partition; rebuild the index"
                )
            lineage[i] = code
        if _sha256(_transitions_bytes(self.transitions)) != m.transitions_sha256:
            raise IndexRefused(
                f"{TRANSITIONS}: sha256 does not match the manifest; an index is "
                "never changed: build a new one"
            )
        if _sha256(_vectors_bytes(vectors)) != m.vectors_sha256:
            raise IndexRefused(
                f"{VECTORS}: sha256 does not match the manifest; an index is never "
                "changed: build a new one"
            )
        held = np.array([m.lineages[name] == "held-out" for name in codes], dtype=bool)
        vectors.flags.writeable = False
        object.__setattr__(self, "vectors", vectors)
        object.__setattr__(self, "_codes", codes)
        object.__setattr__(self, "_lineage", lineage)
        object.__setattr__(
            self, "_held_out", held[lineage] if n else np.zeros(0, dtype=bool)
        )


def _embed_all(transitions: Sequence[Transition], embedder: Embedder) -> Vectors:
    """One vector per transition, each distinct text embedded once."""
    rows: dict[str, int] = {}
    which = [
        rows.setdefault(query_text(t.task, t.context, t.action), len(rows))
        for t in transitions
    ]
    unique = embedder.embed_many(list(rows)).astype(np.float32)
    if unique.shape != (len(rows), embedder.dimensions):
        raise ValueError(
            f"embedder {embedder.id} gave shape {unique.shape} for {len(rows)} "
            f"texts, not (n, {embedder.dimensions})"
        )
    return unique[np.array(which, dtype=np.intp)].reshape(
        len(transitions), embedder.dimensions
    )


def _refused(index_embedder: str, embedder: str, what: str) -> IndexRefused:
    return IndexRefused(
        f"{what} embedded with {index_embedder!r}, not {embedder!r} (this process's "
        "embedder); similarity across two embedding spaces means nothing: load it "
        "with the embedder it names, or rebuild it with this one (select one with "
        f"{ENV_EMBEDDER}=hashing, wordllama or minilm; rebuild with worldline sim "
        "index)"
    )


def build(
    transitions: Iterable[Transition],
    *,
    sources: Sequence[str] = (),
    issues: Sequence[TraceIssue] = (),
    held_out: float = 0.2,
    embedder: Embedder | None = None,
) -> TransitionIndex:
    """A new index of real transitions: deduplicated by id (a repeated id must carry
    the same pair), sorted by id, each lineage assigned to "fit" or "held-out" by a
    stable hash (a ``held_out`` fraction of them held out). ``sources`` (trace files)
    and ``issues`` (records the adapters could not use) are recorded in the manifest,
    sorted so the same inputs give the same id.

    Only :class:`~worldline.protocols.messages.Transition` is accepted: rollouts and
    predicted observations are other types and raise ``TypeError``. ``embedder``
    defaults to the process's selected one; its id is recorded in the manifest.
    """
    if not 0.0 <= held_out <= 1.0:
        raise ValueError(f"held_out {held_out!r}: a fraction in [0, 1]")
    unique: dict[str, Transition] = {}
    for t in transitions:
        if not isinstance(t, Transition):
            raise TypeError(
                f"{type(t).__name__} is not a Transition: an index holds only real "
                "action -> observation pairs from traces (rollouts and predictions "
                "are never indexed)"
            )
        kept = unique.setdefault(t.id, t)
        if kept != t:
            raise ValueError(
                f"transition id {t.id!r} names two different pairs; ids are "
                "content-derived, fix the adapter that made them"
            )
    ordered = tuple(unique[i] for i in sorted(unique))
    embedder = embedder if embedder is not None else active()
    vectors = _embed_all(ordered, embedder)
    lineages: dict[str, Split] = {
        name: _lineage_split(name, held_out)
        for name in sorted({t.lineage for t in ordered})
    }
    fields: dict[str, Any] = {
        "embedder": embedder.id,
        "dimensions": embedder.dimensions,
        "transitions": len(ordered),
        "transitions_sha256": _sha256(_transitions_bytes(ordered)),
        "vectors_sha256": _sha256(_vectors_bytes(vectors)),
        "lineages": lineages,
        "sources": sorted(set(sources)),
        "issues": sorted(set(issues), key=lambda i: (i.source, i.reason)),
    }
    unsigned = IndexManifest(id="0" * 64, **fields)
    manifest = IndexManifest(id=manifest_id(unsigned), **fields)
    return TransitionIndex(manifest=manifest, transitions=ordered, vectors=vectors)


def save(index: TransitionIndex, out: Path) -> None:
    """Write the artifact into ``out`` (created if missing; refused if not empty:
    an index is never updated in place)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(
            f"{out}: not an empty directory; an index is written once, choose a new "
            "directory"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / TRANSITIONS).write_bytes(_transitions_bytes(index.transitions))
    (out / VECTORS).write_bytes(_vectors_bytes(index.vectors))
    (out / MANIFEST).write_bytes(msgspec.json.format(_ENCODER.encode(index.manifest)))


def _read(path: Path, name: str) -> bytes:
    try:
        return (path / name).read_bytes()
    except OSError as exc:
        raise IndexRefused(
            f"{name}: cannot be read ({exc.strerror}); point at a directory written "
            "by save()"
        ) from exc


def load(path: Path, *, embedder: Embedder | str | None = None) -> TransitionIndex:
    """Read an artifact written by :func:`save`, verifying it before use: the kind
    is real transitions, the embedder is ``embedder`` (default: the process's
    selected one, or the embedder id given), the manifest id matches its content
    and both files match their sha256. Anything else raises
    :class:`IndexRefused` naming the cause and the fix."""
    raw = _read(path, MANIFEST)
    try:
        head = msgspec.json.decode(raw, type=dict[str, Any])
    except msgspec.DecodeError as exc:
        raise IndexRefused(f"{MANIFEST}: not a manifest ({exc}); rebuild") from exc
    kind = head.get("kind", KIND)
    if kind != KIND:
        raise IndexRefused(
            f"{MANIFEST}: kind {kind!r}, not {KIND!r}; only real transitions are "
            "indexed (rollouts and predictions are evaluation artifacts): rebuild "
            "the index from real traces"
        )
    if embedder is None:
        embedder = active()
    expected = embedder if isinstance(embedder, str) else embedder.id
    if head.get("embedder") != expected:
        raise _refused(str(head.get("embedder")), expected, f"{MANIFEST}:")
    try:
        manifest = _MANIFEST.decode(raw)
    except msgspec.DecodeError as exc:
        raise IndexRefused(f"{MANIFEST}: invalid ({exc}); rebuild the index") from exc
    if manifest.id != manifest_id(manifest):
        raise IndexRefused(
            f"{MANIFEST}: its id does not match its content (changed after it was "
            "built); rebuild the index from its traces"
        )
    lines = _read(path, TRANSITIONS)
    if _sha256(lines) != manifest.transitions_sha256:
        raise IndexRefused(
            f"{TRANSITIONS}: sha256 does not match the manifest (changed after it "
            "was built); rebuild the index from its traces"
        )
    blob = _read(path, VECTORS)
    if _sha256(blob) != manifest.vectors_sha256:
        raise IndexRefused(
            f"{VECTORS}: sha256 does not match the manifest (changed after it was "
            "built); rebuild the index from its traces"
        )
    try:
        transitions = tuple(_TRANSITION.decode(line) for line in lines.splitlines())
        vectors = np.load(io.BytesIO(blob), allow_pickle=False)
    except (msgspec.DecodeError, ValueError) as exc:
        raise IndexRefused(f"unreadable index content ({exc}); rebuild") from exc
    if vectors.dtype != np.float32:
        raise IndexRefused(f"{VECTORS}: dtype {vectors.dtype}, not float32; rebuild")
    return TransitionIndex(manifest=manifest, transitions=transitions, vectors=vectors)


def _eligible(
    index: TransitionIndex,
    exclude_lineages: Collection[str],
    split: Literal["fit", "held-out", "all"],
) -> npt.NDArray[np.bool_]:
    n = len(index.transitions)
    if split == "all":
        keep = np.ones(n, dtype=bool)
    elif split == "held-out":
        keep = index._held_out.copy()
    elif split == "fit":
        keep = ~index._held_out
    else:
        raise ValueError(f"split {split!r}: one of 'fit', 'held-out', 'all'")
    excluded = [index._codes[x] for x in set(exclude_lineages) if x in index._codes]
    if excluded:
        keep &= ~np.isin(index._lineage, np.array(excluded, dtype=np.int32))
    return keep


def retrieve(
    index: TransitionIndex,
    *,
    task: str,
    context: str,
    action: str,
    exclude_lineages: Collection[str] = (),
    k: int = 5,
    split: Literal["fit", "held-out", "all"] = "fit",
    embedder: Embedder | None = None,
) -> list[tuple[Transition, float]]:
    """The ``k`` transitions most similar to the task, context and candidate action,
    with their cosine similarity, best first (ties by id).

    Excluded lineages and rows outside ``split`` are removed before any score is
    computed: they are never scored, so they can never be returned. The query is
    embedded with ``embedder`` (default: the process's selected one), which must be
    the index's (else :class:`IndexRefused`).
    """
    if k < 0:
        raise ValueError(f"k {k}: at least 0")
    embedder = embedder if embedder is not None else active()
    if index.manifest.embedder != embedder.id:
        raise _refused(index.manifest.embedder, embedder.id, "the index was")
    keep = _eligible(index, exclude_lineages, split)
    if k == 0 or not keep.any():
        return []
    query = embedder.embed(query_text(task, context, action)).astype(np.float32)
    rows = np.flatnonzero(keep)
    parts = []
    for start in range(0, len(keep), _CHUNK):
        block = keep[start : start + _CHUNK]
        if block.any():
            parts.append(index.vectors[start : start + _CHUNK][block] @ query)
    scores = np.concatenate(parts)
    if k < len(scores):
        # Every row scoring at least the k-th best, so ties at the edge go by id.
        kth = np.partition(-scores, k - 1)[k - 1]
        candidates = np.flatnonzero(-scores <= kth)
    else:
        candidates = np.arange(len(scores))
    # Rows are in id order, so the row number breaks ties by id.
    order = np.lexsort((rows[candidates], -scores[candidates]))[:k]
    return [
        (index.transitions[int(rows[c])], float(scores[c])) for c in candidates[order]
    ]

"""Build an index by streaming transitions into it, in memory that grows with what
is stored (each context message once), not with the square of a conversation.

:class:`IndexBuilder` takes transitions one at a time (:meth:`~IndexBuilder.add`),
interns each context as shared segments (``storage.py``), keeps a compact row,
embeds in batches, and forgets the transition; :meth:`~IndexBuilder.finish` sorts the
rows into stored order, numbers the segments canonically, splits the lineage groups
into fit and held-out, and certifies the result in a manifest. The same transitions
give the same index (bytes and id) in any order.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Final

import msgspec
import numpy as np

from worldline.actors.belief_model.embedding import active
from worldline.actors.simulator.index import (
    KIND,
    Split,
    TransitionIndex,
    _kind_key,
    _lines_sha256,
    _sha256,
    _vectors_bytes,
    manifest_id,
)
from worldline.actors.simulator.storage import (
    QUERY,
    ContextTable,
    Row,
    embed_pairs,
    recent,
)
from worldline.protocols.messages import Transition
from worldline.protocols.simulator import INDEX_VERSION, IndexManifest, TraceIssue

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from worldline.actors.belief_model.embedding import Embedder
    from worldline.actors.simulator.storage import Vectors

__all__ = ["BATCH", "IndexBuilder", "group_split"]

BATCH: Final = 512  # transitions embedded together
_ENCODER: Final = msgspec.json.Encoder()


def group_split(group: str, held_out: float) -> Split:
    """A stable partition for a lineage group: the first 8 bytes of the sha256 of
    its name, as a fraction of 2**64, below ``held_out`` -> held-out."""
    point = int.from_bytes(hashlib.sha256(group.encode()).digest()[:8], "big")
    return "held-out" if point / 2.0**64 < held_out else "fit"


class IndexBuilder:
    """Streams real transitions into a new index (see the module docstring).

    ``held_out`` is the fraction of lineage groups kept out of the fit partition,
    in [0, 1); ``embedder`` defaults to the process's selected one.
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
        self._table = ContextTable()
        self._rows: list[Row] = []
        self._digests: dict[str, bytes] = {}  # id -> digest of the transition
        self._groups: dict[str, str] = {}  # lineage -> group
        self._pending: list[tuple[str, str]] = []  # (action, recent window)
        self._vectors: list[Vectors] = []

    def add(self, t: Transition, group: str | None = None) -> None:
        """Add one real transition; ``group`` is its lineage's group (default: the
        lineage itself). A repeated id must carry the same transition, and a lineage
        stays in one group (else ``ValueError``)."""
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
        digest = hashlib.sha256(_ENCODER.encode(t)).digest()
        kept = self._digests.get(t.id)
        if kept is not None:
            if kept != digest:
                raise ValueError(
                    f"transition id {t.id!r} names two different pairs; ids are "
                    "content-derived, fix the adapter that made them"
                )
            return
        self._digests[t.id] = digest
        self._rows.append(
            Row(
                id=t.id,
                lineage=t.lineage,
                task=self._table.task(t.task),
                context=self._table.context(t.context),
                action=t.action,
                observation=t.observation,
                pairing=t.pairing,
                source=t.source,
                final=t.final,
            )
        )
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
            self._vectors.append(embed_pairs(self._pending, self.embedder))
            self._pending.clear()

    def finish(
        self, *, sources: Sequence[str] = (), issues: Sequence[TraceIssue] = ()
    ) -> TransitionIndex:
        """The index of everything added. ``sources`` (trace files) and ``issues``
        (records the adapters could not use) are recorded in the manifest, sorted.
        Raises ``ValueError`` when the split leaves no transition to fit."""
        self._flush()
        dims = self.embedder.dimensions
        added = (
            np.concatenate(self._vectors)
            if self._vectors
            else np.zeros((0, dims), dtype=np.float32)
        )
        order = sorted(range(len(self._rows)), key=lambda i: _kind_key(self._rows[i]))
        ordered = [self._rows[i] for i in order]
        segments, new = self._table.canonical(ordered)
        rows = tuple(
            msgspec.structs.replace(
                r,
                task=new[r.task] if r.task >= 0 else -1,
                context=new[r.context] if r.context >= 0 else -1,
            )
            for r in ordered
        )
        vectors = np.ascontiguousarray(
            added[np.array(order, dtype=np.intp)].reshape(len(rows), dims),
            dtype=np.float32,
        )
        splits = {
            g: group_split(g, self.held_out) for g in sorted(set(self._groups.values()))
        }
        fit = {g for g, s in splits.items() if s == "fit"}
        if rows and not any(self._groups[r.lineage] in fit for r in rows):
            raise ValueError(
                f"held_out {self.held_out!r} (--held-out) holds out every one of the "
                f"{len(splits)} lineage group(s), leaving no transition to ground a "
                "prediction on; use a smaller fraction (0 keeps every group in the fit "
                "partition)"
            )
        fields: dict[str, Any] = {
            "kind": KIND,
            "version": INDEX_VERSION,
            "embedder": self.embedder.id,
            "dimensions": dims,
            "query": QUERY,
            "transitions": len(rows),
            "contexts": len(segments),
            "transitions_sha256": _lines_sha256(rows),
            "contexts_sha256": _lines_sha256(segments),
            "vectors_sha256": _sha256(_vectors_bytes(vectors)),
            "lineages": dict(sorted(self._groups.items())),
            "groups": splits,
            "sources": sorted(set(sources)),
            "issues": sorted(set(issues), key=lambda i: (i.source, i.reason)),
        }
        unsigned = IndexManifest(id="0" * 64, **fields)
        manifest = IndexManifest(id=manifest_id(unsigned), **fields)
        return TransitionIndex(manifest, rows, tuple(segments), vectors, hashed=True)

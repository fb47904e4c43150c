"""The simulator's own track record: how often the real outcome was among its
forecast's, by tool and for messages, measured on the index itself.

For a deterministic sample of the index's transitions (those whose ids hash lowest,
at most :data:`SAMPLE`), the simulator forecasts the transition's action in its
context with the transition's whole group left out (so none of the task's other
trials can answer for it), exactly as :func:`~worldline.actors.simulator.forecast.
forecast` answers anyone. A forecast *hits* when one of its outcomes reads as the
real observation: token-F1 at least :data:`HIT_F1` (lower-cased ``\\w+`` tokens,
multiset overlap). A forecast with no grounding is an abstention, not a miss. The
record is kept per key: ``tool:<name>`` for a tool call, ``message`` for anything
else.

It is computed once, when ``worldline sim index`` writes the index
(``track.json`` beside the manifest, naming the manifest's id), and read when the
simulator loads that index. Forecast replies carry the record of their move's key,
and ``before --forecast`` shows a forecast only where the record supports it
(``ForecastTrack.supported``): at least :data:`MIN_TRIED` grounded forecasts of that
key, of which at least :data:`MIN_HIT_RATE` hit.
"""

from __future__ import annotations

import hashlib
import heapq
import re
from collections import Counter
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.actors.simulator.forecast import forecast, move_kind
from worldline.actors.simulator.storage import call_tool
from worldline.protocols.messages import ForecastTrack
from worldline.protocols.rpc import TRACK_MIN_HIT_RATE, TRACK_MIN_TRIED

if TYPE_CHECKING:
    from pathlib import Path

    from worldline.actors.simulator.index import TransitionIndex

__all__ = [
    "FILE",
    "HIT_F1",
    "MIN_HIT_RATE",
    "MIN_TRIED",
    "SAMPLE",
    "TrackRecord",
    "evaluate",
    "key_of",
    "load",
    "save",
    "token_f1",
]

FILE: Final = "track.json"
SAMPLE: Final = 200  # transitions forecast for the record, at most
HIT_F1: Final = 0.6  # an outcome this close to the real observation is a hit
MIN_TRIED: Final = TRACK_MIN_TRIED  # grounded forecasts before a record counts
MIN_HIT_RATE: Final = TRACK_MIN_HIT_RATE  # share of them that must have hit

_TOKEN: Final = re.compile(r"\w+")


class TrackRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The track record of one index (``index``: its manifest id), by key."""

    index: str
    sample: int
    keys: tuple[ForecastTrack, ...] = ()

    def of(self, move: str) -> ForecastTrack:
        """The record of ``move``'s key (all zeros when the sample held none)."""
        key = key_of(move)
        return next((k for k in self.keys if k.key == key), ForecastTrack(key=key))


def token_f1(predicted: str, real: str) -> float:
    """Token-F1 (lower-cased ``\\w+`` tokens, multiset overlap); two texts without
    tokens score 1, one without scores 0."""
    a, b = _TOKEN.findall(predicted.lower()), _TOKEN.findall(real.lower())
    if not a or not b:
        return float(a == b)
    common = sum((Counter(a) & Counter(b)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(a), common / len(b)
    return 2 * precision * recall / (precision + recall)


def key_of(move: str) -> str:
    """``tool:<name>`` for a tool call (``name(arguments)``), else ``message``."""
    if move_kind(move) == "tool":
        return f"tool:{call_tool(move)}"
    return "message"


def _hash(transition_id: str) -> bytes:
    return hashlib.blake2b(transition_id.encode(), digest_size=8).digest()


def evaluate(index: TransitionIndex, *, sample: int = SAMPLE) -> TrackRecord:
    """Forecast a deterministic sample of the index's own transitions, each with its
    group left out, and count per key how often the real outcome was among the
    forecast's."""
    chosen = heapq.nsmallest(
        sample, ((_hash(t.id), i) for i, t in enumerate(index.transitions))
    )
    counts: dict[str, list[int]] = {}
    for _, i in chosen:
        t = index.transition(i)
        reply = forecast(
            index,
            t.action,
            context=t.context,
            exclude_lineages=[index.group_of(t.lineage)],
        )
        tally = counts.setdefault(key_of(t.action), [0, 0, 0])
        tally[0] += 1
        if reply.grounded:
            tally[1] += 1
            real = t.observation
            if any(token_f1(o.observation, real) >= HIT_F1 for o in reply.outcomes):
                tally[2] += 1
    return TrackRecord(
        index=index.manifest.id,
        sample=len(chosen),
        keys=tuple(
            ForecastTrack(key=key, asked=a, grounded=g, hits=h)
            for key, (a, g, h) in sorted(counts.items())
        ),
    )


def save(record: TrackRecord, out: Path) -> None:
    """Write ``record`` beside the index in ``out``."""
    (out / FILE).write_bytes(msgspec.json.format(msgspec.json.encode(record)) + b"\n")


def load(path: Path, index_id: str) -> TrackRecord | None:
    """The record kept beside the index in ``path``, or None when there is none or
    it belongs to another index (rebuilt since: its record is stale)."""
    try:
        record = msgspec.json.decode((path / FILE).read_bytes(), type=TrackRecord)
    except (FileNotFoundError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return record if record.index == index_id else None

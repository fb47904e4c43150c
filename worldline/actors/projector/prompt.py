"""The worldview's prompt: rendered from the typed view (never parsed back), and
kept under :data:`MAX_TOKENS` by the estimate ``ceil(len(prompt) / 4)`` (about four
characters per token for English text)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Final

import msgspec

from worldline.protocols.worldview import SLICES, Leaf, Worldview

__all__ = [
    "EPOCH",
    "FLOOR",
    "MAX_TOKENS",
    "TEXT_CHARS",
    "estimate_tokens",
    "fit",
    "render",
]

MAX_TOKENS: Final = 2000
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)  # worldview.EPOCH: no belief shown
TEXT_CHARS: Final = 160  # one leaf's text in the prompt
FLOOR: Final = 1  # a slice is never cut below this many leaves


def render(view: Worldview) -> str:
    """The prose a model reads, rendered from the typed view (never parsed back)."""
    # The epoch is no clock anyone read: a standing view that shows no belief yet.
    when = "before any belief" if view.at == EPOCH else f"at {view.at.isoformat()}"
    lines = [
        f"# Worldview for {view.agent} in {view.world} {when}",
        f"Move: {view.query}",
        f"Clarity: {view.clarity:.2f}",
    ]
    if view.calibration:
        lines.append(f"Confidence: calibrated ({view.calibration})")
    for name in SLICES:
        leaves: list[Leaf] = getattr(view, name)
        lines.append(f"## {name}")
        for leaf in leaves:
            text = leaf.text
            if len(text) > TEXT_CHARS:
                text = text[:TEXT_CHARS] + "..."
            parts = [f"- {text}"]
            if leaf.status:
                parts.append(f"[{leaf.status}]")
            if leaf.confidence is not None:
                parts.append(f"({leaf.confidence:.2f})")
            if leaf.flags:
                parts.append("{" + ", ".join(leaf.flags) + "}")
            if leaf.said:
                parts.append(f"[said {leaf.said}]")
            if leaf.trace:
                parts.append("<- " + ", ".join(leaf.trace[:4]))
            lines.append(" ".join(parts))
    return "\n".join(lines) + "\n"


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def fit(view: Worldview) -> Worldview:
    """Render; while over the token bound, drop the last leaf of the longest slice
    that has more than one (deterministic)."""
    while True:
        prompt = render(view)
        tokens = estimate_tokens(prompt)
        if tokens < MAX_TOKENS:
            return msgspec.structs.replace(view, prompt=prompt, tokens=tokens)
        sizes = {name: len(getattr(view, name)) for name in SLICES}
        name = max(sizes, key=lambda k: (sizes[k], k))
        if sizes[name] <= FLOOR:
            return msgspec.structs.replace(view, prompt=prompt, tokens=tokens)
        view = msgspec.structs.replace(view, **{name: getattr(view, name)[:-1]})

"""The projector's batch step that embeds belief texts before the cards are written
(issue 27): with a semantic embedder, every card carries its text's vector, and a
sentence encoder is far cheaper run over a batch than text by text.

:func:`prepare` is the projector input's ``prepare_batch`` step: outside the write
transaction and off the event loop (a worker thread), it embeds, in one
``embed_many`` call per :data:`CHUNK` texts, the distinct texts of the batch's
belief changes (and each after its contexts: :mod:`.context`), and hands the
handlers ``{text: float32 bytes}`` (``Context.batch_prepared``), the very
bytes a card would embed by itself (:func:`.index.index_writes` falls back to
that for a text not in it). With the default hashing embedder it does nothing:
cards carry no vector then. Reads never embed a card; ``before`` embeds only its query.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import anyio.to_thread
import msgspec
import numpy as np

from worldline.actors.belief_model import embedding
from worldline.actors.projector import context
from worldline.protocols.messages import PROJECTOR_INBOX, BeliefChanged

if TYPE_CHECKING:
    from nats.js import JetStreamContext

__all__ = ["CHUNK", "embedded", "prepare"]

CHUNK: Final = 64  # texts per embed_many call


def embedded(texts: list[str]) -> dict[str, bytes]:
    """``{text: float32 bytes of its vector}`` from the active embedder, in chunks."""
    active = embedding.active()
    found: dict[str, bytes] = {}
    for start in range(0, len(texts), CHUNK):
        chunk = texts[start : start + CHUNK]
        rows = active.embed_many(chunk).astype(np.float32)
        found.update((t, row.tobytes()) for t, row in zip(chunk, rows, strict=True))
    return found


async def prepare(
    js: JetStreamContext | None, payloads: list[bytes]
) -> dict[str, bytes] | None:
    """The vectors of the belief texts in ``payloads`` (None with the hashing
    embedder, or when the batch changes no belief)."""
    del js  # the step reads only the batch
    if isinstance(embedding.active(), embedding.HashingEmbedder):
        return None
    texts: dict[str, None] = {}
    for payload in payloads:
        try:
            change = PROJECTOR_INBOX.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            continue  # the store dead-letters it
        if isinstance(change, BeliefChanged) and change.belief.text.strip():
            texts.setdefault(change.belief.text)
            # and the text after its contexts, which the card's vector reads too
            if near := context.in_context(change.evidence, change.belief.text):
                texts.setdefault(near)
    if not texts:
        return None
    return await anyio.to_thread.run_sync(embedded, list(texts))

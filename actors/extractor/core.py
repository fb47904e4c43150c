"""Extractor core: turns an artifact into belief ops. Pure, deterministic, no network.

For now each non-empty statement (a line, or a sentence within a line) becomes a
``claim`` with no stated confidence, attributed to the observation's author and source.
Ids derive from the observation id and position, so re-extracting the same artifact
yields the same ops (and JetStream de-duplicates them by Nats-Msg-Id).

Stateless: replicas share one durable on the OBS work queue.
Output: ``AddBelief`` on ``wl.<world>.ops.extractor``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from actors.runtime.errors import InvalidInput
from actors.runtime.spec import Context, Outgoing, Reader, Step
from protocols.messages import AddBelief, Observe
from protocols.subjects import ops

__all__ = ["AUTHOR", "MAX_STATEMENTS", "handle", "statements"]

AUTHOR: Final = "extractor"
MAX_STATEMENTS: Final = 512  # per artifact; more is an error, never a silent cut
MAX_STATEMENT_CHARS: Final = 4096

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_BULLET = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s+")


def statements(text: str) -> list[str]:
    """Split an artifact into statements: lines, then sentences; bullets stripped."""
    found: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        line = _BULLET.sub("", line).strip()
        if not line or line.startswith("#"):
            continue
        for sentence in _SENTENCE_END.split(line):
            sentence = " ".join(sentence.split())
            if sentence and sentence not in seen:
                seen.add(sentence)
                found.append(sentence[:MAX_STATEMENT_CHARS])
    return found


def handle(reader: Reader, obs: Observe, ctx: Context) -> Step:
    """Extract one ``AddBelief`` per statement of the artifact.

    Raises:
        InvalidInput: the body names another author than the subject, or the artifact
            holds more than :data:`MAX_STATEMENTS` statements.
    """
    if obs.author != ctx.author:
        raise InvalidInput(
            f"observation {obs.obs_id} names author {obs.author!r} but was published "
            f"on {ctx.subject!r}; agents publish only their own observations"
        )
    found = statements(obs.text)
    if len(found) > MAX_STATEMENTS:
        raise InvalidInput(
            f"artifact holds {len(found)} statements, more than {MAX_STATEMENTS}; "
            "split it into smaller observations"
        )
    source = f"{obs.author}:{obs.source}" if obs.source else obs.author
    out = []
    for index, text in enumerate(found):
        # Derived from (world, observation, position): stable, and short whatever
        # the length of the observation id.
        key = f"{ctx.world}\0{obs.obs_id}\0{index}".encode()
        digest = hashlib.sha256(key).hexdigest()[:24]
        op_id = f"op-{digest}"
        op = AddBelief(
            op_id=op_id,
            author=AUTHOR,
            at=obs.at,
            belief_id=f"b-{digest}",
            text=text,
            source=source,
        )
        out.append(Outgoing(subject=ops(ctx.world, AUTHOR), message=op, msg_id=op_id))
    return Step(out=out)

"""Outputs whose ``Nats-Msg-Id`` someone else used first (issue 23, F11/F12).

JetStream de-duplicates by ``Nats-Msg-Id`` across a whole stream, whatever the
subject. In the streams agents write too (``AGENT_STREAMS``: ``WL_OBS``, ``WL_OPS``)
an agent that can compute the deterministic Msg-Id of an actor's output (the
extractor's statements hash the world, the observing agent, the observation id and a
position, all known to whoever expects the artifact) could publish junk with that id on
its own subject first: the actor's publish would get a duplicate PubAck, and its
output would never be stored.

So a duplicate PubAck from such a stream is checked (:func:`stored_as_ours`): the
message stored at the sequence it names is read (``STREAM.MSG.GET``; an actor holds
that right for these streams, ``worldline/ops/creds.py``) and compared by subject.
On the actor's own subject it is a genuine repeat (a retry, a redelivered input, a
replica's identical output): nothing to do. On another subject the output was
pre-empted: it is published again under a Msg-Id derived from the original and the
forger's sequence (:func:`rescue_id`), deterministic, so a retry after a crash finds
its own copy there and stays a no-op. A forger that pre-empts that id as well is
followed for :data:`MAX_ROUNDS` rounds; then the output goes without a Msg-Id (its
consumers are idempotent by op and evidence id, docs/runtime.md). Each pre-emption is
logged and counted (``worldline_outputs_preempted_total``).

A check that cannot read the stored message (no answer, a credentials file written
before the right existed) is logged and the PubAck taken as it says, as before; the
connection then skips the check for :data:`PAUSE` seconds, so a burst of repeats
(512 statements of a re-observed artifact) does not wait out one timeout each.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import TYPE_CHECKING, Final

import anyio
import nats.errors
import nats.js.errors
from nats.js import api

from worldline.actors.runtime.bus import describe
from worldline.actors.runtime.metrics import count_preempted
from worldline.protocols.subjects import AGENT_STREAMS

if TYPE_CHECKING:
    from nats.js import JetStreamContext

__all__ = ["CHECKED", "MAX_ROUNDS", "rescue_id", "stored_as_ours"]

log = logging.getLogger("worldline.actor")

CHECKED: Final = frozenset(s.name for s in AGENT_STREAMS)
MAX_ROUNDS: Final = 4  # derived Msg-Ids tried before publishing without one
CHECK_TIMEOUT: Final = 5.0  # seconds for one read or publish of the check
PAUSE: Final = 60.0  # seconds a connection skips the check after a read failed
# Per connection: the monotonic time until which the check is skipped.
_paused: weakref.WeakKeyDictionary[object, float] = weakref.WeakKeyDictionary()


def rescue_id(msg_id: str, forged_seq: int) -> str:
    """The Msg-Id an output pre-empted by the message at ``forged_seq`` is published
    under again: the original's, marked, with that sequence."""
    return f"{msg_id}~pre-empted@{forged_seq}"


async def stored_as_ours(
    js: JetStreamContext,
    subject: str,
    payload: bytes,
    headers: dict[str, str],
    ack: api.PubAck,
) -> None:
    """Make sure the output whose publish ``ack`` answered is in the stream.

    Nothing to do unless ``ack`` is a duplicate in one of :data:`CHECKED`; then the
    stored message decides (module docstring).

    Raises:
        nats.errors.Error, TimeoutError: publishing the output again failed; the
            caller retries the batch, which repeats these steps exactly.
    """
    original = headers.get(api.Header.MSG_ID, "")
    for rounds in range(MAX_ROUNDS + 1):
        if not ack.duplicate or ack.stream not in CHECKED:
            return
        holder = await _stored_subject(js, ack.stream, ack.seq, subject)
        if holder == subject:
            return
        count_preempted()
        again = dict(headers)
        if rounds < MAX_ROUNDS:
            again[api.Header.MSG_ID] = rescue_id(original, ack.seq)
        else:
            del again[api.Header.MSG_ID]
        log.warning(
            "output %s on %s was pre-empted: %s sequence %d holds that Msg-Id on %s; "
            "publishing it again as %s",
            original,
            subject,
            ack.stream,
            ack.seq,
            holder or "(a message no longer there)",
            again.get(api.Header.MSG_ID, "(no Msg-Id)"),
        )
        ack = await js.publish(subject, payload, timeout=CHECK_TIMEOUT, headers=again)


async def _stored_subject(
    js: JetStreamContext, stream: str, seq: int, ours: str
) -> str | None:
    """The subject of the message at ``seq`` in ``stream``: ``None`` if it is gone,
    ``ours`` if it cannot be read (the PubAck is then taken as it says)."""
    nc = js._nc
    if _paused.get(nc, 0.0) > time.monotonic():
        return ours
    try:
        with anyio.fail_after(CHECK_TIMEOUT):
            stored = await js.get_msg(stream, seq)
    except nats.js.errors.NotFoundError:
        return None
    except (nats.errors.Error, TimeoutError) as exc:
        _paused[nc] = time.monotonic() + PAUSE
        log.warning(
            "duplicate PubAck for %s at %s sequence %d not checked (%s); taken as a "
            "repeat of its own output, and the check paused for %.0f s (credentials "
            "older than the extractor's STREAM.MSG.GET right? run `worldline creds`)",
            ours,
            stream,
            seq,
            describe(exc),
            PAUSE,
        )
        return ours
    return stored.subject

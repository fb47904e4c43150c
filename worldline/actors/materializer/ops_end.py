"""The op log's end as the materializer's posterior input checks it: the
``prepare_batch`` step of that input (``actors/runtime/prepare.py``).

A real posterior is caused by an op already in ``WL_OPS``, so its ``cause_seq`` is at
most that stream's last sequence. :class:`OpsEnd` keeps the last sequence it saw and
asks JetStream again (one ``stream_info`` call) only when a batch holds a posterior
whose ``cause_seq`` lies beyond it: the common case, posteriors of ops the cached value
already covers, costs no round trip. The stream only grows, so a cached value is a
safe lower bound; a forged ``cause_seq`` beyond the log costs one call per batch that
carries it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

import msgspec

from worldline.protocols.subjects import OPS

if TYPE_CHECKING:
    from nats.js import JetStreamContext

__all__ = ["OpsEnd"]

log = logging.getLogger("worldline.materializer")


class _Cause(msgspec.Struct):
    """The OPS sequence a derived message names (the rest is skipped): a
    ``PosteriorUpdate``'s ``cause_seq``, or ``seq`` of a message from fusion about
    one op (so a handler may check either against the same bound)."""

    cause_seq: int = 0
    seq: int = 0


_CAUSE: Final = msgspec.msgpack.Decoder(_Cause)


class OpsEnd:
    """``WL_OPS``'s last sequence, cached; one per materializer process."""

    def __init__(self, stream: str = OPS.name) -> None:
        self.stream = stream
        self.known = 0  # the last sequence seen (the stream never shrinks below it)
        self.lookups = 0  # stream_info calls made (tests and logs read it)

    def saw(self, seq: int) -> None:
        """An op delivered from the log at ``seq``: the log reaches at least that
        far. The materializer's own op input reports each op it is handed, so a
        posterior of an op it has already seen (one at a time, nearly always: the
        posterior comes one hop later) costs no round trip."""
        if seq > self.known:
            self.known = seq

    async def __call__(self, js: JetStreamContext, payloads: list[bytes]) -> int:
        """The op log's last sequence, current enough for every posterior among
        ``payloads`` (what does not decode is left to the handler)."""
        highest = 0
        for payload in payloads:
            try:
                cause = _CAUSE.decode(payload)
                highest = max(highest, cause.cause_seq, cause.seq)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                continue
        if highest > self.known:
            # Bounded by the JetStream context's own timeout; a failure is retried
            # by the runtime (the batch waits, it is never applied unchecked).
            info = await js.stream_info(self.stream)
            self.lookups += 1
            last = int(info.state.last_seq)
            if last > self.known:
                self.known = last
            if highest > self.known:
                log.warning(
                    "materializer: a message from fusion names OPS sequence %d, "
                    "beyond %s's last sequence %d (forged?)",
                    highest,
                    self.stream,
                    self.known,
                )
        return self.known

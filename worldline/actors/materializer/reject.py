"""How a crew rule refuses an op: :class:`Reject`, raised anywhere while an op is
applied and turned by :func:`worldline.actors.materializer.crew.handle` into a
conflict-log entry and a ``Rejection`` in the author's inbox (the op's other writes are
dropped, but for the few a rule names in ``keep``: a refused link still claims its
edge id, :mod:`worldline.actors.materializer.edges`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worldline.protocols.messages import RejectCode
    from worldline.protocols.world import Value

__all__ = ["Reject"]


class Reject(Exception):
    """An op the world refuses; becomes a conflict-log entry and a Rejection."""

    def __init__(
        self,
        code: RejectCode,
        reason: str,
        *,
        version: int | None = None,
        value: Value = None,
        keep: dict[bytes, bytes | None] | None = None,
    ) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.version = version
        self.value = value
        self.keep = {} if keep is None else keep  # written even though refused

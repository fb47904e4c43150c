"""A belief's hand-set label, checked on the client so a bad one is named before
anything is sent (the wire type is :data:`worldline.protocols.base.Label`)."""

from __future__ import annotations

import re

from worldline.protocols.base import LABEL_PATTERN
from worldline.sdk.errors import BadRequest

__all__ = ["checked_label"]

_LABEL = re.compile(LABEL_PATTERN)


def checked_label(label: str | None) -> str | None:
    """``label`` as given, or None for none.

    Raises:
        BadRequest: not 1-64 letters, digits and ``_.:/-`` starting with a letter or
            digit (what the wire type accepts).
    """
    if label is not None and not _LABEL.match(label):
        raise BadRequest(
            f"label {label[:80]!r} is not a label: use 1-64 letters, digits and "
            "_.:/-, starting with a letter or digit (for example load-bearing)"
        )
    return label

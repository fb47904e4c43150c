"""Decoding bytes that may be junk, the one way the actors and the SDK both do: the
message, or None and the reason (an actor dead-letters with it, the SDK names it in a
warning). Pure: no I/O."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["decode_payload"]


def decode_payload(decoder: Any, data: bytes) -> tuple[Any, str | None]:
    """``data`` decoded by ``decoder`` (a msgspec decoder), or None and the reason
    the store dead-letters it with."""
    try:
        return decoder.decode(data), None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return None, f"undecodable: {exc}"
    except RecursionError:
        return None, "undecodable: nested too deeply to decode"

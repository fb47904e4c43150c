"""A world name is never a silent typo: before a client's first write to a world, it
asks JetStream which worlds hold ops (the subjects of ``WL_OPS``, counted by the
server: no message is read), and

- a world with no ops yet whose name is close to a known world's warns
  (:class:`NewWorldWarning`: "new world 'enterprse' — did you mean 'enterprise'?";
  the CLI prints it on stderr);
- with ``require_declared`` (``connect(require_declared=True)``, the CLI's
  ``--require-declared``, or ``WORLDLINE_REQUIRE_DECLARED=1``) a write to a world no
  declaration names is refused with :class:`~worldline.sdk.errors.BadRequest`; the
  declaration itself (``world load``) is always let through.

A connection with an agent's own credentials skips the check: its account may not
read the stream's state, and the server already refuses it every world its
credentials do not name.
"""

from __future__ import annotations

import difflib
import os
import warnings
from typing import TYPE_CHECKING

import nats.errors
import nats.js.errors

from worldline.protocols.subjects import OPS, ops, world_of
from worldline.sdk.errors import BadRequest

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from nats.js import JetStreamContext

__all__ = [
    "REQUIRE_DECLARED_ENV",
    "NewWorldWarning",
    "check_world",
    "close_world",
    "require_declared_default",
]

REQUIRE_DECLARED_ENV = "WORLDLINE_REQUIRE_DECLARED"
_ANY = "*"
_CUTOFF = 0.75  # difflib's ratio: one letter off in an 8-letter name is 0.93


class NewWorldWarning(UserWarning):
    """A write starts a world with no ops, and a known world has a close name."""


def require_declared_default() -> bool:
    """``$WORLDLINE_REQUIRE_DECLARED`` as a switch: 1, true, yes or on."""
    value = os.environ.get(REQUIRE_DECLARED_ENV, "").strip().lower()
    return value in ("1", "true", "yes", "on")


def close_world(name: str, known: set[str]) -> str | None:
    """The known world whose name is closest to ``name``, if any is close."""
    found = difflib.get_close_matches(name, sorted(known - {name}), n=1, cutoff=_CUTOFF)
    return found[0] if found else None


async def _worlds(js: JetStreamContext, world: str) -> set[str]:
    """The worlds with ops on subjects matching ``world`` (``*``: every world)."""
    info = await js.stream_info(OPS.name, subjects_filter=ops(world, _ANY))
    return {world_of(subject) for subject in info.state.subjects or {}}


async def check_world(
    js: JetStreamContext,
    world: str,
    *,
    require_declared: bool,
    declaring: bool,
    declared: Callable[[], Awaitable[bool]],
) -> None:
    """Warn or refuse before the first write to ``world`` (see the module's text);
    ``declared`` asks a projector whether a declaration names the world. A bus that
    cannot say (no stream yet, no answer) lets the write go on to fail or succeed
    as it would have."""
    try:
        has_ops = bool(await _worlds(js, world))
        known = set() if has_ops else await _worlds(js, _ANY)
    except (nats.js.errors.Error, nats.errors.Error):
        return
    guess = close_world(world, known)
    hint = f" — did you mean {guess!r}?" if guess else ""
    if require_declared and not declaring and not (has_ops and await declared()):
        raise BadRequest(
            f"world {world!r} is not declared{hint} and writes require a declared "
            f"world ({REQUIRE_DECLARED_ENV}=1, --require-declared or "
            "require_declared=True): check the name, or declare the world first "
            f"(`worldline world load FILE --world {world}`)"
        )
    if not has_ops and guess:
        warnings.warn(
            f"new world {world!r}{hint} (its first write starts it; pass the "
            f"existing name with --world, or set {REQUIRE_DECLARED_ENV}=1 to refuse "
            "writes to undeclared worlds)",
            NewWorldWarning,
            stacklevel=4,
        )

"""The turn hooks' public import path, as documented (``from worldline.hooks import
agent_step``, ``worldline.hooks.reported``); the code lives in
:mod:`worldline.sdk.hooks`."""

from worldline.sdk.hooks import (
    Extracted,
    ExtractedStatement,
    Turn,
    agent_step,
    observed,
    reported,
    turn,
)

__all__ = [
    "Extracted",
    "ExtractedStatement",
    "Turn",
    "agent_step",
    "observed",
    "reported",
    "turn",
]

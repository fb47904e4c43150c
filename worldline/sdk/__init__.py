"""The agent's SDK: what an agent's code imports to read and write a world.

``worldline.connect`` and ``worldline.World`` (:mod:`worldline.sdk.client`) are built
from one verb family per module: :mod:`~worldline.sdk.crew` (declare, write, inbox,
views, presence), :mod:`~worldline.sdk.export` (the op log read back),
:mod:`~worldline.sdk.beliefs` (add, evidence, observe, get, list, trace...) and
:mod:`~worldline.sdk.sim` (simulator sessions). Around them: :mod:`~worldline.sdk.hooks`
(turn hooks, with their data in :mod:`~worldline.sdk.turns`), :mod:`~worldline.sdk.sync`
(the blocking SDK), :mod:`~worldline.sdk.errors` and :mod:`~worldline.sdk.declaration`
(world declarations from TOML).

Agents import the public names from :mod:`worldline` (and :mod:`worldline.sync`,
:mod:`worldline.hooks`); the modules here are where the code lives.
"""

__all__: list[str] = []

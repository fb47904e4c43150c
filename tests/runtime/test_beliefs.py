"""The belief state over a real nats-server: P2, P3, P5 and P8 end to end (P8 with two
fusion shards), extraction of a real agent output, provenance, and bad evidence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

import worldline
from tests.support import running, unique_world
from worldline.actors.belief_model.posterior import HALF_LIFE_DAYS
from worldline.actors.registry import build
from worldline.protocols.world import Authority, WorldDecl, WorldInfo

pytestmark = pytest.mark.nats

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent-output.md"


def actors(shards: int = 1) -> list[object]:
    fusion = [build("fusion", shard=f"{i}/{shards}") for i in range(shards)]
    rest = [build(n) for n in ("extractor", "materializer", "projector", "simulator")]
    return [*fusion, *rest]


async def _at_least(world: worldline.World, n: int) -> list[worldline.Belief]:
    """Poll until the world lists ``n`` beliefs (extraction is asynchronous)."""
    with anyio.fail_after(10):
        while True:
            beliefs = await world.list()
            if len(beliefs) >= n:
                return beliefs
            await anyio.sleep(0.05)


async def test_corroboration_direction_and_decay_end_to_end(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("math")
    async with (
        running(actors(), url=nats_url, data=tmp_path),  # type: ignore[arg-type]
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        # ada may report every source she names: each is a voice of its own
        # (undeclared, they would all be ada's one voice: test_source_identity.py).
        await ada.declare(
            WorldDecl(
                world=WorldInfo(id=world),
                authority=Authority(admins=["ada"]),
                sources={"*": ["ada"]},
            )
        )
        one = await ada.add("Churn is under five percent", confidence=0.5)
        many = await ada.add("Pilots renew after the first quarter", confidence=0.5)
        base = datetime(2100, 1, 1, tzinfo=UTC)  # after the beliefs are created
        # P2: ten paraphrases from one source weigh as one; ten sources as ten.
        for i in range(10):
            await ada.evidence(one.id, direction="supports", kind="citation",
                               source="one-blog", observed_at=base,
                               text=f"paraphrase {i}")  # fmt: skip
            await ada.evidence(many.id, direction="supports", kind="citation",
                               source=f"analyst-{i}", observed_at=base)  # fmt: skip
        single = await ada.get(one.id, at=base)
        ten = await ada.get(many.id, at=base)
        assert single is not None
        assert ten is not None
        assert single.evidence_weight == pytest.approx(2.0)
        assert ten.evidence_weight == pytest.approx(20.0)
        assert ten.confidence is not None
        assert single.confidence is not None
        assert ten.confidence > single.confidence
        # P3: neutral adds weight without moving; refutes lowers.
        before = await ada.get(one.id, at=base)
        neutral = await ada.evidence(one.id, direction="neutral", kind="measurement",
                                     source="dashboard", observed_at=base)  # fmt: skip
        after_neutral = await ada.get(one.id, at=base)
        assert before is not None
        assert after_neutral is not None
        assert after_neutral.confidence == pytest.approx(before.confidence)
        assert after_neutral.evidence_weight > before.evidence_weight
        assert neutral.evidence_count == 11
        await ada.evidence(one.id, direction="refutes", kind="measurement",
                           source="billing-db", observed_at=base)  # fmt: skip
        lowered = await ada.get(one.id, at=base)
        assert lowered is not None
        assert lowered.confidence is not None
        assert before.confidence is not None
        assert lowered.confidence < before.confidence
        # P5: read one citation half-life later, the evidence counts half.
        later = base + timedelta(days=HALF_LIFE_DAYS["citation"])
        aged = await ada.get(many.id, at=later)
        assert aged is not None
        assert aged.evidence_weight == pytest.approx(10.0)
        stale = await ada.get(many.id, at=base + timedelta(days=5 * 365))
        assert stale is not None
        assert "stale" in stale.flags


async def _posteriors(nats_url: str, tmp_path: Path, shards: int) -> list[object]:
    world = unique_world(f"shard{shards}")
    base = datetime(2100, 1, 1, tzinfo=UTC)  # after the beliefs are created
    async with (
        running(actors(shards), url=nats_url, data=tmp_path / str(shards)),  # type: ignore[arg-type]
        worldline.connect(nats_url, world=world, agent="ada") as ada,
    ):
        ids = []
        for i in range(6):
            b = await ada.add(f"Statement number {i} about the pilot", id=f"b-{i}",
                              confidence=0.3 + 0.1 * i)  # fmt: skip
            ids.append(b.id)
        for i, belief_id in enumerate(ids):
            for j in range(3):
                await ada.evidence(
                    belief_id,
                    direction="supports" if (i + j) % 2 else "refutes",
                    kind="citation" if j else "measurement",
                    source=f"src-{j}",
                    observed_at=base,
                    id=f"ev-{i}-{j}",
                )
        found = [await ada.get(b, at=base + timedelta(days=30)) for b in ids]
    return [
        (b.id, b.confidence, b.evidence_weight, b.uncertainty, b.fragility, b.flags)
        for b in found
        if b is not None
    ]


async def test_two_fusion_shards_agree_with_one(nats_url: str, tmp_path: Path) -> None:
    one = await _posteriors(nats_url, tmp_path, 1)
    two = await _posteriors(nats_url, tmp_path, 2)
    assert len(one) == 6
    assert one == two


async def test_an_agent_output_becomes_typed_beliefs_traceable_to_it(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("extract")
    text = EXAMPLE.read_text()
    async with (
        running(actors(), url=nats_url, data=tmp_path),  # type: ignore[arg-type]
        worldline.connect(nats_url, world=world, agent="geordi") as geordi,
    ):
        obs_id = await geordi.after(text)
        beliefs = await _at_least(geordi, 9)
        types = {b.text: b.type for b in beliefs}
        assert types["Authentication is enforced at the API middleware."] == "claim"
        assert types["Is the export route reachable from outside the VPC?"] == "gap"
        assert types["Who owns the legacy SSO integration?"] == "gap"
        assert (
            types["Most internal routes probably rely on the gateway's mTLS as well."]
            == "assumption"
        )
        assert types["The audit log might miss admin impersonation events."] in (
            "assumption",
            "risk",
        )
        assert (
            types["A schema change to the sessions table risks logging every user "
                  "out during deploy."] == "risk"
        )  # fmt: skip
        state = await geordi.read()
        # Observing the same output again changes nothing.
        assert await geordi.after(text) == obs_id
        await anyio.sleep(0.5)
        assert await geordi.read() == state
        # A later restatement is evidence for the same belief, not a duplicate.
        await geordi.after(
            "The /api/internal/export route goes through the middleware."
        )
        await geordi.after("The API middleware enforces authentication.")
        with anyio.fail_after(10):
            while True:
                claims = [
                    b for b in await geordi.list()
                    if b.text == "Authentication is enforced at the API middleware."
                ]  # fmt: skip
                if claims and claims[0].evidence_count == 2:
                    break
                await anyio.sleep(0.05)
        assert len(await geordi.list()) == len(beliefs)
        chain = await geordi.trace(claims[0].id)
    assert chain.steps[0].evidence.artifact == obs_id
    assert all(step.evidence.kind == "inference" for step in chain.steps)
    assert all(step.evidence.source == "agent:geordi" for step in chain.steps)
    assert chain.steps[0].before == pytest.approx(0.5)
    assert all(step.after is not None for step in chain.steps)


async def test_bad_evidence_is_rejected_and_nothing_is_half_applied(
    nats_url: str, tmp_path: Path
) -> None:
    world = unique_world("bad-ev")
    async with (
        running(actors(), url=nats_url, data=tmp_path),  # type: ignore[arg-type]
        worldline.connect(nats_url, world=world, agent="ada", request_timeout=5) as ada,
    ):
        belief = await ada.add("The SLA template is final", confidence=0.6)
        with pytest.raises(worldline.Rejected, match="no belief b-unknown"):
            await ada.evidence("b-unknown", direction="supports", kind="citation",
                               source="x")  # fmt: skip
        with pytest.raises(worldline.BadRequest):
            await ada.evidence(belief.id, direction="supports",
                               kind="rumour",  # type: ignore[arg-type]
                               source="x")  # fmt: skip
        with pytest.raises(worldline.BadRequest):
            await ada.add("Over-confident", confidence=1.5)
        retracted = await ada.retract(belief.id, "the template changed")
        assert retracted.status == "retracted"
        with pytest.raises(worldline.Rejected, match="retracted"):
            await ada.evidence(belief.id, direction="supports", kind="citation",
                               source="x")  # fmt: skip
        after = await ada.get(belief.id)
        chain = await ada.trace(belief.id)
        now_world = await ada.read()
        then_world = await ada.read(at=belief.created_at)
    # read(at=T) is the world model as it stood at T: then the belief was active.
    assert belief.id not in {b.id for b in now_world.beliefs}
    assert belief.id in {b.id for b in then_world.beliefs}
    assert [m.trace for m in then_world.moves] == [(belief.id,)]
    assert after is not None
    assert after.evidence_count == 0
    assert after.valid_until is not None
    assert chain.steps == []

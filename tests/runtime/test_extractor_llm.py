"""LLM extraction end to end over a real nats-server and a fake OpenAI-compatible
server: observation -> prepare step -> model -> ops naming the model; and every
failure (HTTP 500, garbage, a wrong schema, a timeout) falls back to the rule-based
reading, counted in the extractor's store."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import anyio
import msgspec
import nats
import pytest
from nats.js import api

import worldline
from tests.support import all_actors, running, unique_world
from tests.support.fake_llm import Fake, Reply, completion, serve
from worldline.actors.extractor import core as extractor
from worldline.actors.extractor import service
from worldline.actors.extractor.llm import DETERMINISTIC
from worldline.actors.extractor.text import statements
from worldline.actors.runtime.llm import ENV_KEY, ENV_MODEL, ENV_URL, LlmConfig
from worldline.actors.runtime.store import Store
from worldline.protocols.messages import Observe, Statement, encode
from worldline.protocols.subjects import OPS, obs, ops

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.nats

MODEL: Final = "extract-model-1"
KEY: Final = "sk-extract-secret"
AT: Final = datetime(2026, 1, 1, tzinfo=UTC)
TEXT: Final = (
    "The export endpoint shipped on Monday. It does not check auth tokens. "
    "Could the nightly job leak customer data?"
)
ANSWER: Final = json.dumps(
    {
        "items": [
            {
                "type": "risk",
                "text": "The export endpoint does not check auth tokens.",
                "confidence": 0.85,
                "span": "It does not check auth tokens.",
            },
            {
                "type": "gap",
                "text": "Could the nightly job leak customer data?",
                "confidence": 0.7,
                "span": "Could the nightly job leak customer data?",
            },
        ]
    }
)
_STATEMENT = msgspec.msgpack.Decoder(Statement)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fake]:
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # never route the test via a proxy
    with serve() as state:
        state.default = Reply(body=completion(ANSWER))
        yield state


async def _publish(url: str, world: str, obs_id: str, text: str = TEXT) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        o = Observe(obs_id=obs_id, author="geordi", at=AT, source="audit.md", text=text)
        await js.publish(
            obs(world, "geordi"), encode(o), headers={api.Header.MSG_ID: obs_id}
        )
    finally:
        await nc.close()


async def _statements(url: str, world: str, n: int) -> list[Statement]:
    """The first ``n`` statements the extractor put on the record of ``world``."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe(ops(world, extractor.AUTHOR), stream=OPS.name)
        found: list[Statement] = []
        with anyio.fail_after(20):
            while len(found) < n:
                try:
                    msgs = await sub.fetch(n - len(found), timeout=0.5)
                except TimeoutError:
                    continue
                for msg in msgs:
                    found.append(_STATEMENT.decode(msg.data))
                    await msg.ack()
        return found
    finally:
        await nc.close()


def _counters(data: Path) -> dict[str, int]:
    store = Store(data / "extractor", actor="extractor")
    try:
        with store.reader() as reader:
            return extractor.counters(reader)
    finally:
        store.close()


async def test_a_model_reads_the_observation_into_beliefs_through_the_env(
    nats_url: str, tmp_path: Path, fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_URL, fake.url)
    monkeypatch.setenv(ENV_MODEL, MODEL)
    monkeypatch.setenv(ENV_KEY, KEY)
    world = unique_world()
    async with (
        running(all_actors(), url=nats_url, data=tmp_path),
        worldline.connect(nats_url, world=world, agent="geordi") as geordi,
    ):
        await geordi.observe(TEXT, source="audit.md")
        with anyio.fail_after(15):
            while True:
                beliefs = await geordi.list()
                if len(beliefs) >= 2:
                    break
                await anyio.sleep(0.05)
        by_text = {b.text: b for b in beliefs}
        assert sorted(by_text) == [
            "Could the nightly job leak customer data?",
            "The export endpoint does not check auth tokens.",
        ]
        risk = by_text["The export endpoint does not check auth tokens."]
        assert risk.type == "risk"
        assert by_text["Could the nightly job leak customer data?"].type == "gap"
        trace = await geordi.trace(risk.id)
    [step] = trace.steps
    assert step.evidence.extracted_by == MODEL
    assert step.evidence.text == "It does not check auth tokens."
    [sent] = fake.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    payload = sent.json()
    assert payload["model"] == MODEL
    assert TEXT in payload["messages"][1]["content"]
    assert _counters(tmp_path) == {"used": 1, "fallbacks": 0}


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=500, body=b'{"error": "boom"}'),
        Reply(body=b"<html>gateway</html>"),
        Reply(body=completion('{"claims": ["the export shipped"]}')),
        Reply(stall=True),
    ],
    ids=["http-500", "garbage", "wrong-schema", "timeout"],
)
async def test_a_failed_model_call_falls_back_to_the_rule_based_reading(
    nats_url: str,
    tmp_path: Path,
    fake: Fake,
    reply: Reply,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake.answer(reply)
    config = LlmConfig(url=fake.url, model=MODEL, api_key=KEY, timeout=0.5)
    world = unique_world()
    n = len(statements(TEXT))
    async with running([service.spec(config)], url=nats_url, data=tmp_path):
        await _publish(nats_url, world, "obs-fallback")
        found = await _statements(nats_url, world, n)
    assert sorted(s.text for s in found) == sorted(
        [
            "The export endpoint shipped on Monday.",
            "It does not check auth tokens.",
            "Could the nightly job leak customer data?",
        ]
    )
    assert {s.evidence.extracted_by for s in found} == {DETERMINISTIC}
    assert len(fake.requests) == 1
    assert _counters(tmp_path) == {"used": 0, "fallbacks": 1}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("reading it by rule" in w and "obs-fallback" in w for w in warnings)
    assert not any(KEY in r.getMessage() for r in caplog.records)


async def test_without_the_env_no_model_is_asked(
    nats_url: str, tmp_path: Path, fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_URL, raising=False)
    world = unique_world()
    async with running([service.spec()], url=nats_url, data=tmp_path):
        await _publish(nats_url, world, "obs-plain")
        found = await _statements(nats_url, world, 3)
    assert {s.evidence.extracted_by for s in found} == {DETERMINISTIC}
    assert fake.requests == []
    assert _counters(tmp_path) == {"used": 0, "fallbacks": 0}

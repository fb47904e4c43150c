"""Extractor actor: consumes observations, publishes belief ops to the OPS record.

Inbox: ``wl.*.obs.*`` through durable ``extractor`` on the OBS work queue (replicas
share it). Accepts: ``Observe``. Outputs: ``Statement`` on ``wl.<world>.ops.extractor``.
State: the LLM counters ``llm/used`` and ``llm/fallbacks``. Ack policy: after the
outputs are committed to the outbox.

Optional LLM extraction, off by default: with ``WORLDLINE_LLM_URL`` and
``WORLDLINE_LLM_MODEL`` set (``WORLDLINE_LLM_KEY`` optional), the input's prepare step
asks that OpenAI-compatible endpoint to read each text observation, outside the batch
transaction (at most :data:`CONCURRENCY` calls at once), and hands the pure handler an
:class:`~worldline.actors.extractor.llm.LlmReading`. A failure (HTTP error, timeout, an
answer that is not the asked JSON) is logged with its reason and becomes a reading
marked ``fallback``: the handler then reads the observation by rule and counts it.
Replay never asks the model again: the ops it led to are the record.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import anyio.to_thread

from worldline.actors.extractor import core
from worldline.actors.extractor.llm import (
    MAX_ARTIFACT_CHARS,
    AnswerRejected,
    LlmReading,
    messages,
    parse_answer,
)
from worldline.actors.runtime.llm import LlmConfig, LlmError, complete
from worldline.actors.runtime.spec import ActorSpec, Input
from worldline.protocols.messages import EXTRACTOR_INBOX
from worldline.protocols.subjects import EXTRACTOR_IN

if TYPE_CHECKING:
    from collections.abc import Callable

    from worldline.actors.runtime.spec import Context
    from worldline.protocols.messages import Observe

__all__ = ["CONCURRENCY", "read_with_model", "spec"]

log = logging.getLogger("worldline.extractor")

CONCURRENCY: Final = 4  # model calls in flight per extractor process


def spec(llm: LlmConfig | None = None, *, env: bool = True) -> ActorSpec:
    """The extractor's declaration; ``llm`` (else, with ``env``, the
    ``WORLDLINE_LLM_*`` variables) turns on LLM extraction."""
    config = llm if llm is not None or not env else LlmConfig.from_env()
    prepare = None if config is None else partial(read_with_model, config)
    return ActorSpec(
        name="extractor",
        inputs=(
            Input(
                EXTRACTOR_IN,
                EXTRACTOR_INBOX,
                core.handle,
                skip_applied=False,
                prepare=prepare,
                prepare_concurrency=CONCURRENCY,
                # The runtime's backstop: the client's own timeout fires first.
                prepare_timeout=(config.timeout + 5.0) if config else 60.0,
            ),
        ),
    )


async def read_with_model(
    config: LlmConfig,
    obs: Observe,
    ctx: Context,
    *,
    opener: Callable[..., Any] | None = None,
) -> LlmReading | None:
    """Ask the model to read ``obs``: its validated items, or a reading marked
    ``fallback`` with the reason (logged as a warning, never with the API key).
    ``None`` for a JSON artifact, which the rule-based reader handles exactly."""
    if obs.media_type == "json" or obs.author != ctx.author:
        return None  # read by rule (or refused by the handler): no model call
    if len(obs.text) > MAX_ARTIFACT_CHARS:
        return _fallback(
            config,
            obs,
            f"artifact of {len(obs.text)} characters is longer than the "
            f"{MAX_ARTIFACT_CHARS} sent to a model",
        )
    try:
        content = await anyio.to_thread.run_sync(
            partial(complete, config, messages(obs), opener),
            abandon_on_cancel=True,
        )
        items = parse_answer(content, obs.text)
    except (LlmError, AnswerRejected) as exc:
        return _fallback(config, obs, str(exc))
    return LlmReading(model=config.model, items=items)


def _fallback(config: LlmConfig, obs: Observe, reason: str) -> LlmReading:
    log.warning(
        "extractor: model %s did not read observation %s (%s); reading it by rule",
        config.model,
        obs.obs_id,
        reason,
    )
    return LlmReading(model=config.model, fallback=reason)

"""Extractor core: turns an artifact into belief statements. Pure, deterministic, no
network and no model weights.

Accepts text and markdown (sentence-level statements: questions become gaps, risk
language risks, hedges assumptions, negation refutes), structured JSON artifacts
(explicit ``claims`` and ``evidence``), and tool results. Each statement becomes a
``Statement`` op: evidence for the belief its normalized text names, which fusion
creates if the world does not hold it yet, so a restatement is evidence, never a
duplicate. Evidence kind follows what produced the artifact: a tool's result is a
measurement, an observed document a citation, an agent's own output an inference,
and a hedge an assumption.

Optional LLM extraction (``llm.py``): when the input's prepare step asked a model,
``Context.prepared`` holds an :class:`~worldline.actors.extractor.llm.LlmReading`. Its
validated items replace the rule-based reading of a text artifact (a JSON artifact is
explicit and always read by rule); a reading marked ``fallback`` (the call failed,
timed out, or the answer was rejected), or a prepare step that did not finish
(:class:`~worldline.actors.runtime.spec.Unprepared`), falls back to the rule-based
reading and counts one fallback under ``llm/fallbacks`` (model readings under
``llm/used``). Every evidence names what read it in ``extracted_by``: the model id, or
``deterministic``.

Each op is the extractor's (published on its own subject), but the evidence it
carries is the observing agent's: its ``author`` is the authenticated author of the
observation (the subject's token, never a name inside the body), so ``trust
agent:<name>`` applies to what that agent observed, and ``trust agent:extractor``
weighs nothing extracted. The source stays what the observation names (default: the
agent).

Ids derive from the world, the observing agent, the observation id and position (and
the model, for a model's reading), and observation ids from content, so observing the
same artifact twice changes nothing; another agent naming the same observation id gets
ids of its own. Stateless but for those two counters: replicas share one durable on
the OBS work queue.
Output: ``Statement`` on ``wl.<world>.ops.extractor``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Final, Literal

import msgspec

from worldline.actors.extractor.llm import DETERMINISTIC, LlmItem, LlmReading
from worldline.actors.extractor.text import belief_id, classify, contexts, statements
from worldline.actors.runtime.errors import InvalidInput
from worldline.actors.runtime.spec import Context, Outgoing, Reader, Step, Unprepared
from worldline.protocols.beliefs import Direction, Evidence, EvidenceKind
from worldline.protocols.messages import BeliefType, Observe, Statement
from worldline.protocols.subjects import ops

__all__ = [
    "AUTHOR",
    "FALLBACKS",
    "LOW_CONFIDENCE",
    "MAX_STATEMENTS",
    "USED",
    "JsonArtifact",
    "counters",
    "handle",
    "statements",
]

AUTHOR: Final = "extractor"
MAX_STATEMENTS: Final = 512  # per artifact; more is an error, never a silent cut
MAX_STATEMENT_CHARS: Final = 4096
KIND_BY_ROLE: Final[dict[str, EvidenceKind]] = {
    "artifact": "citation",
    "output": "inference",
    "tool": "measurement",
}

FALLBACKS: Final = b"llm/fallbacks"  # observations read by rule after a model failed
USED: Final = b"llm/used"  # observations read by a model
# A model's item below this confidence is recorded as an assumption (the weakest
# evidence kind), as the rule-based reading records a hedge.
LOW_CONFIDENCE: Final = 0.5

Short = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_STATEMENT_CHARS)]


class JsonClaim(msgspec.Struct, frozen=True, kw_only=True):
    text: Short
    type: Literal["claim", "assumption", "risk", "evidence", "gap", "goal"] | None = (
        None
    )
    kind: EvidenceKind | None = None
    source: str | None = None


class JsonEvidence(msgspec.Struct, frozen=True, kw_only=True):
    belief: Short  # the statement it bears on (matched by normalized text)
    direction: Direction
    kind: EvidenceKind
    source: str | None = None
    text: Annotated[str, msgspec.Meta(max_length=MAX_STATEMENT_CHARS)] = ""


class JsonArtifact(msgspec.Struct, frozen=True, kw_only=True):
    """A structured artifact: explicit claims and evidence (unknown keys ignored)."""

    claims: list[JsonClaim] = msgspec.field(default_factory=list)
    evidence: list[JsonEvidence] = msgspec.field(default_factory=list)
    tool: str | None = None  # a tool result: {"tool": name, "result": "..."}
    result: Annotated[str, msgspec.Meta(max_length=1024 * 1024)] | None = None


_JSON = msgspec.json.Decoder(JsonArtifact)


@dataclass(frozen=True, slots=True)
class Found:
    """One statement read from an artifact. ``direction`` is relative to the
    statement's positive form; ``negated`` says whether its own text is negated."""

    text: str
    type: BeliefType
    direction: Direction
    kind: EvidenceKind
    source: str
    negated: bool
    note: str = ""
    context: str = ""  # what came just before it (text.contexts)


def handle(reader: Reader, obs: Observe, ctx: Context) -> Step:
    """Extract one ``Statement`` per statement of the artifact.

    Raises:
        InvalidInput: the body names another author than the subject, a JSON artifact
            does not match the documented shape, or it holds more than
            :data:`MAX_STATEMENTS` statements.
    """
    if obs.author != ctx.author:
        raise InvalidInput(
            f"observation {obs.obs_id} names author {obs.author!r} but was published "
            f"on {ctx.subject!r}; agents publish only their own observations"
        )
    source = (obs.source or obs.author)[:256]
    kind = KIND_BY_ROLE[obs.role]
    writes: dict[bytes, bytes | None] = {}
    by = DETERMINISTIC
    prepared = ctx.prepared
    if obs.media_type == "json":
        found = _from_json(obs.text, source, kind)
    elif isinstance(prepared, LlmReading) and not prepared.fallback:
        found = [_from_item(item, source, kind) for item in prepared.items]
        by = prepared.model
        writes[USED] = _bump(reader, USED)
    else:
        found = _from_text(obs.text, source, kind, obs.context)
        if isinstance(prepared, LlmReading | Unprepared):
            writes[FALLBACKS] = _bump(reader, FALLBACKS)
    if len(found) > MAX_STATEMENTS:
        raise InvalidInput(
            f"artifact holds {len(found)} statements, more than {MAX_STATEMENTS}; "
            "split it into smaller observations"
        )
    out = [_statement(ctx, obs, i, item, by) for i, item in enumerate(found)]
    return Step(writes=writes, out=out)


def counters(reader: Reader) -> dict[str, int]:
    """How many observations a model read (``used``) and how many fell back to the
    rule-based reading after a model failed (``fallbacks``), in this store."""
    return {
        "used": _count(reader, USED),
        "fallbacks": _count(reader, FALLBACKS),
    }


def _count(reader: Reader, key: bytes) -> int:
    raw = reader.get(key)
    return 0 if raw is None else int(raw)


def _bump(reader: Reader, key: bytes) -> bytes:
    return str(_count(reader, key) + 1).encode()


def _from_item(item: LlmItem, source: str, kind: EvidenceKind) -> Found:
    """A model's item, read like a statement of the artifact (its negation and
    normalized text, hence its belief id) but with the model's type; the quoted span
    is the evidence text."""
    read = _read(item.text, source, kind)
    direction = read.direction
    if item.type == "gap":
        direction = "neutral"
    elif read.type == "gap":  # a question the model calls a claim still asserts
        direction = "refutes" if read.negated else "supports"
    weak = (
        item.type == "assumption"
        or item.confidence < LOW_CONFIDENCE
        or read.kind == "assumption"  # the text hedges
    )
    return dataclasses.replace(
        read,
        type=item.type,
        direction=direction,
        kind="assumption" if weak else kind,
        note=item.span[:MAX_STATEMENT_CHARS],
    )


def _read(text: str, source: str, kind: EvidenceKind) -> Found:
    reading = classify(text[:MAX_STATEMENT_CHARS])
    direction: Direction = "refutes" if reading.negated else "supports"
    if reading.type == "gap":
        direction = "neutral"
    return Found(
        text=reading.text,
        type=reading.type,
        direction=direction,
        kind="assumption" if reading.type == "assumption" else kind,
        source=source,
        negated=reading.negated,
    )


def _from_text(
    text: str, source: str, kind: EvidenceKind, before: str = ""
) -> list[Found]:
    found = statements(text)
    return [
        dataclasses.replace(_read(sentence, source, kind), context=context)
        for sentence, context in zip(found, contexts(found, before, text), strict=True)
    ]


def _from_json(text: str, source: str, kind: EvidenceKind) -> list[Found]:
    try:
        artifact = _JSON.decode(text)
    except (msgspec.MsgspecError, RecursionError) as exc:
        raise InvalidInput(
            f"JSON artifact not understood ({exc}); expected an object with "
            '"claims": [{"text": ...}], "evidence": [{"belief", "direction", '
            '"kind"}], or a tool result {"tool": ..., "result": "..."}'
        ) from exc
    found = []
    for claim in artifact.claims:
        read = _read(claim.text, claim.source or source, claim.kind or kind)
        found.append(dataclasses.replace(read, type=claim.type or read.type))
    for item in artifact.evidence:
        read = _read(item.belief, item.source or source, item.kind)
        direction = item.direction  # stated against the text as written
        if read.negated and direction != "neutral":
            direction = "supports" if direction == "refutes" else "refutes"
        found.append(
            dataclasses.replace(
                read, direction=direction, kind=item.kind, note=item.text
            )
        )
    if artifact.result:
        origin = f"tool:{artifact.tool}" if artifact.tool else source
        found += _from_text(artifact.result, origin[:256], "measurement")
    return found


def said_at(obs: Observe) -> datetime:
    """When ``obs``'s statements were made: its ``observed_at`` (a time without a
    zone read as UTC; one after ``at``, when it was handed over, is ``at``: what is
    observed has happened), else ``at``."""
    said = obs.observed_at
    if said is None:
        return obs.at
    at = obs.at if obs.at.tzinfo else obs.at.replace(tzinfo=UTC)
    return min(said if said.tzinfo else said.replace(tzinfo=UTC), at)


def _statement(
    ctx: Context, obs: Observe, index: int, item: Found, by: str
) -> Outgoing:
    # The observing agent (the subject's, checked equal to the body's) is part of
    # the id: an observation id is only a claim in the body, so another agent's
    # Observe naming it must not take this agent's op ids (issue 23, F12). A model's
    # reading gets ids of its own, so it never collides with the rule-based reading
    # of the same observation (a redelivery may get either).
    key = f"{ctx.world}\0{ctx.author}\0{obs.obs_id}\0{index}"
    if by != DETERMINISTIC:
        key = f"{ctx.world}\0{ctx.author}\0{obs.obs_id}\0{by}\0{index}"
    digest = hashlib.sha256(key.encode())
    op_id = f"op-{digest.hexdigest()[:24]}"
    target = belief_id(ctx.world, item.text)
    op = Statement(
        op_id=op_id,
        author=AUTHOR,
        at=obs.at,
        belief_id=target,
        text=item.text,
        type=item.type,
        negated=item.negated,
        evidence=Evidence(
            id=f"ev-{digest.hexdigest()[:24]}",
            belief_id=target,
            direction=item.direction,
            kind=item.kind,
            source=item.source,
            observed_at=said_at(obs),
            text=item.note or item.text,
            artifact=obs.obs_id,
            # The agent that observed it, as the bus authenticated it (the subject,
            # checked equal to the body's author in :func:`handle`): ``trust
            # agent:<name>`` weighs what that agent saw. The op stays the extractor's.
            author=ctx.author,
            extracted_by=by[:256],
            context=(item.context or obs.context)[-1024:],
        ),
    )
    return Outgoing(subject=ops(ctx.world, AUTHOR), message=op, msg_id=op_id)

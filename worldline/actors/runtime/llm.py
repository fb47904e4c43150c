"""The one client for OpenAI-compatible chat-completions endpoints, shared by the
simulator's world-model provider and the extractor's optional LLM extraction.

Off by default. ``WORLDLINE_LLM_URL`` (the API base, ``http://host:port/v1``),
``WORLDLINE_LLM_MODEL`` and ``WORLDLINE_LLM_KEY`` (optional bearer token, never shown
in a ``repr``, a log line or an error) select an endpoint: :meth:`LlmConfig.from_env`.

Only the standard library is used (``urllib.request``), blocking: async callers run
:func:`complete` in a worker thread. Every failure (an HTTP error, a timeout, a non-200
status, a body that is not a chat completion) raises :class:`LlmError` whose message
names what happened and how to fix it; callers decide what a failure means (the
simulator fails the step, the extractor falls back to its deterministic reading).
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Self

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "ENV_KEY",
    "ENV_MODEL",
    "ENV_URL",
    "LlmConfig",
    "LlmError",
    "chat_request",
    "complete",
    "content_of",
    "send",
    "snippet",
    "unfenced",
]

ENV_URL: Final = "WORLDLINE_LLM_URL"
ENV_MODEL: Final = "WORLDLINE_LLM_MODEL"
ENV_KEY: Final = "WORLDLINE_LLM_KEY"

MAX_BODY: Final = 8 * 1024 * 1024  # bytes read from a response, at most
_SNIPPET: Final = 200  # characters of a bad body quoted in an error


class LlmError(Exception):
    """The endpoint could not give a usable chat completion; the message names the
    cause and the fix (and never the API key)."""


@dataclass(frozen=True)
class LlmConfig:
    """Where and how to reach an OpenAI-compatible endpoint.

    ``url`` is the API base (``http://127.0.0.1:8000/v1``); requests go to
    ``{url}/chat/completions``. ``api_key`` is sent as a bearer token when set
    (never shown in ``repr``). ``timeout`` is in seconds.
    """

    url: str
    model: str
    api_key: str = field(default="", repr=False)
    timeout: float = 30.0

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(
                f"url {self.url!r}: an http:// or https:// API base, e.g. "
                "http://127.0.0.1:8000/v1"
            )
        if not self.model.strip():
            raise ValueError("model is empty: name the model the endpoint serves")
        if not self.timeout > 0:
            raise ValueError(f"timeout {self.timeout!r}: seconds, more than 0")

    @property
    def endpoint(self) -> str:
        return f"{self.url.rstrip('/')}/chat/completions"

    @classmethod
    def from_env(cls, **overrides: Any) -> Self | None:
        """The config named by ``WORLDLINE_LLM_URL``, ``WORLDLINE_LLM_MODEL`` and
        ``WORLDLINE_LLM_KEY`` (optional); ``None`` when the URL is unset or empty.
        A URL without a model raises ``ValueError``. ``overrides`` set other fields
        (a subclass's too)."""
        url = os.environ.get(ENV_URL, "").strip()
        if not url:
            return None
        model = os.environ.get(ENV_MODEL, "").strip()
        if not model:
            raise ValueError(
                f"{ENV_URL} is set but {ENV_MODEL} is not: name the model to ask"
            )
        key = os.environ.get(ENV_KEY, "").strip()
        return cls(url=url, model=model, api_key=key, **overrides)


def snippet(data: bytes | str) -> str:
    """A short quotable repr of a bad body or answer."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return repr(text[:_SNIPPET] + ("..." if len(text) > _SNIPPET else ""))


def chat_request(
    config: LlmConfig, messages: list[dict[str, str]]
) -> urllib.request.Request:
    """The POST of ``messages`` to the endpoint, at temperature 0."""
    payload = {"model": config.model, "messages": messages, "temperature": 0}
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    return urllib.request.Request(
        config.endpoint,
        data=json.dumps(payload, ensure_ascii=False).encode(),
        headers=headers,
        method="POST",
    )


def _timed_out(where: str, timeout: float) -> LlmError:
    return LlmError(
        f"{where} timed out after {timeout:g}s; check that the server is up, or "
        "raise the timeout"
    )


def send(
    config: LlmConfig,
    request: urllib.request.Request,
    opener: Callable[..., Any] | None = None,
) -> bytes:
    """Send one request; the 200 response body, or :class:`LlmError`.

    ``opener`` is called like ``urllib.request.urlopen(request, timeout=...)`` (the
    default) and must return a context-managed response with ``status`` and ``read``.
    """
    where = f"POST {config.endpoint}"
    open_ = opener if opener is not None else urllib.request.urlopen
    try:
        with open_(request, timeout=config.timeout) as response:
            status = getattr(response, "status", None)
            body: bytes = response.read(MAX_BODY + 1)
    except urllib.error.HTTPError as exc:
        with exc:
            detail = snippet(exc.read(_SNIPPET * 4) if exc.fp else b"")
        hint = {
            401: f"check the API key ({ENV_KEY})",
            403: f"check the API key ({ENV_KEY}) and its permissions",
            404: "check the URL (the API base, e.g. http://host:port/v1) and "
            "the model name",
            429: "the server is rate limiting; retry later or lower the load",
        }.get(exc.code, "check the server's logs")
        raise LlmError(f"{where} -> HTTP {exc.code}: {detail}; {hint}") from None
    except TimeoutError:
        raise _timed_out(where, config.timeout) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise _timed_out(where, config.timeout) from None
        raise LlmError(
            f"{where} failed: {exc.reason}; check that the server is running and "
            "the URL is right"
        ) from None
    except (http.client.HTTPException, OSError) as exc:
        raise LlmError(
            f"{where} failed: {type(exc).__name__}: {exc}; check that the server "
            "is running and speaks HTTP"
        ) from None
    if status != 200:
        raise LlmError(
            f"{where} -> HTTP {status}: {snippet(body)}; a chat completion answers 200"
        )
    if len(body) > MAX_BODY:
        raise LlmError(
            f"{where} answered more than {MAX_BODY} bytes; check the URL and the server"
        )
    return body


def content_of(body: bytes) -> str:
    """``choices[0].message.content`` of a chat completion, or :class:`LlmError`."""
    try:
        document: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LlmError(
            f"the response is not JSON ({exc}): {snippet(body)}; check that the URL "
            "is the API base of an OpenAI-compatible server (ending in /v1)"
        ) from None
    if isinstance(document, dict) and "error" in document:
        raise LlmError(
            f"the server answered with an error: {snippet(json.dumps(document))}"
        )
    try:
        content = document["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise LlmError(
            f"the response has no choices[0].message.content: {snippet(body)}; the "
            "endpoint must speak the OpenAI chat-completions format"
        ) from None
    if not isinstance(content, str):
        raise LlmError(
            f"choices[0].message.content is {type(content).__name__}, not text; the "
            "model must answer in plain text (no tool calls)"
        )
    return content


def complete(
    config: LlmConfig,
    messages: list[dict[str, str]],
    opener: Callable[..., Any] | None = None,
) -> str:
    """Ask the endpoint; the model's message content, or :class:`LlmError`."""
    return content_of(send(config, chat_request(config, messages), opener))


def unfenced(text: str) -> str:
    """The text inside one surrounding Markdown code fence, if it has one."""
    if not (text.startswith("```") and text.endswith("```") and len(text) >= 6):
        return text
    inner = text[3:-3]
    first, newline, rest = inner.partition("\n")
    if newline and (not first.strip() or first.strip().isalnum()):
        inner = rest  # drop the fence's language tag line
    return inner.strip()

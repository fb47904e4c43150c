"""A fake OpenAI-compatible chat-completions server on 127.0.0.1, for the tests of
every client of :mod:`worldline.actors.runtime.llm` (the simulator's world model, the
extractor's LLM extraction). It records each request and answers from a queue of
:class:`Reply` (then :attr:`Fake.default`); a stalled reply never answers, so a client
times out."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["Fake", "Recorded", "Reply", "completion", "serve"]


def completion(content: str) -> bytes:
    """A chat-completion response body whose message content is ``content``."""
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
    ).encode()


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = completion('{"observation": "ok", "terminal": false}')
    stall: bool = False  # wait (without answering) until the server stops


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Fake:
    url: str = ""
    default: Reply = field(default_factory=Reply)
    replies: list[Reply] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, *replies: Reply) -> None:
        with self.lock:
            self.replies.extend(replies)

    def take(self, recorded: Recorded) -> Reply:
        with self.lock:
            self.requests.append(recorded)
            return self.replies.pop(0) if self.replies else self.default


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler thread
    block_on_close = True


def _handler(fake: Fake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length", "0"))
            recorded = Recorded(
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=self.rfile.read(size),
            )
            reply = fake.take(recorded)
            if reply.stall:
                fake.release.wait(10)
                self.close_connection = True
                return
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep the test output quiet

    return Handler


@contextmanager
def serve() -> Iterator[Fake]:
    """A fake server on 127.0.0.1 (``Fake.url`` is its API base); stopped, its handler
    threads joined and its socket closed on exit. Set ``no_proxy=127.0.0.1`` in the
    test so no proxy sits in between."""
    state = Fake()
    server = _Server(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    host, port = server.server_address[:2]
    state.url = f"http://{host!s}:{port}/v1"
    try:
        yield state
    finally:
        state.release.set()  # let a stalled handler return
        server.shutdown()
        server.server_close()
        thread.join(5)

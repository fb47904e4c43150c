"""The HTTP endpoint of an actor process: Prometheus metrics, health and readiness.

A tiny HTTP/1.0 server on anyio in the supervisor's task group (no web framework), so
an answer also says the event loop turns:

- ``GET /metrics``: :func:`worldline.actors.runtime.metrics.render`, the text
  exposition format 0.0.4;
- ``GET /healthz``: 200 while the process serves (a liveness probe);
- ``GET /readyz``: 200 once every actor of the process has bound its inputs and
  services and is connected to NATS, else 503 with one line per actor that is not
  (``Registry.readiness``; a readiness probe).

Any other path is 404, any other method 405. It stops on cancel.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
from anyio.abc import SocketAttribute

from worldline.actors.runtime.metrics import render

if TYPE_CHECKING:
    from anyio.abc import SocketStream, TaskStatus

    from worldline.actors.runtime.metrics import Registry

__all__ = ["CONTENT_TYPE", "PATHS", "answer", "serve_metrics"]

log = logging.getLogger("worldline.metrics")

# The text exposition format prometheus_client writes (names escaped to underscores).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_REQUEST = 8192  # bytes of request head read before answering 400
REQUEST_TIMEOUT = 5.0  # seconds a client may take to send its request head


def _response(status: str, body: str, content_type: str = "text/plain") -> bytes:
    payload = body.encode()
    head = (
        f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + payload


PATHS = ("/metrics", "/healthz", "/readyz")


def answer(request_head: bytes, registry: Registry) -> bytes:
    """The HTTP response to one request head (pure but for reading the registry, so
    tests can call it)."""
    line = request_head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return _response("400 Bad Request", "bad request line\n")
    method, target = parts[0], parts[1].split("?", 1)[0]
    if target not in PATHS:
        return _response("404 Not Found", f"served here: {', '.join(PATHS)}\n")
    if method not in ("GET", "HEAD"):
        return _response("405 Method Not Allowed", "use GET\n")
    if target == "/metrics":
        response = _response("200 OK", render(registry), CONTENT_TYPE)
    elif target == "/healthz":
        response = _response("200 OK", "ok\n")
    elif waiting := registry.readiness():
        response = _response("503 Service Unavailable", "\n".join(waiting) + "\n")
    else:
        response = _response("200 OK", "ready\n")
    if method == "HEAD":
        return response.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
    return response


async def _read_head(stream: SocketStream) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head and b"\n\n" not in head:
        if len(head) > MAX_REQUEST:
            break
        try:
            head += await stream.receive(4096)
        except anyio.EndOfStream:
            break
    return head


async def serve_metrics(
    registry: Registry,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``GET /metrics``, ``/healthz`` and ``/readyz`` for ``registry`` until
    cancelled.

    Reports started with the bound port (``port=0`` picks a free one) and stores it in
    ``registry.port``.

    Raises:
        OSError: the address cannot be bound (in use, not local).
    """

    async def handle(stream: SocketStream) -> None:
        async with stream:
            try:
                with anyio.fail_after(REQUEST_TIMEOUT):
                    head = await _read_head(stream)
                await stream.send(answer(head, registry))
            except (TimeoutError, anyio.BrokenResourceError, OSError) as exc:
                log.debug("metrics request dropped: %s", exc)

    listener = await anyio.create_tcp_listener(
        local_host=host, local_port=port, reuse_port=False
    )
    async with listener:
        bound = int(listener.extra(SocketAttribute.local_port))
        registry.port = bound
        log.debug("metrics: http://%s:%d/metrics", host, bound)
        task_status.started(bound)
        await listener.serve(handle)

"""A local HTTP peer for the tests: a threaded server on a free loopback port.

The OpenAI-compatible providers, the Secret Manager peer and the journal's
counting servers differ only in what they answer; the server's lifecycle and
the chat-completion document they send live here once.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LocalServer", "chat_completion", "send_json", "serving"]

#: Answers one request: the handler (headers, command, path) and the body read.
Handle = Callable[[BaseHTTPRequestHandler, bytes], None]


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: 64 workers connecting at once
    # would see resets before a handler thread ever ran.
    request_queue_size = 1024


class LocalServer:
    """Serves GET and POST through `handle` on ``127.0.0.1``, in daemon threads, as a context.

    Args:
        handle: Called per request, on the request's thread.
        on_exit: Called first on exit, e.g. to release requests held open.
        handler_class: A request handler class to serve instead of `handle`.
        keep_alive: Speak HTTP/1.1 and keep connections open between requests,
            as providers do; the answers must then carry a Content-Length.
    """

    def __init__(self, handle: Handle | None = None, *,
                 on_exit: Callable[[], None] | None = None,
                 handler_class: type[BaseHTTPRequestHandler] | None = None,
                 keep_alive: bool = False) -> None:
        self._on_exit = on_exit

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def do_GET(self) -> None:
                assert handle is not None
                handle(self, b"")

            def do_POST(self) -> None:
                assert handle is not None
                handle(self, self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = _Server(("127.0.0.1", 0), handler_class or Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> LocalServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._on_exit is not None:
            self._on_exit()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def chat_completion(text: str, *, model: str = "m") -> bytes:
    """An OpenAI ``chat.completion`` document whose one choice answers `text`."""
    return json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}]}).encode()


def send_json(handler: BaseHTTPRequestHandler, payload: bytes, status: int = 200) -> None:
    """Answer with `payload` as JSON; raises OSError if the client has gone."""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)
    handler.wfile.flush()


@contextlib.contextmanager
def serving(handler_class: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler_class` (a test's own request handler); yields the base URL."""
    with LocalServer(handler_class=handler_class) as server:
        yield server.url

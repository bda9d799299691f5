"""A page server for browser tests: a request handler served on a free localhost port."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


class QuietHandler(BaseHTTPRequestHandler):
    """A page handler that keeps its request log out of the test output."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def posted_form(self) -> dict[str, str]:
        """The fields of a form POSTed to this request (blank ones left out)."""
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        return {key: values[0] for key, values in parse_qs(body).items()}

    def send_html(
        self, body: str, status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        data = body.encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser gave up on the page (a slow one, a stopped call)


class _Server(ThreadingHTTPServer):
    # A slow page's handler must not hold the test up at shutdown.
    daemon_threads = True
    block_on_close = False


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` until the block ends; yields the site's base URL."""
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

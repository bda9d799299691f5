"""Serving rendered pages over HTTP on localhost, in a daemon thread: what the demo site
and the benchmark corpus sites have in common."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import parse_qs

Rendered = tuple[int, bytes]


class PageServer:
    """Subclasses say what a path renders to (`render`); `control` may answer POSTs to
    extra paths (e.g. an admin endpoint that changes the site)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, name: str = "site") -> None:
        self.host = host
        self.port = port
        self.name = name
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("site not started")
        return f"http://{self.host}:{self._server.server_address[1]}"

    def render(self, path: str, form: dict[str, str] | None = None) -> Rendered:
        raise NotImplementedError

    def control(self, path: str, query: dict[str, str]) -> Rendered | None:
        """Answer a POST that is not a form submission; None: render it as a form."""
        return None

    def start(self) -> Self:
        pages = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return  # quiet: the demo and the benchmarks print their own story

            def _send(self, rendered: Rendered) -> None:
                status, body = rendered
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(pages.render(self.path.split("?", 1)[0]))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode() if length else ""
                path, _, query = self.path.partition("?")
                fields = {k: v[-1] for k, v in parse_qs(query or raw).items()}
                answered = pages.control(path, fields)
                if answered is None:
                    answered = pages.render(path, {k: v[-1] for k, v in parse_qs(raw).items()})
                self._send(answered)

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, name=f"pages:{self.name}", daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

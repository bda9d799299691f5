"""The stand-in model's HTTP server (HTTP/1.1, keep-alive, one thread per connection).

    POST /v1/messages               the Messages API (no streaming)
    POST /v1/messages/count_tokens  {"input_tokens": n}
    GET  /v1/models                 the model ids it answers to (any id works)
    GET  /v1/models/{model_id}      one of them (404 for any other id)
    GET  /                          a page saying plainly that this is a stand-in
    POST /_faults                   inject failures into the next /v1/messages requests:
                                    {"statuses": [529, 529], "latency_ms": 200,
                                     "latency_count": 3, "retry_after_ms": 50}
                                    statuses are answered in order, one per request;
                                    latency applies to the next latency_count requests
                                    (all of them when absent); retry_after_ms adds a
                                    retry-after-ms header to injected 429/529/5xx.
    GET  /_faults, DELETE /_faults  show or clear pending faults
    GET  /_stats                    requests served, by status

In-process:

    with StandinServer() as standin:           # 127.0.0.1, a free port
        standin.url                             # http://127.0.0.1:PORT
        standin.inject(statuses=[529, 529])
"""

from __future__ import annotations

import contextlib
import html
import json
import socket
import sys
import threading
from collections import Counter, deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from services.dev.standin import policy, protocol
from services.dev.standin.conversation import Decision, read_conversation
from services.dev.standin.signing import DEFAULT_KEY
from services.dev.standin.vocabulary import VOCABULARY
from services.kernel.logs import get_logger
from services.kernel.secrets import redact

log = get_logger("rote.standin")

MODEL_IDS = [
    "claude-sonnet-5-5",
    "claude-haiku-5-5",
    "claude-opus-5-5",
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
    "claude-opus-4-5",
]
_INJECTED_TYPES = {
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
}


class Faults:
    """Failures and latency queued for the next requests (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.statuses: deque[int] = deque()
        self.latency_ms = 0
        self.latency_count: int | None = None
        self.retry_after_ms: int | None = None

    def add(
        self,
        statuses: list[int] | None = None,
        latency_ms: int | None = None,
        latency_count: int | None = None,
        retry_after_ms: int | None = None,
    ) -> None:
        for status in statuses or []:
            if not isinstance(status, int) or not 400 <= status <= 599:
                raise ValueError(f"statuses: {status!r} is not an HTTP error status")
        with self._lock:
            self.statuses.extend(statuses or [])
            if latency_ms is not None:
                self.latency_ms = max(0, int(latency_ms))
                self.latency_count = None if latency_count is None else int(latency_count)
            if retry_after_ms is not None:
                self.retry_after_ms = max(0, int(retry_after_ms))

    def clear(self) -> None:
        with self._lock:
            self.statuses.clear()
            self.latency_ms, self.latency_count, self.retry_after_ms = 0, None, None

    def take(self) -> tuple[float, int | None, int | None]:
        """(seconds to wait, status to fail with or None, retry-after-ms or None)."""
        with self._lock:
            delay = 0.0
            if self.latency_ms and (self.latency_count is None or self.latency_count > 0):
                delay = self.latency_ms / 1000
                if self.latency_count is not None:
                    self.latency_count -= 1
            status = self.statuses.popleft() if self.statuses else None
            return delay, status, self.retry_after_ms

    def view(self) -> dict[str, Any]:
        with self._lock:
            return {
                "statuses": list(self.statuses),
                "latency_ms": self.latency_ms,
                "latency_count": self.latency_count,
                "retry_after_ms": self.retry_after_ms,
            }


def _model_info(model_id: str) -> dict[str, str]:
    return {
        "type": "model",
        "id": model_id,
        "display_name": f"{model_id} (rote stand-in)",
        "created_at": "2026-01-01T00:00:00Z",
    }


def _decide(body: Any) -> Decision:
    return policy.decide(read_conversation(body))


def _index_page() -> str:
    forms = "".join(f"<li><code>{html.escape(f)}</code></li>" for f in VOCABULARY)
    marks = "".join(f"<li><code>{html.escape(m)}</code></li>" for m in policy.MARKERS)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rote stand-in model (not Claude)</title></head>
<body>
<h1>rote stand-in model</h1>
<p><strong>This is a stand-in, not Claude and not a language model.</strong> It speaks the
Anthropic Messages API (<code>POST /v1/messages</code>) and plays a scripted agent so that
rote's demo and tests run offline through the real anthropic SDK. Its answers come from a
small fixed policy, and its token counts are estimates (one token per 4 characters).</p>
<p>Use it with <code>ANTHROPIC_BASE_URL=&lt;this server&gt;</code>.</p>
<h2>Tasks it understands</h2><ul>{forms}</ul>
<h2>Markers for tests</h2><ul>{marks}</ul>
<p>Fault injection: <code>POST /_faults {{"statuses": [529], "latency_ms": 200}}</code>.</p>
</body></html>
"""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "rote-standin/1"
    # Idle keep-alive connections close after this; clients drop theirs sooner.
    timeout = 60
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("standin_http", line=redact(format % args))

    # -- plumbing

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        # Counted before writing: a client that has read the answer must find it counted.
        self.server.standin.count(self.path, status)
        self.send_response(status)
        ctype = "text/html; charset=utf-8" if isinstance(payload, bytes) else "application/json"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, error: protocol.ApiError, headers: dict[str, str] | None = None) -> None:
        request_id = protocol.new_id("req")
        all_headers = {"request-id": request_id, **(headers or {})}
        self._send(error.status, error.body(request_id), all_headers)

    def _body(self) -> Any:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise protocol.ApiError(411, "invalid_request_error", "Content-Length is required")
        raw = self.rfile.read(int(length))
        try:
            return json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise protocol.invalid(f"the request body is not valid JSON: {exc}") from None

    # -- routes

    def do_GET(self) -> None:
        standin = self.server.standin
        if self.path in ("/", "/index.html"):
            self._send(200, _index_page().encode())
        elif urlsplit(self.path).path.rstrip("/") == "/v1/models":
            data = [_model_info(model_id) for model_id in MODEL_IDS]
            page = {"data": data, "has_more": False, "first_id": data[0]["id"]}
            self._send(200, {**page, "last_id": data[-1]["id"]})
        elif self.path.startswith("/v1/models/"):
            # GET /v1/models/{model_id}: one model object, as the API answers it.
            model_id = unquote(urlsplit(self.path).path.removeprefix("/v1/models/"))
            if model_id in MODEL_IDS:
                self._send(200, _model_info(model_id))
            else:
                self._error(protocol.ApiError(404, "not_found_error", f"model: {model_id}"))
        elif self.path == "/_faults":
            self._send(200, standin.faults.view())
        elif self.path == "/_stats":
            self._send(200, standin.stats())
        else:
            self._error(protocol.ApiError(404, "not_found_error", f"no route {self.path}"))

    def do_DELETE(self) -> None:
        if self.path == "/_faults":
            self.server.standin.faults.clear()
            self._send(200, self.server.standin.faults.view())
        else:
            self._error(protocol.ApiError(404, "not_found_error", f"no route {self.path}"))

    def do_POST(self) -> None:
        try:
            body = self._body()
            if self.path == "/_faults":
                self._post_faults(body)
            elif self.path.startswith("/v1/messages/count_tokens"):
                self._count_tokens(body)
            elif self.path.startswith("/v1/messages"):
                self._messages(body)
            else:
                raise protocol.ApiError(404, "not_found_error", f"no route {self.path}")
        except protocol.ApiError as exc:
            self._error(exc)
        except ConnectionError:  # the client went away mid-answer (it stopped): no one to tell
            log.debug("standin_client_gone", path=self.path)
        except Exception as exc:  # a bug in the stand-in: answer 500, keep serving
            log.exception("standin_failed", path=self.path)
            self._error(
                protocol.ApiError(500, "api_error", f"stand-in error: {type(exc).__name__}")
            )

    def _post_faults(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise protocol.invalid("faults: send a JSON object")
        try:
            self.server.standin.inject(
                statuses=body.get("statuses"),
                latency_ms=body.get("latency_ms"),
                latency_count=body.get("latency_count"),
                retry_after_ms=body.get("retry_after_ms"),
            )
        except (TypeError, ValueError) as exc:
            raise protocol.invalid(f"faults: {exc}") from None
        self._send(200, self.server.standin.faults.view())

    def _count_tokens(self, body: Any) -> None:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise protocol.invalid("messages: Field required")
        self._send(200, {"input_tokens": protocol.count_input_tokens(body)})

    def _check_auth(self) -> None:
        expected = self.server.standin.api_key
        if expected is None:
            return
        presented = self.headers.get("x-api-key")
        auth = self.headers.get("Authorization", "")
        if presented is None and auth.lower().startswith("bearer "):
            presented = auth[7:]
        if presented != expected:
            # Like some proxies, the stand-in echoes the key it got: tests use this to
            # prove rote never lets a key through to its logs, events or errors.
            raise protocol.ApiError(
                401, "authentication_error", f"invalid x-api-key: {presented!r}"
            )

    def _messages(self, body: Any) -> None:
        standin = self.server.standin
        standin.record(body)
        with standin.in_flight():
            self._answer_messages(standin, body)

    def _answer_messages(self, standin: StandinServer, body: Any) -> None:
        delay, status, retry_after_ms = standin.faults.take()
        if delay:
            threading.Event().wait(delay)
        if status is not None:
            headers: dict[str, str] = {}
            if retry_after_ms is not None and (status in (429, 529) or status >= 500):
                headers["retry-after-ms"] = str(retry_after_ms)
            kind = _INJECTED_TYPES.get(status, "api_error")
            self._error(
                protocol.ApiError(status, kind, f"injected by the stand-in ({status})"), headers
            )
            return
        self._check_auth()
        message = protocol.respond(body, standin.signing_key, standin.cache, _decide)
        self._send(200, message, {"request-id": protocol.new_id("req")})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    standin: StandinServer

    def process_request(self, request: Any, client_address: Any) -> None:
        self.standin.track(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.standin.untrack(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up (rote stopping) is not an error of the stand-in's.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class StandinServer:
    """The stand-in on a background thread. `port=0` picks a free port."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        api_key: str | None = None,
        signing_key: bytes = DEFAULT_KEY,
        min_cache_tokens: int = protocol.DEFAULT_MIN_CACHE_TOKENS,
        keep_requests: int = 200,
    ) -> None:
        self.host = host
        self.port = port
        self.api_key = api_key
        self.signing_key = signing_key
        self.cache = protocol.PromptCache(min_tokens=min_cache_tokens)
        self.faults = Faults()
        self.received: deque[Any] = deque(maxlen=keep_requests)
        self._counts: Counter[str] = Counter()
        self._in_flight = 0
        self._max_in_flight = 0
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> StandinServer:
        server = _Server((self.host, self.port), _Handler)
        server.standin = self
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},  # stop() returns within this
            name=f"standin:{self.port}",
            daemon=True,
        )
        self._thread.start()
        log.info("standin_started", url=self.url)
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:  # wake keep-alive threads blocked on reads
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def serve_forever(self) -> None:
        """Serve on the calling thread until interrupted (the CLI)."""
        server = _Server((self.host, self.port), _Handler)
        server.standin = self
        self._server = server
        self.port = server.server_address[1]
        try:
            server.serve_forever()
        finally:
            server.server_close()

    def __enter__(self) -> StandinServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- test controls

    def inject(
        self,
        *,
        statuses: list[int] | None = None,
        latency_ms: int | None = None,
        latency_count: int | None = None,
        retry_after_ms: int | None = None,
    ) -> None:
        self.faults.add(statuses, latency_ms, latency_count, retry_after_ms)

    def clear_faults(self) -> None:
        self.faults.clear()

    def record(self, body: Any) -> None:
        self.received.append(body)

    def count(self, path: str, status: int) -> None:
        key = "messages" if path.startswith("/v1/messages") else "other"
        with self._lock:
            self._counts[f"{key}:{status}"] += 1
            if key == "messages":
                self._counts["messages"] += 1

    def stats(self) -> dict[str, int]:
        """Requests answered ("messages", "messages:<status>") and the most
        /v1/messages requests ever handled at once ("max_in_flight")."""
        with self._lock:
            return {**self._counts, "max_in_flight": self._max_in_flight}

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[None]:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def track(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)

    def untrack(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)

"""SDK exceptions become stable codes; only transient failures are retried; backoff
grows, is capped and honours the server's retry-after."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import anyio
import httpx2
import pytest

from services.kernel import secrets
from services.kernel.secrets import redact, register_secret
from services.llm.calls import CONNECT_TIMEOUT_S, CallFailed, ModelCaller, make_client
from services.llm.failures import (
    BACKOFF_CAP_S,
    MAX_DETAIL_CHARS,
    MAX_RETRY_AFTER_S,
    Failure,
    backoff_s,
    classify,
    retry_after,
)

REQUEST = httpx2.Request("POST", "http://127.0.0.1:9/v1/messages")


def status_error(
    cls: type[anthropic.APIStatusError],
    status: int,
    kind: str,
    headers: dict[str, str] | None = None,
    message: str = "boom",
) -> anthropic.APIStatusError:
    body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    response = httpx2.Response(
        status, request=REQUEST, headers={"request-id": "req_1", **(headers or {})}, json=body
    )
    return cls(f"Error code: {status} - {body}", response=response, body=body)


@pytest.mark.parametrize(
    ("cls", "status", "kind", "code", "retryable"),
    [
        (anthropic.RateLimitError, 429, "rate_limit_error", "rate_limited", True),
        (anthropic.OverloadedError, 529, "overloaded_error", "overloaded", True),
        (anthropic.InternalServerError, 500, "api_error", "upstream", True),
        (anthropic.ServiceUnavailableError, 503, "api_error", "upstream", True),
        (anthropic.GatewayTimeoutError, 504, "timeout_error", "timeout", True),
        (anthropic.RequestTimeoutError, 408, "timeout_error", "timeout", True),
        (anthropic.ConflictError, 409, "api_error", "upstream", True),
        (anthropic.BadRequestError, 400, "invalid_request_error", "invalid_request", False),
        (anthropic.NotFoundError, 404, "not_found_error", "invalid_request", False),
        (anthropic.ContentTooLargeError, 413, "request_too_large", "invalid_request", False),
        (
            anthropic.UnprocessableEntityError,
            422,
            "invalid_request_error",
            "invalid_request",
            False,
        ),
        (anthropic.AuthenticationError, 401, "authentication_error", "auth", False),
        (anthropic.PermissionDeniedError, 403, "permission_error", "auth", False),
        (anthropic.PaymentRequiredError, 402, "billing_error", "auth", False),
    ],
)
def test_status_errors_map_to_stable_codes(
    cls: type[anthropic.APIStatusError], status: int, kind: str, code: str, retryable: bool
) -> None:
    failure = classify(status_error(cls, status, kind))
    assert failure is not None
    assert (failure.code, failure.retryable, failure.status) == (code, retryable, status)
    assert failure.request_id == "req_1"
    assert kind in failure.message and "boom" in failure.message


def test_connection_and_timeout_errors_are_retryable() -> None:
    timeout = classify(anthropic.APITimeoutError(request=REQUEST))
    assert timeout is not None and (timeout.code, timeout.retryable) == ("timeout", True)
    connection = classify(anthropic.APIConnectionError(request=REQUEST))
    assert connection is not None and (connection.code, connection.retryable) == (
        "upstream",
        True,
    )


def test_missing_credentials_is_an_auth_failure() -> None:
    exc = TypeError(
        '"Could not resolve authentication method. Expected one of api_key, auth_token, '
        'or credentials to be set."'
    )
    failure = classify(exc)
    assert failure is not None and failure.code == "auth" and not failure.retryable
    assert "ANTHROPIC_API_KEY" in failure.message


def test_other_exceptions_are_not_model_failures() -> None:
    assert classify(ValueError("a bug")) is None
    assert classify(TypeError("unsupported operand")) is None


def test_a_huge_error_body_is_quoted_in_part_and_keeps_its_code() -> None:
    page = "<html>" + "bad gateway " * 200_000 + "</html>"  # a proxy's 2 MB error page
    failure = classify(status_error(anthropic.InternalServerError, 502, "api_error", message=page))
    assert failure is not None and failure.code == "upstream"
    assert len(failure.message) < MAX_DETAIL_CHARS + 100
    assert failure.message.startswith("model API answered 502 api_error: <html>bad gateway")


def test_registered_secrets_are_masked_in_failure_messages() -> None:
    register_secret("rote-unit-secret-0042")
    exc = status_error(
        anthropic.AuthenticationError,
        401,
        "authentication_error",
        message="invalid x-api-key: 'rote-unit-secret-0042'",
    )
    failure = classify(exc)
    assert failure is not None
    assert "rote-unit-secret-0042" not in failure.message
    assert "[redacted]" in failure.message


def test_retry_after_headers() -> None:
    assert retry_after({"retry-after-ms": "250"}) == pytest.approx(0.25)
    assert retry_after({"retry-after": "3"}) == 3.0
    assert retry_after({"retry-after-ms": "x", "retry-after": "2"}) == 2.0
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None
    failure = classify(
        status_error(anthropic.RateLimitError, 429, "rate_limit_error", {"retry-after": "7"})
    )
    assert failure is not None and failure.retry_after_s == 7.0


def test_backoff_grows_exponentially_with_jitter_and_is_capped() -> None:
    plain = Failure(code="overloaded", retryable=True, message="x")
    no_jitter = [backoff_s(n, plain, rand=lambda: 0.0) for n in range(1, 8)]
    assert no_jitter[:5] == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert max(no_jitter) == BACKOFF_CAP_S
    full_jitter = backoff_s(3, plain, rand=lambda: 1.0)
    assert full_jitter == pytest.approx(2.0 * 0.75)


def test_backoff_honours_retry_after_up_to_a_limit() -> None:
    asked = Failure(code="rate_limited", retryable=True, message="x", retry_after_s=3.5)
    assert backoff_s(1, asked) == 3.5
    greedy = Failure(code="rate_limited", retryable=True, message="x", retry_after_s=3600)
    assert backoff_s(1, greedy) == MAX_RETRY_AFTER_S


def test_client_honours_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/")
    local = make_client()
    # A local server needs no key, but the SDK wants one: a placeholder goes along.
    assert local.api_key == "no-key"
    assert str(local.base_url).startswith("http://127.0.0.1:9")
    assert local.max_retries == 0  # rote retries itself, counting attempts
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-the-env-1234")
    assert make_client().api_key == "from-the-env-1234"


def test_retry_after_zero_waits_the_normal_backoff() -> None:
    plain = Failure(code="rate_limited", retryable=True, message="x")
    at_once = Failure(code="rate_limited", retryable=True, message="x", retry_after_s=0.0)
    for attempt in (1, 3):
        assert backoff_s(attempt, at_once, rand=lambda: 0.0) == backoff_s(
            attempt, plain, rand=lambda: 0.0
        )
    assert backoff_s(1, at_once, rand=lambda: 0.0) == 0.5


@pytest.mark.parametrize("key", ["rote-unit-crlf-key-91\r", "rote-unit-mid\rkey-92"])
def test_a_key_no_http_header_can_carry_is_auth_not_retried_and_not_quoted(key: str) -> None:
    escaped = key.encode("unicode_escape").decode()
    exc = anthropic.APIConnectionError(request=REQUEST)
    exc.__cause__ = httpx2.LocalProtocolError(f"Illegal header value b'Bearer {escaped}'")
    failure = classify(exc)
    assert failure is not None
    assert (failure.code, failure.retryable) == ("auth", False)
    assert "rote-unit" not in failure.message and "Bearer" not in failure.message
    assert "ANTHROPIC_API_KEY" in failure.message


@pytest.mark.parametrize(
    ("env", "api_key", "auth_token"),
    [
        ({"ANTHROPIC_API_KEY": "from-a-crlf-file-1234\r\n"}, "from-a-crlf-file-1234", None),
        ({"ANTHROPIC_AUTH_TOKEN": " \tbearer-token-5678\n"}, None, "bearer-token-5678"),
        # Only whitespace is no key: a local server gets the placeholder.
        (
            {"ANTHROPIC_API_KEY": "\r\n", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/"},
            "no-key",
            None,
        ),
    ],
)
def test_client_credentials_are_trimmed(
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    api_key: str | None,
    auth_token: str | None,
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    client = make_client(env)
    assert (client.api_key, client.auth_token) == (api_key, auth_token)


def test_the_client_s_credentials_are_secrets_in_every_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(secrets, "_secrets", set())
    make_client({"ANTHROPIC_API_KEY": "abcd\r"})  # a 4-character key from a CRLF env file
    for text in ("invalid x-api-key: 'abcd'", "Illegal header value b'abcd\\r'", "abcd\r"):
        assert "abcd" not in redact(text), text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # A blank line in an env file or compose file: the default API, not a URL of "".
        ("", "https://api.anthropic.com"),
        (" \r\n", "https://api.anthropic.com"),
        # From a CRLF env file: the SDK would refuse the "\r" and the service not start.
        ("http://127.0.0.1:9/\r\n", "http://127.0.0.1:9"),
    ],
)
def test_a_blank_or_untrimmed_base_url_is_read_as_meant(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", raw)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-the-env-1234")
    assert str(make_client().base_url).rstrip("/") == expected
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    # A blank base URL names no local server: no placeholder key is sent to the real API.
    assert (make_client().api_key == "no-key") == (expected != "https://api.anthropic.com")


class _OneAnswer(BaseHTTPRequestHandler):
    """Answers every POST with the server's `answer` (status, content type, body)."""

    server: _AnswerServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.requests += 1
        status, content_type, body = self.server.answer
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:  # quiet test output
        pass


class _AnswerServer(ThreadingHTTPServer):
    def __init__(self, answer: tuple[int, str, bytes]) -> None:
        super().__init__(("127.0.0.1", 0), _OneAnswer)
        self.answer = answer
        self.requests = 0


@contextmanager
def _serving(answer: tuple[int, str, bytes]) -> Iterator[_AnswerServer]:
    server = _AnswerServer(answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        # ANTHROPIC_BASE_URL names a web app (which answers every path with its page), or
        # a proxy answers with its sign-in form.
        ("text/html; charset=utf-8", b"<!doctype html><title>Sign in</title>"),
        ("application/json", b"<html>not json at all</html>"),
        # JSON, but no message: an empty reply here would pass for the model's answer.
        ("application/json", b'{"status": "ok"}'),
    ],
)
async def test_a_successful_answer_that_is_no_message_is_upstream_and_not_retried(
    content_type: str, body: bytes
) -> None:
    with _serving((200, content_type, body)) as server:
        env = {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.server_port}"}
        caller = ModelCaller(make_client(env), concurrency=1, max_attempts=4)
        request = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        try:
            with pytest.raises(CallFailed) as caught:
                await caller.call(request)
        finally:
            await caller.aclose()
    failure = caught.value.failure
    assert (failure.code, failure.retryable, caught.value.attempts) == ("upstream", False, 1)
    assert "ANTHROPIC_BASE_URL" in failure.message
    assert server.requests == 1


@pytest.mark.anyio
async def test_a_server_that_never_accepts_the_connection_fails_fast() -> None:
    """A firewall that drops packets (or a server whose backlog is full) never completes
    the TCP handshake: the call fails after a connect timeout, not the 300 s an answer
    may take."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # never accepted: once the backlog is full, SYNs are dropped
        fillers = []
        for _ in range(8):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(listener.getsockname())
            fillers.append(filler)
        client = make_client(
            {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{listener.getsockname()[1]}"}
        )
        request = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        try:
            # Room for a busy machine past the connect timeout, far short of the 300 s
            # an answer may take: a call that waited for one would run into this bound.
            with anyio.fail_after(CONNECT_TIMEOUT_S + 20):
                with pytest.raises(anthropic.APITimeoutError):
                    await client.messages.create(**request)
        finally:
            await client.close()
            for filler in fillers:
                filler.close()

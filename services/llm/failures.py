"""What a failed model call means for the caller: a stable error code, whether trying
again can help, and how long to wait before the next attempt.

Codes (contracts.errors): rate_limited (429), overloaded (529), upstream (other 5xx,
409, connection failures, answers the SDK cannot read, successful answers that are no
message), timeout (no answer in time, 408), auth (401, 403, 402, no credentials,
credentials no HTTP header can carry), invalid_request (other 4xx: the request itself
is wrong, so repeating it cannot succeed).
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anthropic

from services.kernel.secrets import redact
from services.kernel.text import cut_text

# What a failure quotes of a successful answer that is no message.
MAX_ANSWER_EXCERPT_CHARS = 200
# Never wait longer than this for one retry, whatever the server's retry-after says.
MAX_RETRY_AFTER_S = 60.0
# What a failure quotes of the server's answer: a proxy's HTML page or a huge 400 body
# must not make the error itself too large to send (its code would be lost with it).
MAX_DETAIL_CHARS = 2000
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0

_RETRYABLE_STATUS = {408: "timeout", 409: "upstream", 429: "rate_limited", 529: "overloaded"}
_AUTH_STATUS = {401, 402, 403}


@dataclass(frozen=True)
class Failure:
    code: str
    retryable: bool
    message: str
    status: int | None = None
    request_id: str | None = None
    retry_after_s: float | None = None


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The server's requested wait: retry-after-ms, else retry-after (seconds or an
    HTTP date). None when absent or unreadable."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _status_failure(exc: anthropic.APIStatusError) -> Failure:
    status = exc.status_code
    kind = exc.type or "error"
    detail = exc.api_message or exc.message
    # Masked whole, short or not (cut_text masks only what it cuts).
    message = redact(f"model API answered {status} {kind}: {detail}")
    more = f" [... {len(message) - MAX_DETAIL_CHARS} more]"
    message = cut_text(message, MAX_DETAIL_CHARS, mark=more, mark_after_limit=True)
    wait = retry_after(exc.response.headers)
    if status in _RETRYABLE_STATUS:
        code, retryable = _RETRYABLE_STATUS[status], True
    elif status in _AUTH_STATUS:
        code, retryable = "auth", False
    elif status >= 500:
        code, retryable = ("timeout" if status == 504 else "upstream"), True
    else:
        code, retryable = "invalid_request", False
    return Failure(
        code=code,
        retryable=retryable,
        message=message,
        status=status,
        request_id=exc.request_id,
        retry_after_s=wait,
    )


def _is_local_protocol_error(exc: BaseException) -> bool:
    # By name: the HTTP library under the SDK has changed (httpx, httpx2) and may again.
    return any(cls.__name__ == "LocalProtocolError" for cls in type(exc).__mro__)


def _unsendable(cause: BaseException) -> Failure:
    """The HTTP library refused to send our own request: the same request fails the same
    way, so it is not retried. Its message quotes the offending header, credentials
    included, so none of it is passed on."""
    if "header" in str(cause).lower():
        return Failure(
            code="auth",
            retryable=False,
            message="the model API credentials cannot be sent: ANTHROPIC_API_KEY or "
            "ANTHROPIC_AUTH_TOKEN holds a character no HTTP header may carry (a line "
            "break or another control character); check how the variable is set",
        )
    return Failure(
        code="upstream",
        retryable=False,
        message=f"the request could not be sent to the model API ({type(cause).__name__})",
    )


def classify(exc: BaseException) -> Failure | None:
    """Map an exception from `AsyncAnthropic.messages.create` to a Failure; None for
    anything that is not a model API failure (a bug of ours)."""
    if isinstance(exc, anthropic.APIStatusError):
        return _status_failure(exc)
    if isinstance(exc, anthropic.APITimeoutError):
        return Failure(
            code="timeout", retryable=True, message="the model API did not answer in time"
        )
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__ or exc
        if _is_local_protocol_error(cause):
            return _unsendable(cause)
        return Failure(
            code="upstream",
            retryable=True,
            message=redact(f"cannot reach the model API: {type(cause).__name__}: {cause}"),
        )
    if isinstance(exc, anthropic.APIError):
        return Failure(
            code="upstream",
            retryable=False,
            message=redact(f"the model API answered something unreadable: {exc}"),
        )
    if isinstance(exc, json.JSONDecodeError):
        # The SDK decodes a 2xx answer labelled JSON without wrapping a failure.
        return not_a_message(f"a body labelled JSON that is not JSON ({exc})")
    credentials_error = getattr(anthropic, "CredentialsError", None)
    if (credentials_error is not None and isinstance(exc, credentials_error)) or (
        isinstance(exc, TypeError) and "authentication method" in str(exc)
    ):
        return Failure(
            code="auth",
            retryable=False,
            message="no model API credentials: set ANTHROPIC_API_KEY (or point "
            "ANTHROPIC_BASE_URL at an Anthropic-compatible server such as `rote model serve`)",
        )
    return None


def not_a_message(answer: object) -> Failure:
    """A successful HTTP answer that is no Messages API message (the SDK hands back a
    page that is not JSON as its text, and JSON as decoded): ANTHROPIC_BASE_URL names a
    server that does not speak the API, such as a web app or a proxy's sign-in page.
    The same request gets the same page, so it is not retried."""
    text = answer if isinstance(answer, str) else json.dumps(answer, default=str)
    # Masked whole, short or not (cut_text masks only what it cuts).
    excerpt = cut_text(" ".join(redact(text).split()), MAX_ANSWER_EXCERPT_CHARS)
    excerpt = excerpt or "an empty answer"
    return Failure(
        code="upstream",
        retryable=False,
        message="the model API answered something that is not a message; check that "
        f"ANTHROPIC_BASE_URL names an Anthropic-compatible server: {excerpt}",
    )


def backoff_s(
    attempt: int,
    failure: Failure,
    *,
    base_s: float = BACKOFF_BASE_S,
    cap_s: float = BACKOFF_CAP_S,
    rand: Callable[[], float] = random.random,
) -> float:
    """How long to wait after failed attempt number `attempt` (1-based): the server's
    retry-after when it asked for a wait, else exponential backoff with jitter."""
    # retry-after: 0 (or a date already past) asks for no wait at all: retrying at once
    # would hammer a server that just said it is overloaded, so our backoff applies.
    if failure.retry_after_s is not None and failure.retry_after_s > 0:
        return min(failure.retry_after_s, MAX_RETRY_AFTER_S)
    delay = min(cap_s, base_s * 2 ** (attempt - 1))
    # Up to 25% less, so callers that failed together do not retry together.
    return delay * (1 - 0.25 * rand())

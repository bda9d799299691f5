"""One model call through the anthropic SDK: a per-process concurrency limit, and our
own retry loop (the SDK's is switched off) so attempts are counted and configurable."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anthropic
import anyio

from services.kernel.logs import get_logger
from services.kernel.secrets import CREDENTIAL_ENV, register_credentials
from services.llm.failures import Failure, backoff_s, classify, not_a_message

log = get_logger("rote.llm")

# One attempt may take this long; a long completion with many output tokens fits.
ATTEMPT_TIMEOUT_S = 300.0
# But a host that never completes the handshake (a firewall dropping packets) is given
# up on after this, as the SDK's default does, rather than after the whole attempt's.
CONNECT_TIMEOUT_S = 10.0
# A whole call, attempts, backoff and the wait for a concurrency slot included, ends
# within this. The runner gives up on a call after 300 s (LLM_TIMEOUT_S): retrying past
# that would bill attempts nobody waits for, and the caller would learn nothing.
CALL_BUDGET_S = 270.0
DEFAULT_BASE_URL = "https://api.anthropic.com"


class CallFailed(Exception):
    def __init__(self, failure: Failure, attempts: int) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.attempts = attempts


@dataclass(frozen=True)
class CallResult:
    message: dict[str, Any]  # the API's Message object as JSON
    attempts: int


def credentials(env: Mapping[str, str]) -> dict[str, str]:
    """The SDK's credential argument (api_key, else auth_token), trimmed of surrounding
    whitespace: a key copied from a CRLF env file ends in "\\r", which no HTTP header may
    hold (and the HTTP library's refusal quotes the key). Registered as secrets first."""
    register_credentials(env)
    for name, argument in zip(CREDENTIAL_ENV, ("api_key", "auth_token"), strict=True):
        value = (env.get(name) or "").strip()
        if value:
            return {argument: value}
    return {}


def make_client(env: Mapping[str, str] | None = None) -> anthropic.AsyncAnthropic:
    """An AsyncAnthropic that honours ANTHROPIC_API_KEY / ANTHROPIC_AUTH_TOKEN and
    ANTHROPIC_BASE_URL, with the SDK's retries off."""
    env = os.environ if env is None else env
    # Passed explicitly, so the SDK never reads the untrimmed values from the environment.
    timeout = anthropic.Timeout(ATTEMPT_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    kwargs: dict[str, Any] = {"max_retries": 0, "timeout": timeout, **credentials(env)}
    # The SDK takes ANTHROPIC_BASE_URL as it is: blank (`ANTHROPIC_BASE_URL=` in an env
    # file) it sends every call to the URL "", and with a CRLF file's "\r" it refuses to
    # start. Blank means unset; an unset one is left to the SDK (its profiles may say).
    base_url = (env.get("ANTHROPIC_BASE_URL") or "").strip()
    if base_url:
        kwargs["base_url"] = base_url
    elif "ANTHROPIC_BASE_URL" in env:
        kwargs["base_url"] = DEFAULT_BASE_URL
    if "api_key" not in kwargs and "auth_token" not in kwargs and base_url:
        # Local Anthropic-compatible servers (rote model serve, Ollama) want no key, but
        # the SDK refuses to send a request without one.
        kwargs["api_key"] = "no-key"
    return anthropic.AsyncAnthropic(**kwargs)


def _as_json(answer: object) -> object:
    """The SDK's answer as JSON: a Message as its fields; what the SDK could not read as
    one (a page that is not JSON comes back as its text) as it is."""
    if isinstance(answer, anthropic.BaseModel):
        return answer.model_dump(mode="json", exclude_none=True)
    return answer


class ModelCaller:
    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        concurrency: int,
        max_attempts: int,
        budget_s: float = CALL_BUDGET_S,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.client = client
        self.limiter = anyio.CapacityLimiter(max(1, concurrency))
        self.max_attempts = max(1, max_attempts)
        self.budget_s = budget_s
        self._sleep = sleep

    async def call(self, params: dict[str, Any]) -> CallResult:
        """Retry 429/529/5xx/timeouts/connection failures with backoff; anything else
        fails at once. Raises CallFailed with the last failure and the attempts made;
        with a `timeout` failure once the call's budget is spent."""
        deadline = anyio.current_time() + self.budget_s
        attempt = 0
        last: Failure | None = None
        with anyio.CancelScope(deadline=deadline):
            while True:
                attempt += 1
                try:
                    async with self.limiter:
                        message = await self.client.messages.create(**params)
                except Exception as exc:
                    failure = classify(exc)
                    if failure is None:
                        raise
                    if not failure.retryable or attempt >= self.max_attempts:
                        raise CallFailed(failure, attempt) from None
                    wait = backoff_s(attempt, failure)
                    if anyio.current_time() + wait >= deadline:
                        # No time left for another attempt: the real failure says more
                        # than a timeout would.
                        raise CallFailed(failure, attempt) from None
                    last = failure
                    log.warning(
                        "llm_retry",
                        code=failure.code,
                        status=failure.status,
                        attempt=attempt,
                        wait_s=round(wait, 3),
                        request_id=failure.request_id,
                    )
                    await self._sleep(wait)
                    continue
                data = _as_json(message)
                if not isinstance(data, dict) or not isinstance(data.get("content"), list):
                    # Nothing says the API billed it; a reply without content would pass
                    # for the model's (empty) answer.
                    raise CallFailed(not_a_message(data), attempt)
                return CallResult(message=data, attempts=attempt)
        # Only the budget's deadline leaves the loop this way.
        before = f"; before that: {last.message}" if last is not None else ""
        raise CallFailed(
            Failure(
                code="timeout",
                retryable=False,
                message=f"no answer within the call's budget of {self.budget_s:g}s "
                f"({attempt} attempt{'s' if attempt > 1 else ''}){before}",
            ),
            attempt,
        )

    async def aclose(self) -> None:
        await self.client.close()

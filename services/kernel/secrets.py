"""Keeps secrets (API keys, passwords) out of logs, events and error replies.

Values of secret-looking environment variables are registered at start-up; every log
line and every error message passes through `redact`, which also hides the password
part of any URL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

_SECRET_ENV = re.compile(r"(API_KEY|AUTH_TOKEN|TOKEN|PASSWORD|SECRET)$")
# The scheme starts at a word boundary and is short: without both, a long unbroken run
# of letters (a base64 blob in a tool output) is rescanned from every position.
_URL_PASSWORD = re.compile(
    r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^:/@\s]+):(?P<pw>[^@\s]+)@"
)
# NATS URLs take a token as their whole userinfo (nats://TOKEN@host); for other schemes
# a lone userinfo is a user name, not a secret.
_NATS_TOKEN = re.compile(r"(?P<scheme>\b(?:nats|tls|ws|wss)://)(?P<token>[^:/@\s]+)@")
# A password passed as a query parameter (postgresql://host/db?password=...). Only
# passwords: a page's links may carry tokens of their own, and masking those in a tool's
# output would keep its run from ever compiling (a trace with a mask is not compiled).
_QUERY_PASSWORD = re.compile(r"(?P<key>[?&](?:password|passwd|pwd)=)[^&#\s]+", re.IGNORECASE)
_KEY_SHAPES = re.compile(r"sk-ant-[A-Za-z0-9_-]{8,}")
MASK = "[redacted]"

_secrets: set[str] = set()
S = TypeVar("S", bound=msgspec.Struct)


def register_secret(value: str | None) -> None:
    # Very short values would mask ordinary words; real keys are long.
    if value and len(value) >= 8:
        _secrets.add(value)


def register_from_env(env: Mapping[str, str] | None = None) -> None:
    env = os.environ if env is None else env
    for name, value in env.items():
        if _SECRET_ENV.search(name):
            register_secret(value)


def redact(text: str) -> str:
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group('scheme')}:{MASK}@", text)
    text = _NATS_TOKEN.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    text = _QUERY_PASSWORD.sub(lambda m: f"{m.group('key')}{MASK}", text)
    return _KEY_SHAPES.sub(MASK, text)


def redact_value(value: Any) -> Any:
    """Redact every string inside a JSON-like value."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


def redact_struct(value: S) -> S | None:
    """A contract value with every string inside redacted: the same object when there
    was nothing to mask, None when masking broke one of its constraints (better to show
    nothing than the secret)."""
    plain = msgspec.to_builtins(value)
    masked = redact_value(plain)
    if masked == plain:
        return value
    try:
        return msgspec.convert(masked, type(value))
    except msgspec.ValidationError:
        return None

"""Keeps secrets (API keys, passwords) out of logs, events and error replies.

Values of secret-looking environment variables are registered at start-up, and the
credentials rote hands to a client are registered by name (`register_credential`, with
the forms they take when quoted); every log line and every error message passes through
`redact`, which also hides the password part of any URL.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

_SECRET_ENV = re.compile(r"(API_KEY|AUTH_TOKEN|TOKEN|PASSWORD|SECRET)$")
# The credentials rote itself hands to a client: registered whatever their length.
CREDENTIAL_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
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

# A value named as a credential (ANTHROPIC_API_KEY, a password given to rote) is masked
# from 4 characters up: a 4-character key is still a key, while 1-3 characters would mask
# ordinary words and numbers everywhere (and guard nothing: such a key is guessable).
MIN_SECRET_CHARS = 4
# A variable found by a scan of the environment only because its name looks secret
# (..._TOKEN, ..._PASSWORD) may hold a flag or a count; only long values are masked.
MIN_SCANNED_SECRET_CHARS = 8

_secrets: set[str] = set()
S = TypeVar("S", bound=msgspec.Struct)


def register_secret(value: str | None, *, min_chars: int = MIN_SECRET_CHARS) -> None:
    if value and len(value) >= min_chars:
        _secrets.add(value)


def quoted_forms(value: str) -> set[str]:
    """`value` as error messages quote it: trimmed of surrounding whitespace, and with
    control characters escaped (repr of str or bytes, JSON): an HTTP library refusing a
    header shows the key as `b'Bearer abc\\r'`, where the raw value does not occur."""
    forms = {value, value.strip(), repr(value)[1:-1]}
    forms.add(value.encode("unicode_escape").decode("ascii"))
    forms.add(repr(value.encode("utf-8", "backslashreplace"))[2:-1])
    forms.add(json.dumps(value)[1:-1])
    forms.add(json.dumps(value, ensure_ascii=False)[1:-1])
    return {form for form in forms if form}


def register_credential(value: str | None) -> None:
    """A value rote sends as a credential: masked in every form it may be quoted in."""
    if value:
        for form in quoted_forms(value):
            register_secret(form)


def register_credentials(env: Mapping[str, str] | None = None) -> None:
    """The API key and auth token rote sends, in every form (raw, trimmed, escaped)."""
    env = os.environ if env is None else env
    for name in CREDENTIAL_ENV:
        register_credential(env.get(name))


def register_from_env(env: Mapping[str, str] | None = None) -> None:
    env = os.environ if env is None else env
    register_credentials(env)
    for name, value in env.items():
        if _SECRET_ENV.search(name):
            register_secret(value, min_chars=MIN_SCANNED_SECRET_CHARS)


def redact(text: str) -> str:
    # Longest first: a secret containing another is masked whole, not around the shorter.
    for secret in sorted(_secrets, key=len, reverse=True):
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

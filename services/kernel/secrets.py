"""Keeps secrets (API keys, passwords) out of logs, events and error replies.

Values of secret-looking environment variables (and the passwords of URLs held by any
variable) are registered at start-up, and the credentials rote hands to a client are
registered by name (`register_credential`, with the forms they take when quoted); every
log line and every error message passes through `redact`, which also hides the password
part of any URL, the values of credential query parameters and Authorization headers.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import quote, quote_plus, unquote

import msgspec

# The credentials rote itself hands to a client: registered whatever their length.
CREDENTIAL_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
# The scheme starts at a word boundary and is short: without both, a long unbroken run
# of letters (a base64 blob in a tool output) is rescanned from every position. The user
# may be empty (postgresql://:pw@host, nats://:token@host); it holds no `[`, so an IPv6
# host (http://[::1]:8080/a@b) is not taken for a user. The password is any run of
# non-whitespace up to the LAST `@` followed by something host-like: people write
# unencoded `/?#@` in DSN passwords (postgresql://u:pa/ss@h, redis://:pw#x@h), and
# stopping at any of them would leave the tail in the clear. A `"` is part of it
# (pa"ss), unless `,:;)]}>/` follows: then it ends a JSON string or an HTML attribute,
# and the next field's `@` must not be swallowed ({"u":"https://h:443","m":"a@b.c"}).
# An escaped `\"` never ends it. The price is over-masking when an `@` follows in the
# same run: https://host:443/@user and https://u:pw@h/p?mail=a@b.c lose everything up
# to the last `@`, which is rare and better than a leak. At most 256 characters (longer
# than any real DSN password or token): each `scheme://host:port` in a long unbroken run
# (minified text) is scanned that far for an `@`, not to the end of the run.
_URL_PASSWORD = re.compile(
    r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^:/@\s\[\]]*)"
    r":(?P<pw>(?:[^\s\"\\]|\\\S|\"(?![,:;)\]}>/])){1,256})@(?=[A-Za-z0-9\[])"
)
# NATS URLs take a token as their whole userinfo (nats://TOKEN@host); for other schemes
# a lone userinfo is a user name, not a secret.
_NATS_TOKEN = re.compile(r"(?P<scheme>\b(?:nats|tls|ws|wss)://)(?P<token>[^:/@\s]+)@")
# Query parameters that carry a credential, matched by their exact name: pagination
# cursors (page_token, next_token) and a page's signed links (sig, signature: short-lived
# grants for one URL, common on CDN images) stay readable, since a masked value in a
# tool's input keeps its run from ever compiling.
_QUERY_SECRET_NAMES = (
    "password|passwd|pwd|secret|client_secret|token|access_token|refresh_token|id_token"
    "|api_key|apikey|api-key|auth|auth_token|x-amz-security-token"
)
# Also after `#`: an OAuth implicit flow hands its token back in the fragment
# (/cb#access_token=...&token_type=bearer), no less live than a query one; it is masked
# (or kept, in a reply to the model) with them.
# The value runs to the next parameter (`&`), the fragment (`#`), whitespace or a double
# quote (the end of an HTML attribute or a JSON string; an escaped `\"` stays whole). A
# `'`, `<`, `>` or `\` written unencoded in text belongs to the value: stopping there
# leaves its tail in the clear (?password=abc'def), and over-masking an attribute quoted
# with `'` costs less.
_QUERY_SECRET = re.compile(
    rf"(?P<key>(?:[?&#]|&amp;)(?:{_QUERY_SECRET_NAMES})=)"
    r"(?P<value>(?:[^&#\s\"\\]|\\(?!\"))+)",
    re.IGNORECASE,
)
_KEY_SHAPES = re.compile(r"sk-ant-[A-Za-z0-9_-]{8,}")
# An Authorization header as `curl -v`, a request log or an echo service shows it
# (`Authorization: Basic dXNlcjpwdw==`, `"authorization": "Bearer ..."`): Basic holds a
# registered password only base64-encoded with its user, where no registered form
# matches. Only with a scheme word, so prose ("Authorization: required") stays; not a
# reference to a value ($TOKEN, <token>, {{token}}, an earlier mask): a command that
# names one holds no secret, and masked in a tool input it would keep its run from
# ever compiling.
_AUTH_NAME = r"(?:proxy-)?authorization"
_AUTH_CRED = r"(?:basic|bearer|token)\s+)(?P<cred>(?![$<{\[])[A-Za-z0-9+/=._~-]+)"
_AUTH_HEADER = re.compile(
    rf"(?P<key>\b{_AUTH_NAME}[\"']?\s*[:=]\s*[\"']?{_AUTH_CRED}", re.IGNORECASE
)
# The same header as an entry of a parsed value ({"Authorization": "Basic ..."}).
_AUTH_KEY = re.compile(_AUTH_NAME, re.IGNORECASE)
_AUTH_VALUE = re.compile(rf"(?P<key>\s*{_AUTH_CRED}", re.IGNORECASE)
MASK = "[redacted]"


def _keep_key(match: re.Match[str]) -> str:
    """The replacement that keeps a match's `key` group (a parameter or header name) and
    masks what follows it. A function, not a `\\g<key>` template: re.sub hands a
    template to Python-level code on every call, match or not, and redact runs on every
    string of every event."""
    return match.group("key") + MASK


# A value named as a credential (ANTHROPIC_API_KEY, a password given to rote) is masked
# from 4 characters up: a 4-character key is still a key, while 1-3 characters would mask
# ordinary words and numbers everywhere (and guard nothing: such a key is guessable).
MIN_SECRET_CHARS = 4
# A variable whose name only hints at a secret (..._KEY, ..._AUTH, ..._DSN) may hold a
# sort key or a mode: only long values are masked.
MIN_SCANNED_SECRET_CHARS = 8

_secrets: set[str] = set()
S = TypeVar("S", bound=msgspec.Struct)

# --- secret names ------------------------------------------------------------------------

# Words that name a secret wherever they stand (AWS_SECRET_ACCESS_KEY, SECRET_KEY_BASE).
_SECRET_WORDS = frozenset(
    {"PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "CREDENTIAL", "CREDENTIALS"}
)
# Words that name a secret as the last word only: TOKEN_URL is an endpoint, MYSQL_PWD a
# password.
_SECRET_LAST_WORDS = frozenset({"PWD", "PASS", "TOKEN", "PAT"})
# The same for weaker hints: CACHE_KEY_PREFIX is no secret, and SORT_KEY=name would mask
# "name" everywhere, hence the higher floor.
_HINT_LAST_WORDS = frozenset({"KEY", "APIKEY", "AUTH", "DSN"})
# Glued names: PGPASSWORD, APIKEY, MYTOKEN, GCPCREDENTIALS.
_SECRET_SUFFIX = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIALS?)$")
_HINT_SUFFIX = re.compile(r"KEY$")
# A name ending so says where a secret is (SSL_KEY_FILE, SSH_AUTH_SOCK), not what it is.
_LOCATOR_WORDS = frozenset({"FILE", "PATH", "DIR", "SOCK", "SOCKET"})
# PWD alone is the shell's working directory.
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})
# Values that are switches, not secrets, whatever the variable is called.
_FLAGS = frozenset(
    {"true", "false", "yes", "no", "on", "off", "none", "null", "enabled", "disabled"}
)


def secret_floor(name: str) -> int | None:
    """The length from which the value of variable `name` is masked; None when the name
    does not say it holds a secret. Case-insensitive: db_password is DB_PASSWORD."""
    upper = name.upper()
    words = [w for w in re.split(r"[^A-Z0-9]+", upper) if w]
    if not words or upper in _NOT_SECRET or words[-1] in _LOCATOR_WORDS:
        return None
    if (
        _SECRET_WORDS.intersection(words)
        or words[-1] in _SECRET_LAST_WORDS
        or _SECRET_SUFFIX.search(upper)
    ):
        return MIN_SECRET_CHARS
    if (
        words[-1] in _HINT_LAST_WORDS
        or _HINT_SUFFIX.search(upper)
        or "WEBHOOK" in words
        or upper.endswith("DATABASE_URL")
    ):
        return MIN_SCANNED_SECRET_CHARS
    return None


def is_secret_name(name: str) -> bool:
    return secret_floor(name) is not None


# Typed into a page: a form field or selector whose words say password, PIN, one-time
# code... (`#pw`, `newPassword`, `pin-code`, `input[type=password]`), not `#spinner`.
_FIELD_WORDS = frozenset(
    {"pass", "pwd", "pw", "secret", "token", "otp", "totp", "pin", "cvv", "cvc"}
)
_FIELD_SUFFIX = re.compile(r"(password|passwd|passcode|passphrase)$")
_FIELD_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def is_secret_field(name: str) -> bool:
    return any(
        word in _FIELD_WORDS or _FIELD_SUFFIX.search(word)
        for word in (w.lower() for w in _FIELD_WORD.findall(name))
    )


# --- registering -------------------------------------------------------------------------


def register_secret(value: str | None, *, min_chars: int = MIN_SECRET_CHARS) -> None:
    if value and len(value) >= min_chars:
        _secrets.add(value)


# A short secret (a 4-7 character password) is masked where it stands as a word of its
# own: as a substring, DB_PASSWORD=rote would mask "rote" inside every word holding it,
# and a mask in a tool output keeps that run from ever compiling. Dotted, dashed and
# slashed names count as one word too (rote.api.llm.complete, rote-runner, /srv/rote,
# rote@host, ROTE_X): only a `.` that ends a sentence ("password rote.") is a boundary.
# (A URL password is masked by _URL_PASSWORD, whatever its length.)
_SHORT_BEFORE = r"(?<![\w./@-])"
_SHORT_AFTER = r"(?![\w/@-]|\.\w)"
_short_pattern: tuple[tuple[str, ...], re.Pattern[str] | None] = ((), None)


def _by_length(value: str) -> tuple[int, str]:
    return len(value), value


def _short_secrets() -> re.Pattern[str] | None:
    global _short_pattern
    short = tuple(
        sorted((v for v in _secrets if len(v) < MIN_SCANNED_SECRET_CHARS), key=_by_length)
    )
    if short != _short_pattern[0]:
        words = "|".join(re.escape(v) for v in reversed(short))
        pattern = re.compile(rf"{_SHORT_BEFORE}(?:{words}){_SHORT_AFTER}") if short else None
        _short_pattern = (short, pattern)
    return _short_pattern[1]


# Go's encoding/json writes these so that JSON is safe inside HTML.
_GO_JSON_ESCAPES = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


def quoted_forms(value: str) -> set[str]:
    """`value` as error messages quote it: trimmed of surrounding whitespace, and with
    control characters escaped (repr of str or bytes, JSON): an HTTP library refusing a
    header shows the key as `b'Bearer abc\\r'`, where the raw value does not occur. And
    as a URL carries it: a form sent by GET puts a password in the page's address
    percent-encoded ("Tr0ub4dor%263+horse"), as a browser encodes a form: unlike
    quote_plus, `~` as %7E and `*` as it is; or as a page script does
    (encodeURIComponent). And as a file or a page writes it: JSON as PHP escapes it
    (`\\/`) or Go (`&<>` as `\\u0026`...), XML or HTML (`&amp;`)."""
    forms = {value, value.strip(), repr(value)[1:-1]}
    forms.add(value.encode("unicode_escape").decode("ascii"))
    forms.add(repr(value.encode("utf-8", "backslashreplace"))[2:-1])
    as_json = json.dumps(value, ensure_ascii=False)[1:-1]
    forms |= {json.dumps(value)[1:-1], as_json, as_json.replace("/", "\\/")}
    forms.add(as_json.translate(_GO_JSON_ESCAPES))
    forms |= {html.escape(value), html.escape(value, quote=False)}
    forms |= {quote(value, safe=""), quote(value), quote_plus(value)}
    forms.add(quote_plus(value, safe="*").replace("~", "%7E"))
    forms.add(quote(value, safe="!'()*"))  # a page script's encodeURIComponent
    return {form for form in forms if form}


def register_credential(value: str | None, *, min_chars: int = MIN_SECRET_CHARS) -> None:
    """A value rote sends as a credential: masked in every form it may be quoted in."""
    if value:
        for form in quoted_forms(value):
            register_secret(form, min_chars=min_chars)


def register_credentials(env: Mapping[str, str] | None = None) -> None:
    """The API key and auth token rote sends, in every form (raw, trimmed, escaped)."""
    env = os.environ if env is None else env
    for name in CREDENTIAL_ENV:
        register_credential(env.get(name))


def url_credentials(text: str) -> set[str]:
    """The passwords, NATS tokens and credential query values of the URLs in `text`, as
    written and percent-decoded (the form a client sends and may quote back)."""
    found = {m.group("pw") for m in _URL_PASSWORD.finditer(text)}
    found |= {m.group("token") for m in _NATS_TOKEN.finditer(text)}
    found |= {m.group("value") for m in _QUERY_SECRET.finditer(text)}
    return found | {unquote(value) for value in found}


def register_url_credentials(text: str | None) -> None:
    """The credentials in the URLs of `text` (a NATS URL, an event store URL): masked
    wherever they surface, decoded or quoted, not only inside a URL. Inside a URL any
    length is masked; outside, only from 8 characters: a dev password (`user:pass@`)
    would otherwise mask "pass" in every word holding it."""
    for secret in url_credentials(text or ""):
        register_credential(secret, min_chars=MIN_SCANNED_SECRET_CHARS)


def _worth_masking(value: str) -> bool:
    # A switch or a small count under a secret-looking name would mask ordinary words
    # and numbers in every output.
    plain = value.strip()
    return plain.lower() not in _FLAGS and not (
        plain.isdigit() and len(plain) < MIN_SCANNED_SECRET_CHARS
    )


def register_from_env(env: Mapping[str, str] | None = None) -> None:
    env = os.environ if env is None else env
    register_credentials(env)
    for name, value in env.items():
        floor = secret_floor(name)
        if floor is not None and _worth_masking(value):
            register_credential(value, min_chars=floor)
        register_url_credentials(value)


# --- masking -----------------------------------------------------------------------------


def redact(text: str, *, query: bool = True) -> str:
    """`text` with registered secrets, URL passwords, NATS tokens and key shapes masked,
    and with `query`, the values of credential URL parameters (query or fragment) too.
    Without it a tool's reply keeps its links working (a password-reset ?token=, a
    presigned X-Amz-Security-Token): the model must be able to follow them, while events
    and logs, which are kept, mask them."""
    # Longest first: a secret containing another is masked whole, not around the shorter.
    for secret in sorted(_secrets, key=len, reverse=True):
        if len(secret) >= MIN_SCANNED_SECRET_CHARS and secret in text:
            text = text.replace(secret, MASK)
    short = _short_secrets()
    if short is not None:
        text = short.sub(MASK, text)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group('scheme')}:{MASK}@", text)
    text = _NATS_TOKEN.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    if query:
        text = _QUERY_SECRET.sub(_keep_key, text)
    text = _AUTH_HEADER.sub(_keep_key, text)
    return _KEY_SHAPES.sub(MASK, text)


def redact_value(value: Any, *, query: bool = True) -> Any:
    """Redact every string inside a JSON-like value (see `redact` for `query`)."""
    if isinstance(value, str):
        return redact(value, query=query)
    if isinstance(value, dict):
        return _redact_dict(value, query=query, keys=True)
    if isinstance(value, list | tuple):
        return [redact_value(v, query=query) for v in value]
    return value


def _redact_dict(value: dict[Any, Any], *, query: bool, keys: bool) -> dict[Any, Any]:
    """`value` with its values redacted, and with `keys`, its keys too."""
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if isinstance(key, str) and isinstance(item, str) and _AUTH_KEY.fullmatch(key):
            item = _AUTH_VALUE.sub(_keep_key, item, count=1)
        if keys:
            key = _masked_key(key, out, query=query)
        out[key] = redact_value(item, query=query)
    return out


def _masked_key(key: Any, taken: Mapping[Any, Any], *, query: bool) -> Any:
    """A dict key redacted like a value (a page's or a command's output may be keyed by
    a token or a URL); masked keys that collide get a `#n` suffix, so no entry silently
    replaces another."""
    if not isinstance(key, str):
        return key
    masked = redact(key, query=query)
    if masked == key:
        return key
    unique, n = masked, 2
    while unique in taken:
        unique, n = f"{masked}#{n}", n + 1
    return unique


def redact_struct(value: S, *, query: bool = True) -> S | None:
    """A contract value with every string inside redacted: the same object when there
    was nothing to mask, None when masking broke one of its constraints (better to show
    nothing than the secret)."""
    plain = msgspec.to_builtins(value)
    # The struct's own field names are the contract's, never a secret: a replayed step
    # masks two structs, and their keys were most of the strings it scanned.
    if isinstance(plain, dict):
        masked = _redact_dict(plain, query=query, keys=False)
    else:
        masked = redact_value(plain, query=query)
    if masked == plain:
        return value
    try:
        return msgspec.convert(masked, type(value))
    except msgspec.ValidationError:
        return None

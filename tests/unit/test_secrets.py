"""What `redact` masks in any text that may reach a log, an event or an error."""

from __future__ import annotations

import json

import pytest

from services.kernel import secrets
from services.kernel.secrets import MASK, redact, register_credential, register_from_env


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("connect nats://s3cret-token@10.0.0.5:4222 failed", f"nats://{MASK}@10.0.0.5:4222"),
        ("nats://alice:hunter22@nats:4222", f"nats://alice:{MASK}@nats:4222"),
        ("tls://tok3n@a,wss://t0k@b", f"tls://{MASK}@a,wss://{MASK}@b"),
        ("postgresql://db/rote?password=pa55&sslmode=off", f"?password={MASK}&sslmode=off"),
        ("key sk-ant-api03-abcdefghijkl in a message", f"key {MASK} in a message"),
    ],
)
def test_credentials_in_urls_and_key_shapes_are_masked(text: str, shown: str) -> None:
    masked = redact(text)
    assert shown in masked
    for secret in ("s3cret-token", "hunter22", "tok3n", "t0k@", "pa55", "abcdefghijkl"):
        assert secret not in masked


def test_ordinary_urls_user_names_and_a_pages_own_tokens_are_left_alone() -> None:
    # A page's signed links are its content: masked, its run would never compile.
    text = "GET https://alice@example.test/news?page=2&token=abc and http://127.0.0.1:8000/"
    assert redact(text) == text


@pytest.fixture
def no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    # Registered secrets are process-wide: each test here starts from none.
    monkeypatch.setattr(secrets, "_secrets", set())


@pytest.mark.usefixtures("no_secrets")
def test_a_short_api_key_is_masked_but_short_scanned_values_are_not() -> None:
    register_from_env(
        {"ANTHROPIC_API_KEY": "k3y!", "ROTE_DEBUG_TOKEN": "on", "GITHUB_TOKEN": "ghp_1"}
    )
    assert redact("invalid x-api-key: 'k3y!'") == f"invalid x-api-key: '{MASK}'"
    # A variable found only by its name may hold a flag: short values stay readable.
    assert redact("debug on, token ghp_1") == "debug on, token ghp_1"


@pytest.mark.usefixtures("no_secrets")
def test_credentials_under_four_characters_would_mask_ordinary_text() -> None:
    register_credential("abc")
    assert redact("abc def") == "abc def"


@pytest.mark.usefixtures("no_secrets")
@pytest.mark.parametrize(
    ("key", "telling"),
    [
        ("litellm-master-key-abc\r", "master-key"),  # an env file with CRLF line ends
        ("team-key-7\r\n", "team-key"),
        ("in\rside-key", "side-key"),
    ],
)
def test_a_credential_is_masked_raw_trimmed_and_escaped(key: str, telling: str) -> None:
    register_credential(key)
    escaped = key.encode("unicode_escape").decode()
    quoted = [
        f"raw {key} end",
        f"sent {key.strip()} end",
        f"Illegal header value b'Bearer {escaped}'",  # how httpx quotes a refused header
        json.dumps({"key": key}),
        repr(key),
    ]
    for text in quoted:
        masked = redact(text)
        assert MASK in masked
        assert telling not in masked, masked

"""What `redact` masks in any text that may reach a log, an event or an error."""

from __future__ import annotations

import pytest

from services.kernel.secrets import MASK, redact


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

"""Masking in the harder places: credentials in a URL fragment, a URL password holding
a `"`, a secret cut in half (masked before the cut), Authorization headers, and dict
keys."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from playwright.async_api import Error as PlaywrightError

from services.kernel import secrets
from services.kernel.errors import ServiceError
from services.kernel.secrets import (
    MASK,
    redact,
    redact_value,
    register_secret,
    register_url_credentials,
)
from services.tools import browser_errors
from services.tools.browser import BrowserConfig, BrowserPool, BrowserUnavailable
from services.tools.specs import validate_input
from services.tools.toolbox import ToolBox, ToolsConfig

TOKEN = "ya29.SECRETFRAGTOKEN"
REGISTERED = "Reg1stered-Secret-Value-0042"


@pytest.fixture(autouse=True)
def no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "_secrets", set())


# --- 1. credentials in a URL fragment ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # OAuth implicit flow: the token comes back in the fragment.
        (
            f"https://app.test/cb#access_token={TOKEN}&token_type=bearer",
            f"https://app.test/cb#access_token={MASK}&token_type=bearer",
        ),
        (
            f'{{"url": "https://app.test/cb#id_token={TOKEN}"}}',
            f'{{"url": "https://app.test/cb#id_token={MASK}"}}',
        ),
        # After `&` within a fragment, and after a query.
        (
            f"https://app.test/cb?x=1#state=abc&access_token={TOKEN}",
            f"https://app.test/cb?x=1#state=abc&access_token={MASK}",
        ),
        (f"/cb#Password={TOKEN} next", f"/cb#Password={MASK} next"),
    ],
)
def test_fragment_credentials_are_masked(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert TOKEN not in redact_value({"output": [text]})["output"][0]


def test_fragment_credentials_follow_the_query_switch() -> None:
    # A reply to the model keeps credential parameters (its links must work), fragment
    # ones as query ones; events and logs mask both.
    url = f"https://app.test/cb#access_token={TOKEN}&token_type=bearer"
    assert redact(url, query=False) == url
    assert TOKEN not in redact(url)


def test_plain_fragments_are_left_alone() -> None:
    for text in ("https://d.test/page#section-2", "/a#page_token=p2&sig=abc", "#tokens"):
        assert redact(text) == text


def test_a_fragment_credential_in_a_variable_is_registered() -> None:
    register_url_credentials(f"https://app.test/cb#access_token={TOKEN}")
    assert redact(f"the token was {TOKEN}.") == f"the token was {MASK}."


# --- 2. a URL password holding a raw `"` ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('https://user:pa"ss@host/', f"https://user:{MASK}@host/"),
        ('postgresql://u:"quoted"pw@db/rote', f"postgresql://u:{MASK}@db/rote"),
        ('dsn=redis://:x"y"z@cache:6379 up', f"dsn=redis://:{MASK}@cache:6379 up"),
    ],
)
def test_a_url_password_with_a_quote_is_masked(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        # A `"` that ends a JSON string or an HTML attribute still ends the URL: the
        # next field's `@` is no password's end.
        '{"u":"https://h:443","m":"a@b.c"}',
        '["https://h:8443"]@x',
        '{"u":"https://h:443"}@h',
        '<a href="https://h:8080">me@x.com</a>',
        '<img src="https://h:8080/a.png"/><a href="mailto:me@x.com">',
        'u="https://h:443";m="a@b.c"',
        'log("https://h:443")@h',
    ],
)
def test_a_quote_ending_a_string_does_not_mask_what_follows(text: str) -> None:
    assert redact(text) == text


# --- 3. masked before a cut -------------------------------------------------------------

# A URL whose password straddles any cut between 120 and 350 characters.
_LONG_USER = "u" * 100
_LONG_PW = "P" * 250
LONG_URL = f"ftp://{_LONG_USER}:{_LONG_PW}@files.test/x"


def _leaks(text: str) -> bool:
    """Whether `text`, redacted as a reply or event would be, shows part of a secret."""
    shown = redact(text)
    return "P" * 12 in shown or REGISTERED[:8] in shown


def test_a_refused_url_is_masked_before_it_is_cut() -> None:
    with pytest.raises(ServiceError) as caught:
        validate_input("browser_navigate", {"url": LONG_URL})
    assert "only http(s) URLs" in caught.value.message
    assert not _leaks(caught.value.message)

    register_secret(REGISTERED)
    url = "ftp://files.test/" + "a" * 185 + REGISTERED + "b" * 400
    with pytest.raises(ServiceError) as caught:
        validate_input("browser_navigate", {"url": url})
    assert not _leaks(caught.value.message)


def _error_at_cut(cut: int) -> PlaywrightError:
    """A Playwright error whose first line holds the registered secret across `cut`."""
    line = "x" * (cut - 16) + " " + REGISTERED + " tail " + "y" * 400
    return PlaywrightError(line + "\nCall log:\n  - more")


def test_a_playwright_error_line_is_masked_before_it_is_cut() -> None:
    register_secret(REGISTERED)
    cut = browser_errors.MAX_ERROR_LINE_CHARS
    for error in (
        _error_at_cut(cut),
        PlaywrightError("net::ERR_FAILED at " + "x" * 300 + " " + LONG_URL),
    ):
        line = browser_errors.first_line(error)
        assert len(line) <= browser_errors.MAX_ERROR_LINE_CHARS
        assert not _leaks(line)


def test_a_browser_failure_is_masked_before_it_is_cut(tmp_path: Path) -> None:
    register_secret(REGISTERED)
    pool = cast(BrowserPool, SimpleNamespace(connected=True))
    box = ToolBox(ToolsConfig(data_dir=tmp_path), pool)
    failure = box._browser_failure(_error_at_cut(browser_errors.MAX_ERROR_LINE_CHARS))
    assert failure.code == "browser_error"
    assert not _leaks(failure.message)


class _Chromium:
    executable_path = None

    async def launch(self, **_: Any) -> None:
        raise _error_at_cut(300)


@pytest.mark.anyio
async def test_a_launch_failure_is_masked_before_it_is_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    register_secret(REGISTERED)
    monkeypatch.setenv("PATH", "/nonexistent")  # no system chromium: only the configured
    pool = BrowserPool(BrowserConfig(chromium="/opt/fake-chromium"))
    pool._playwright = cast(Any, SimpleNamespace(chromium=_Chromium()))
    with pytest.raises(BrowserUnavailable) as caught:
        await pool._launch_once()
    assert "/opt/fake-chromium" in str(caught.value)
    assert not _leaks(str(caught.value))


# --- 4. dict keys ------------------------------------------------------------------------


def test_secret_dict_keys_are_masked() -> None:
    key = "sk-ant-api03-abcdefghijkl"
    other = "sk-ant-api03-mnopqrstuvwx"
    value = {key: "v", "plain": {other: 1}, "list": [{f"/cb#access_token={TOKEN}": 2}]}
    assert redact_value(value) == {
        MASK: "v",
        "plain": {MASK: 1},
        "list": [{f"/cb#access_token={MASK}": 2}],
    }


def test_masked_keys_that_collide_keep_every_entry() -> None:
    register_secret(REGISTERED)
    value = {"sk-ant-api03-abcdefghijkl": 1, REGISTERED: 2, "x": 3, 4: "int key"}
    assert redact_value(value) == {MASK: 1, f"{MASK}#2": 2, "x": 3, 4: "int key"}


def test_plain_keys_are_untouched() -> None:
    value = {"token": "t", "password_fields": ["#pw"], "https://h/?page=2": 1}
    assert redact_value(value) == value


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # curl -v: the password is registered, but only its base64 with the user shows.
        ("> Authorization: Basic cm90ZTpodW50ZXIy\r\n> Accept: */*", f"Basic {MASK}\r\n"),
        ('{"headers": {"Authorization": "Bearer eyJhbGciOi.J9x_y-z"}}', f'"Bearer {MASK}"'),
        ("proxy-authorization=token ghp_abc123def456", f"=token {MASK}"),
        ("authorization: bearer abcd", f"bearer {MASK}"),
    ],
)
def test_authorization_headers_are_masked(text: str, shown: str) -> None:
    masked = redact(text)
    assert shown in masked
    for secret in ("cm90ZTpodW50ZXIy", "eyJhbGciOi", "ghp_abc123def456", "abcd"):
        assert secret not in masked


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: required for this endpoint",
        'curl -H "Authorization: Bearer $API_TOKEN" https://api.test/v1',
        "Authorization: Bearer ${TOKEN}",
        "Authorization: Bearer <your token>",
        "Authorization: Bearer {{token}}",
    ],
)
def test_authorization_prose_and_references_are_left_alone(text: str) -> None:
    """A command naming a variable holds no secret: masked, its run would never compile."""
    assert redact(text) == text


def test_an_authorization_entry_of_a_parsed_value_is_masked() -> None:
    value = {"headers": {"Authorization": "Basic cm90ZTpodW50ZXIy", "Accept": "text/html"}}
    assert redact_value(value) == {
        "headers": {"Authorization": f"Basic {MASK}", "Accept": "text/html"}
    }
    assert redact_value({"authorization": "Bearer $TOKEN"}) == {"authorization": "Bearer $TOKEN"}

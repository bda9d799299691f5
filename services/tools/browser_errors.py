"""How a browser tool's failure quotes what Playwright said and the URL it was given."""

from __future__ import annotations

from playwright.async_api import Error as PlaywrightError

from services.kernel.text import cut_text
from services.tools.bounds import MAX_QUOTED_URL_CHARS

# The first line of a Playwright error, as a failure quotes it.
MAX_ERROR_LINE_CHARS = 500


def first_line(exc: PlaywrightError, limit: int = MAX_ERROR_LINE_CHARS) -> str:
    """The first line of what Playwright said, cut to `limit` (the exception's type when
    it said nothing)."""
    text = (exc.message or str(exc)).strip()
    # Masked before the cut (cut_text): half a secret no longer looks like one.
    return cut_text(text.splitlines()[0], limit) if text else type(exc).__name__


def quoted(url: str) -> str:
    """A URL as an error message quotes it: the call's input may be up to a megabyte."""
    return cut_text(url, MAX_QUOTED_URL_CHARS)


def is_selector_syntax(exc: PlaywrightError) -> bool:
    text = exc.message or str(exc)
    return any(
        marker in text
        for marker in ("is not a valid selector", "Unexpected token", "SyntaxError", "parse")
    )

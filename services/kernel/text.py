"""Cutting text to fit a limit: the one helper for a message, a title or a URL quoted in
an error, a page's text in a tool's output, and an answer that must fit one NATS
message. Secrets are masked before a cut: half a password (a URL's, cut inside its
userinfo) no longer looks like one to the redaction that runs later."""

from __future__ import annotations

from collections.abc import Callable

from services.kernel.codec import encode
from services.kernel.secrets import redact

# Ends a string read as one piece (a title, a URL, a message) that was cut.
ELLIPSIS = "\u2026"
# Ends a tool output's text that was cut (a page, a file, a command's output).
TRUNCATION_MARK = "\n[... truncated]"


def json_size(text: str) -> int:
    """Bytes `text` takes as a JSON string (quotes, escapes, UTF-8)."""
    return len(encode(text))


def cut_text(
    text: str,
    limit: int,
    *,
    mark: str = ELLIPSIS,
    size: Callable[[str], int] = len,
    mark_after_limit: bool = False,
) -> str:
    """`text` if it fits in `limit` (as `size` measures it: characters by default);
    else, masked, the longest head of it that fits with `mark` after it. With
    `mark_after_limit` the head alone fits `limit` and the mark follows it (a tool's
    output: its text is cut as soon as it is over `limit`, and `limit` of it is kept).
    A text that only masking changed is returned masked; callers that must know whether
    anything was cut compare the result with what they passed, or its size with `limit`."""
    if size(text) <= limit:
        return text
    text = redact(text)
    if size(text) <= limit:
        return text
    if not mark_after_limit and size(mark) > limit:
        mark = ""  # no room for the mark: the head alone
    tail = "" if mark_after_limit else mark  # what must fit in `limit` after the head
    if size is len:
        return text[: max(0, limit - len(tail))] + mark
    # Any other measure (JSON bytes: escapes and multi-byte characters) is searched for,
    # among heads no longer than `limit`: no character measures less than one.
    lo, hi = 0, min(len(text), max(0, limit))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(text[:mid] + tail) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + mark

"""How much of a run's outcome its events carry: a terminal event must fit one NATS
message (the server refuses a larger one, and a run whose ending cannot be published
is redelivered and runs again). No NATS here: service.py stores what is cut off."""

from __future__ import annotations

from services.kernel.codec import encode

# An error quotes what broke the run (a tool's error, a model's refusal), each bounded
# where it comes from; this bounds what they add up to in one event.
MAX_EVENT_ERROR_CHARS = 4000
# A stand-in for the reference the event will carry, to measure the event with it.
REF_PLACEHOLDER = "sha256:" + "0" * 64


def json_size(text: str) -> int:
    """Bytes `text` takes in an event (JSON: quotes, escapes, UTF-8)."""
    return len(encode(text))


def head_within(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` that takes at most `max_bytes` as JSON (escapes and
    multi-byte characters make that fewer characters than bytes)."""
    if json_size(text) <= max_bytes:
        return text
    lo, hi = 0, min(len(text), max(0, max_bytes))  # a character takes at least one byte
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if json_size(text[:mid]) <= max_bytes:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]

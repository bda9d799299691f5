"""Redaction of tool inputs and outputs for events, at a cost linear in their size.

The kernel's `redact` is quadratic on long unbroken runs of letters and digits (its URL
password pattern retries at every position of such a run: 200 KB of base64 takes over a
minute). Tool outputs can hold exactly that, so long strings are redacted piece by
piece: whitespace never belongs to a key or a URL password, so splitting there changes
nothing, and an unbroken run longer than PIECE is cut into PIECE-sized pieces.
"""

from __future__ import annotations

import re
from typing import Any

from services.kernel.secrets import redact

PIECE = 1024
_WHITESPACE = re.compile(r"(\s+)")


def redact_text(text: str) -> str:
    if len(text) <= PIECE:
        return redact(text)
    out: list[str] = []
    batch: list[str] = []
    size = 0

    def flush() -> None:
        nonlocal size
        if batch:
            out.append(redact("".join(batch)))
            batch.clear()
            size = 0

    # Whole whitespace-separated words, batched up to PIECE characters.
    for part in _WHITESPACE.split(text):
        if len(part) > PIECE:
            flush()
            out.extend(redact(part[i : i + PIECE]) for i in range(0, len(part), PIECE))
            continue
        if size + len(part) > PIECE:
            flush()
        batch.append(part)
        size += len(part)
    flush()
    return "".join(out)


def redact_json(value: Any) -> Any:
    """Every string inside a JSON-like value, redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_json(v) for v in value]
    return value

"""Bounding outputs so a page, a file or a command cannot blow past NATS' 1 MB payload:
strings are cut (on a character boundary), lists lose their tail, and the caller learns
that something was cut."""

from __future__ import annotations

from typing import Any

import msgspec

TRUNCATION_MARK = "\n[... truncated]"


def bound_text(text: str, max_chars: int) -> tuple[str, bool]:
    if len(text) <= max_chars:
        return text, False
    return text[:max_chars] + TRUNCATION_MARK, True


def encoded_size(value: Any) -> int:
    return len(msgspec.json.encode(value))


def _cut(value: Any, max_string: int, max_items: int) -> tuple[Any, bool]:
    if isinstance(value, str):
        return bound_text(value, max_string)
    if isinstance(value, list):
        cut = len(value) > max_items
        items = []
        for item in value[:max_items]:
            bounded, c = _cut(item, max_string, max_items)
            items.append(bounded)
            cut = cut or c
        return items, cut
    if isinstance(value, dict):
        out = {}
        cut = False
        for key, item in value.items():
            bounded, c = _cut(item, max_string, max_items)
            out[key] = bounded
            cut = cut or c
        return out, cut
    return value, False


def bound_value(value: Any, max_bytes: int) -> tuple[Any, bool]:
    """A JSON value whose encoding fits in about `max_bytes`, and whether it was cut.
    Halves the longest string and list allowed until it fits; an untouched value is
    returned as is."""
    if encoded_size(value) <= max_bytes:
        return value, False
    max_string, max_items = max_bytes, max(1, max_bytes // 16)
    while True:
        bounded, _ = _cut(value, max_string, max_items)
        if encoded_size(bounded) <= max_bytes or (max_string <= 64 and max_items <= 1):
            return bounded, True
        max_string = max(64, max_string // 2)
        max_items = max(1, max_items // 2)

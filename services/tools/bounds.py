"""Bounding outputs so a page, a file or a command cannot blow past NATS' 1 MB payload:
strings (dict keys included) are cut on a character boundary, lists and dicts lose
their tail, and the caller learns that something was cut. What still does not fit
becomes a small placeholder: the bound always holds."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from contracts.tools import ToolMetadata
from services.kernel.text import TRUNCATION_MARK, cut_text

# Metadata strings the page chooses (its title, its URL) ride in every reply and
# finished event beside the bounded output, and become replay expectations: held to
# what a person would still read, far under NATS' 1 MB payload.
MAX_TITLE_CHARS = 1024
MAX_URL_CHARS = 8 * 1024
# A URL quoted in an error message: enough to recognise it.
MAX_QUOTED_URL_CHARS = 300


# A lone UTF-16 surrogate. A JavaScript string may hold one (an emoji a script cut in
# half with `slice`), and Playwright hands it to Python as it is, but UTF-8 (JSON, NATS)
# cannot encode it. A whole pair arrives as one character, so any surrogate is lone.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD, as a browser encodes it."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def well_formed_value(value: Any) -> Any:
    if isinstance(value, str):
        return well_formed(value)
    if isinstance(value, list):
        return [well_formed_value(item) for item in value]
    if isinstance(value, dict):
        return {well_formed_value(key): well_formed_value(item) for key, item in value.items()}
    return value


def bound_metadata(metadata: ToolMetadata) -> ToolMetadata:
    """The metadata with its page-chosen strings cut (the same object if none was)."""
    url = None if metadata.url is None else cut_text(well_formed(metadata.url), MAX_URL_CHARS)
    title = (
        None if metadata.title is None else cut_text(well_formed(metadata.title), MAX_TITLE_CHARS)
    )
    if url == metadata.url and title == metadata.title:
        return metadata
    return msgspec.structs.replace(metadata, url=url, title=title)


def encoded_size(value: Any) -> int:
    return len(msgspec.json.encode(value))


def _cut_key(key: Any, max_string: int, taken: dict[Any, Any]) -> tuple[Any, bool]:
    """A key cut like any string; one that then collides with a key already kept gets a
    `#n` suffix, so no entry silently replaces another."""
    if not isinstance(key, str):
        return key, False
    cut_key = cut_text(key, max_string, mark=TRUNCATION_MARK, mark_after_limit=True)
    if cut := len(key) > max_string:
        n, unique = 2, cut_key
        while unique in taken:
            unique, n = f"{cut_key}#{n}", n + 1
        cut_key = unique
    return cut_key, cut


def _cut(value: Any, max_string: int, max_items: int) -> tuple[Any, bool]:
    if isinstance(value, str):
        # `max_string` of its text, then the mark. A string over the limit that masking
        # alone made fit still counts as cut: the output is not what was read.
        bounded = cut_text(value, max_string, mark=TRUNCATION_MARK, mark_after_limit=True)
        return bounded, len(value) > max_string
    if isinstance(value, list):
        cut = len(value) > max_items
        items = []
        for item in value[:max_items]:
            bounded, c = _cut(item, max_string, max_items)
            items.append(bounded)
            cut = cut or c
        return items, cut
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        cut = len(value) > max_items
        for i, (key, item) in enumerate(value.items()):
            if i >= max_items:
                break
            bounded_key, k = _cut_key(key, max_string, out)
            bounded, c = _cut(item, max_string, max_items)
            out[bounded_key] = bounded
            cut = cut or c or k
        return out, cut
    return value, False


def placeholder(size: int, max_bytes: int) -> Any:
    """What stands for a value that cannot be cut down to `max_bytes`: a marker that
    says so and how big it was; null when even that does not fit."""
    marker = {"truncated": True, "bytes": size}
    return marker if encoded_size(marker) <= max_bytes else None


def bound_value(value: Any, max_bytes: int) -> tuple[Any, bool]:
    """A JSON value whose encoding fits in `max_bytes` (at least 4, for `null`), and
    whether it was cut. Halves the longest string (or key) and the most items of a list
    or dict allowed until it fits; an untouched value is returned as is. Lone surrogates
    (see well_formed) become U+FFFD: that alone is no cut."""
    try:
        size = encoded_size(value)
    except UnicodeEncodeError:  # only a lone surrogate makes it unencodable
        value = well_formed_value(value)
        size = encoded_size(value)
    if size <= max_bytes:
        return value, False
    max_string, max_items = max_bytes, max(1, max_bytes // 16)
    try:
        while True:
            bounded, _ = _cut(value, max_string, max_items)
            if encoded_size(bounded) <= max_bytes:
                return bounded, True
            if max_string <= 64 and max_items <= 1:
                break
            max_string = max(64, max_string // 2)
            max_items = max(1, max_items // 2)
    except RecursionError:  # nested deeper than Python's stack: cut it all
        pass
    return placeholder(size, max_bytes), True

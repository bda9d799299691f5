"""Checks a replayed step's result against what the compiler expected of it, and the
gate of a condition step. Pure: the runner's replay calls these with what the tools
service answered."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from contracts.executors import (
    ConditionStep,
    ContainsText,
    ExitCode,
    Expectation,
    HttpStatus,
    InList,
    MinItems,
    ValueLike,
)
from contracts.tools import ToolMetadata
from services.executor import references


def text_items(text: str) -> int:
    """The items of a text a MinItems expectation counts: its non-blank lines (a page's
    headings, paragraphs, list entries)."""
    return sum(1 for line in text.splitlines() if line.strip())


def output_text(output: Any) -> str:
    """The text a ContainsText expectation searches: strings as they are, else JSON."""
    return references.stringify(output)


def check(
    expectation: Expectation,
    output: Any,
    metadata: ToolMetadata | None = None,
    outputs: Mapping[int, Any] | None = None,
) -> str | None:
    """None when the expectation holds, else why it does not (a replay failure reason).
    `outputs` (earlier steps' outputs by index) is needed by InList."""
    meta = metadata or ToolMetadata()
    got: Any
    match expectation:
        case MinItems(count=count) if isinstance(output, str):
            # A page read is a list of lines: an empty page or a one-line placeholder
            # ("Loading...") is not the page the executor was compiled from.
            got = text_items(output)
            if got < count:
                return f"expected a text of at least {count} non-blank lines, got {got}"
        case MinItems(count=count):
            if not isinstance(output, list):
                return f"expected a list of at least {count} items, got {type(output).__name__}"
            if len(output) < count:
                return f"expected at least {count} items, got {len(output)}"
        case ContainsText(text=text):
            if text not in output_text(output) and text not in (meta.title or ""):
                return f"expected the text {text!r}"
        case HttpStatus(status=status):
            got = meta.http_status
            if got is None and isinstance(output, dict):
                got = output.get("status")
            if got != status:
                return f"expected HTTP status {status}, got {got}"
        case ExitCode(code=code):
            got = meta.exit_code
            if got is None and isinstance(output, dict):
                got = output.get("exit_code")
            if got != code:
                return f"expected exit code {code}, got {got}"
        case InList(ref=ref, path=path):
            return _in_list(output, ref, tuple(path), outputs or {})
        case ValueLike(shape=shape, max_chars=max_chars):
            return _unlike(references.stringify(output).strip(), shape, max_chars)
    return None


Shape = Literal["number", "url", "line", "text"]
# A number as written in a form or a query: 42, -3.5, 1,299.00, 2e3.
_NUMBER = re.compile(r"[-+]?(\d+([.,]\d+)*|\.\d+)([eE][-+]?\d+)?")
# Room a fresh value gets beyond the old one's length: today's may well be longer.
MIN_VALUE_CHARS = 100


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return math.isfinite(value)
    return isinstance(value, str) and _NUMBER.fullmatch(value.strip()) is not None


def _is_url(text: str) -> bool:
    parts = urlsplit(text)
    return (
        parts.scheme in ("http", "https")
        and bool(parts.netloc)
        and not any(c.isspace() for c in text)
    )


def shape_of(value: Any) -> ValueLike:
    """What a fresh value in place of `value` (recorded) must look like."""
    text = references.stringify(value).strip()
    shape: Shape
    if _is_number(value):
        shape = "number"
    elif isinstance(value, str) and _is_url(text):
        shape = "url"
    elif not isinstance(value, dict | list) and len(text.splitlines()) <= 1:
        shape = "line"
    else:
        shape = "text"
    return ValueLike(shape=shape, max_chars=max(MIN_VALUE_CHARS, 4 * len(text)))


def _unlike(text: str, shape: Shape, max_chars: int) -> str | None:
    if not text:
        return "the small model wrote no value"
    if len(text) > max_chars:
        return f"the small model's value is {len(text)} characters, more than {max_chars}"
    if shape == "number" and not _is_number(text):
        return f"expected a number, the small model wrote {text[:80]!r}"
    if shape == "url" and not _is_url(text):
        return f"expected an http(s) URL, the small model wrote {text[:80]!r}"
    lines = len(text.splitlines())
    if shape == "line" and lines > 1:
        return f"expected one line, the small model wrote {lines}"
    return None


def _in_list(
    output: Any, ref: str, path: references.Path, outputs: Mapping[int, Any]
) -> str | None:
    try:
        items = references.render(ref, outputs)
    except references.BadReference as exc:
        return str(exc)
    if not isinstance(items, list):
        return f"{ref} is not a list"
    allowed = set()
    for item in items:
        try:
            allowed.add(references.stringify(references.lookup(item, path)).strip())
        except (KeyError, IndexError, TypeError):
            continue
    answer = references.stringify(output).strip()
    if answer not in allowed:
        return f"{answer[:80]!r} is not one of the {len(allowed)} items of {ref}"
    return None


def check_all(
    expectations: list[Expectation],
    output: Any,
    metadata: ToolMetadata | None = None,
    outputs: Mapping[int, Any] | None = None,
) -> str | None:
    """The first failed expectation's reason, or None when all hold."""
    for expectation in expectations:
        reason = check(expectation, output, metadata, outputs)
        if reason is not None:
            return reason
    return None


def condition_holds(step: ConditionStep, outputs: Mapping[int, Any]) -> bool:
    """Evaluate a condition step against the outputs so far. A reference that cannot be
    resolved counts as false (the data the gate needs is not there)."""
    try:
        value = references.render(step.ref, outputs)
    except references.BadReference:
        return False
    match step.check:
        case "not_empty":
            return value not in (None, "", [], {})
        case "contains":
            return str(step.value) in output_text(value)
        case "equals":
            return bool(value == step.value)
    return False

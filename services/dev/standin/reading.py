"""What the stand-in reads out of tool outputs: list items, prices, the cheapest
priced item, a confirmation line, a detail's value; and how it writes a numbered list."""

from __future__ import annotations

import re
from typing import Any

from services.dev.standin.conversation import Step

_CONFIRMATION_WORDS = ("confirm", "thank", "success", "received")


def collapse(value: Any) -> str:
    return " ".join(str(value).split())


def format_list(title: str, items: list[Any]) -> str:
    lines = [f"{i}. {collapse(item)}" for i, item in enumerate(items, 1)]
    return "\n".join([title, *lines])


def parse_price(value: Any) -> float | None:
    """The first number in a price string: "$1,299.00" -> 1299.0."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        return None
    found = re.search(r"\d[\d,]*(?:\.\d+)?|\.\d+", value)
    if not found:
        return None
    try:
        return float(found.group(0).replace(",", ""))
    except ValueError:
        return None


def cheapest(items: Any) -> dict[str, Any] | None:
    """The first item with the lowest readable price that also has a name."""
    best: tuple[float, dict[str, Any]] | None = None
    if not isinstance(items, list):
        return None
    for item in items:
        if not isinstance(item, dict) or not item.get("name"):
            continue
        price = parse_price(item.get("price"))
        if price is not None and (best is None or price < best[0]):
            best = (price, item)
    return None if best is None else best[1]


def confirmation_line(text: str) -> str | None:
    for line in text.splitlines():
        if any(word in line.lower() for word in _CONFIRMATION_WORDS) and line.strip():
            return collapse(line)
    return None


def detail_value(text: str, detail: str) -> str | None:
    wanted = detail.lower()
    for line in text.splitlines():
        lower = line.lower()
        if wanted in lower:
            after = re.search(re.escape(wanted) + r"\s*[:=]\s*(?P<v>.+)", line, re.IGNORECASE)
            return collapse(after.group("v") if after else line)
    return None


def string_items(step: Step) -> list[str] | None:
    if not step.ok or not isinstance(step.output, list):
        return None
    return [item for item in step.output if isinstance(item, str) and item.strip()]

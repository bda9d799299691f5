"""Condition predicates: small declarative tests on a tool's output.

`path` picks a value out of structured output (`stdout`, `items.0.price`); without it
the whole output is tested. Text tests see the value as text (JSON for structures);
number tests use the value itself when it is a number, else the first number written in
its text (`"Use% 85%"` -> 85, `"$1,299.00"` -> 1299.0).
"""

from __future__ import annotations

import json
import re
from typing import Any

from contracts.tasks import Above, Below, Contains, NotContains, Predicate

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")


class ConditionError(ValueError):
    """The output does not have what the predicate needs (no such path, no number)."""


def value_at(output: Any, path: str | None) -> Any:
    """Follow a dotted path through dicts and lists (list items by index). Output that
    is a JSON string is parsed first, so a path works on a tool that returns JSON text."""
    if not path:
        return output
    current = output
    walked: list[str] = []
    for part in path.split("."):
        if isinstance(current, str):
            try:
                current = json.loads(current)
            except ValueError:
                raise ConditionError(
                    f"cannot follow {path!r}: {'.'.join(walked) or 'output'} is text"
                ) from None
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.lstrip("-").isdigit():
            index = int(part)
            if not -len(current) <= index < len(current):
                raise ConditionError(f"no item {index} at {'.'.join(walked) or 'output'}")
            current = current[index]
        else:
            raise ConditionError(f"no {part!r} at {'.'.join(walked) or 'output'}")
        walked.append(part)
    return current


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def as_number(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    match = _NUMBER.search(as_text(value))
    if match is None:
        raise ConditionError(f"no number in {as_text(value)[:80]!r}")
    return float(match.group().replace(",", ""))


def holds(predicate: Predicate, output: Any) -> bool:
    """Whether the predicate is true of the output. Raises ConditionError when the
    output lacks what the predicate tests (treated as "not true" by the scheduler)."""
    value = value_at(output, predicate.path)
    match predicate:
        case Contains(text=text):
            return text in as_text(value)
        case NotContains(text=text):
            return text not in as_text(value)
        case Above(value=limit):
            return as_number(value) > limit
        case Below(value=limit):
            return as_number(value) < limit
    raise TypeError(f"unknown predicate {predicate!r}")

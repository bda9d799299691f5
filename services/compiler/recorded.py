"""What a trace step recorded, read the same way by every part of the compiler: whether
an output holds anything, the HTTP status and page title a navigation reported, and
the input values the data flow classifies."""

from __future__ import annotations

import json
from typing import Any

from contracts.traces import TraceStep
from services.executor import references
from services.executor.references import Path
from services.executor.toolkinds import value_kind


def non_empty(output: Any) -> bool:
    return output not in (None, "", [], {})


def http_status(step: TraceStep) -> int | None:
    """The HTTP status the step reported (in its metadata, else in its output)."""
    status = step.metadata.http_status
    if status is None and isinstance(step.output, dict):
        raw = step.output.get("status")
        status = raw if isinstance(raw, int) else None
    return status


def http_error(step: TraceStep) -> bool:
    status = http_status(step)
    return status is not None and status >= 400


def page_title(step: TraceStep) -> str:
    """The page title the step reported (in its metadata, else in its output), or ""."""
    title = step.metadata.title
    if not title and isinstance(step.output, dict):
        raw = step.output.get("title")
        title = raw if isinstance(raw, str) else None
    return (title or "").strip()


def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def input_values(step: TraceStep) -> list[tuple[Path, str]]:
    """The input values the data flow classifies: every string, and every number typed
    as data (a form takes 1.0834 as well as "1.0834", and it came from the page just as
    surely), as its JSON text."""
    values = list(references.leaves(step.input))

    def numbers(value: Any, path: Path) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                numbers(item, (*path, key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                numbers(item, (*path, i))
        elif (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and value_kind(step.tool, path) == "data"
        ):
            values.append((path, json.dumps(value)))

    numbers(step.input, ())
    return values
